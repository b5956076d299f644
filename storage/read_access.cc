// Readers' permissions, by the kernel or by bits; see read_access.h.
#include "storage/read_access.h"

#include <sys/fsuid.h>
#include <sys/syscall.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace batchd {

namespace {

// The POSIX ACL as Linux stores it in system.posix_acl_access: a version
// word (2), then entries of (tag, perm, id), little-endian. The owner's
// entry (tag 0x01) is the mode's owner bits, read from the mode.
constexpr uint16_t kAclUser = 0x02;
constexpr uint16_t kAclGroupObj = 0x04;
constexpr uint16_t kAclGroup = 0x08;
constexpr uint16_t kAclMask = 0x10;
constexpr uint16_t kAclOther = 0x20;

struct AclEntry {
  uint16_t tag;
  uint16_t perm;
  uint32_t id;
};

// The access ACL of `path`; empty when it has none (its mode says all).
std::vector<AclEntry> AccessAcl(const std::string& path) {
  std::vector<AclEntry> out;
  char buf[4096];
  const ssize_t n =
      getxattr(path.c_str(), "system.posix_acl_access", buf, sizeof(buf));
  if (n < 4) return out;
  uint32_t version;
  memcpy(&version, buf, 4);
  if (version != 2) return out;
  for (ssize_t off = 4; off + 8 <= n; off += 8) {
    AclEntry e;
    memcpy(&e.tag, buf + off, 2);
    memcpy(&e.perm, buf + off + 2, 2);
    memcpy(&e.id, buf + off + 4, 4);
    out.push_back(e);
  }
  return out;
}

bool Grants(unsigned perm, int want) {
  return (perm & unsigned(want)) == unsigned(want);
}

// This thread's supplementary groups (getgroups reads the calling
// thread's credentials).
std::vector<uint32_t> ThreadGroups() {
  const long n = syscall(SYS_getgroups, 0, nullptr);
  std::vector<uint32_t> groups(n > 0 ? size_t(n) : 0);
  if (n > 0) {
    const long got = syscall(SYS_getgroups, n, groups.data());
    groups.resize(got > 0 ? size_t(got) : 0);
  }
  return groups;
}

bool SetThreadGroups(const std::vector<uint32_t>& groups) {
  return syscall(SYS_setgroups, groups.size(), groups.data()) == 0;
}

}  // namespace

ReadAccess ReadAccess::User(uint32_t uid, uint32_t gid,
                            std::vector<uint32_t> groups) {
  ReadAccess a;
  // Root reads everything itself; the daemon's own uid reads what the
  // daemon does.
  if (uid == 0 || uid == geteuid()) return a;
  a.kind_ = Kind::kUser;
  a.uid_ = uid;
  a.gid_ = gid;
  a.groups_ = std::move(groups);
  return a;
}

ReadAccess ReadAccess::World() {
  ReadAccess a;
  a.kind_ = Kind::kWorld;
  return a;
}

bool ReadAccess::by_kernel() const {
  return kind_ == Kind::kUser && geteuid() == 0;
}

std::string ReadAccess::Describe() const {
  switch (kind_) {
    case Kind::kUser:
      return absl::StrCat("uid ", uid_);
    case Kind::kWorld:
      return "any local user";
    case Kind::kDaemon:
      break;
  }
  return "batchd";
}

bool ReadAccess::Permits(const std::string& path, const struct stat& st,
                         int want) const {
  const unsigned mode = st.st_mode;
  if (kind_ == Kind::kDaemon) return true;
  // The "other" class; an ACL's other entry is always the mode's bits.
  if (kind_ == Kind::kWorld) return Grants(mode & 07, want);
  if (st.st_uid == uid_) return Grants((mode >> 6) & 07, want);
  auto member = [&](uint32_t gid) {
    return gid == gid_ ||
           std::find(groups_.begin(), groups_.end(), gid) != groups_.end();
  };
  const std::vector<AclEntry> acl = AccessAcl(path);
  if (acl.empty()) {
    return Grants(member(st.st_gid) ? (mode >> 3) & 07 : mode & 07, want);
  }
  // POSIX.1e: a named user entry, else the group class (any matching group
  // entry that grants), else other; named entries and the owning group
  // are limited by the mask.
  unsigned mask = 07;
  for (const AclEntry& e : acl) {
    if (e.tag == kAclMask) mask = e.perm;
  }
  for (const AclEntry& e : acl) {
    if (e.tag == kAclUser && e.id == uid_) return Grants(e.perm & mask, want);
  }
  bool in_group_class = false;
  for (const AclEntry& e : acl) {
    const bool match = (e.tag == kAclGroupObj && member(st.st_gid)) ||
                       (e.tag == kAclGroup && member(e.id));
    if (!match) continue;
    in_group_class = true;
    if (Grants(e.perm & mask, want)) return true;
  }
  if (in_group_class) return false;
  for (const AclEntry& e : acl) {
    if (e.tag == kAclOther) return Grants(e.perm, want);
  }
  return Grants(mode & 07, want);
}

FsCredsScope::FsCredsScope(const ReadAccess& access) {
  if (!access.by_kernel()) return;
  active_ = true;
  // setfsuid/setfsgid with an invalid id change nothing and say the
  // current one.
  fsuid_ = uint32_t(setfsuid(uid_t(-1)));
  fsgid_ = uint32_t(setfsgid(gid_t(-1)));
  groups_ = ThreadGroups();
  // Groups first, then the gid, the uid last (it drops CAP_DAC_*).
  ok_ = SetThreadGroups(access.groups_);
  if (ok_) {
    setfsgid(access.gid_);
    ok_ = uint32_t(setfsgid(gid_t(-1))) == access.gid_;
  }
  if (ok_) {
    setfsuid(access.uid_);
    ok_ = uint32_t(setfsuid(uid_t(-1))) == access.uid_;
  }
  if (!ok_) Restore();
}

FsCredsScope::~FsCredsScope() {
  if (active_ && ok_) Restore();
}

void FsCredsScope::Restore() {
  setfsuid(fsuid_);
  setfsgid(fsgid_);
  const bool groups_back = SetThreadGroups(groups_);
  // A thread of the daemon left with a caller's credentials would read
  // later streams as that caller: stop rather than go on so.
  if (uint32_t(setfsuid(uid_t(-1))) != fsuid_ ||
      uint32_t(setfsgid(gid_t(-1))) != fsgid_ || !groups_back) {
    fprintf(stderr, "batchd: cannot restore the daemon's file credentials\n");
    abort();
  }
}

}  // namespace batchd

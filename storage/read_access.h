// Whose permissions the daemon reads a stream's data with: a caller reads
// through batchd only what it could read itself (docs/security.md).
//
// Two ways of checking, chosen per ReadAccess:
//   - the kernel's own check (a daemon running as root, a caller of another
//     uid): the opens of the data files are made with the caller's fsuid,
//     fsgid and supplementary groups, set on the opening thread alone
//     (FsCredsScope) and put back right after; setfsuid to a non-zero uid
//     also drops the daemon's CAP_DAC_* for that thread, so search
//     permission on every directory walked, read permission on the file,
//     POSIX ACLs and any security module apply exactly as to the caller;
//   - mode bits and POSIX ACLs (a daemon of another uid, which cannot take
//     a caller's uid; and anyone the daemon only knows as "any local user"):
//     after the daemon's own open, every directory of the path opened (the
//     real path of the descriptor, and the path as given up to its first
//     link) must be searchable, and the file readable, by the reader.
//
// Thread safety: ReadAccess is a value; FsCredsScope changes its own
// thread's credentials only.
#ifndef BATCHD_STORAGE_READ_ACCESS_H_
#define BATCHD_STORAGE_READ_ACCESS_H_

#include <sys/stat.h>

#include <cstdint>
#include <string>
#include <vector>

namespace batchd {

class ReadAccess {
 public:
  enum class Kind {
    kDaemon,  // whatever the daemon may read (root, the daemon's uid, tools)
    kUser,    // what one local uid with its groups may read
    kWorld,   // what any local user may read: "other" bits all the way
  };
  // What a permission asks: read a file or list a directory; search a
  // directory (walk through it).
  enum Want { kRead = 4, kSearch = 1 };

  // Unrestricted (the default): the daemon's own permissions.
  ReadAccess() = default;
  static ReadAccess Daemon() { return ReadAccess(); }
  // A caller's: unrestricted for root and for the daemon's own uid.
  static ReadAccess User(uint32_t uid, uint32_t gid,
                         std::vector<uint32_t> groups);
  static ReadAccess World();

  Kind kind() const { return kind_; }
  bool restricted() const { return kind_ != Kind::kDaemon; }
  // The kernel checks (the daemon is root, the reader a user); otherwise a
  // restricted reader is checked by bits.
  bool by_kernel() const;
  uint32_t uid() const { return uid_; }
  uint32_t gid() const { return gid_; }
  const std::vector<uint32_t>& groups() const { return groups_; }
  // "uid 1000", "any local user", "batchd".
  std::string Describe() const;

  // Bits check: whether `st` (of `path`, for its ACL) grants `want`.
  bool Permits(const std::string& path, const struct stat& st, int want) const;

 private:
  Kind kind_ = Kind::kDaemon;
  uint32_t uid_ = 0;
  uint32_t gid_ = 0;
  std::vector<uint32_t> groups_;

  friend class FsCredsScope;
};

// For a ReadAccess checked by the kernel: this thread's fsuid, fsgid and
// supplementary groups are the reader's until the scope ends (raw
// SYS_setgroups: glibc's setgroups would change every thread of the
// daemon). Nothing for any other ReadAccess. A scope that could not take
// the reader's credentials has ok() false and has put the daemon's back.
class FsCredsScope {
 public:
  explicit FsCredsScope(const ReadAccess& access);
  ~FsCredsScope();
  FsCredsScope(const FsCredsScope&) = delete;
  FsCredsScope& operator=(const FsCredsScope&) = delete;
  bool ok() const { return ok_; }

 private:
  void Restore();
  bool active_ = false;
  bool ok_ = true;
  uint32_t fsuid_ = 0;
  uint32_t fsgid_ = 0;
  std::vector<uint32_t> groups_;
};

}  // namespace batchd

#endif  // BATCHD_STORAGE_READ_ACCESS_H_

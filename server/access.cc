// Core's rules of access (see access.h): who is an administrator, whose
// stream a request names and who may close it.
#include "server/access.h"

#include <unistd.h>

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace batchd {

bool Access::IsAdmin(const Caller& caller) const {
  if (!caller.known) return anonymous_admin_;
  if (caller.uid == 0 || caller.uid == geteuid()) return true;
  if (admin_gid_ == gid_t(-1)) return false;
  if (caller.gid == admin_gid_) return true;
  return std::find(caller.groups.begin(), caller.groups.end(),
                   uint32_t(admin_gid_)) != caller.groups.end();
}

ReadAccess Access::ReadAccessOf(const Caller& caller) const {
  if (!caller.known) {
    return anonymous_admin_ ? ReadAccess::Daemon() : ReadAccess::World();
  }
  // The groups of the connection as the kernel recorded them at connect()
  // (SO_PEERGROUPS): the process's own, not the account's (getgrouplist),
  // and not read later from /proc, where the pid may be another process.
  return ReadAccess::User(caller.uid, caller.gid, caller.groups);
}

std::string Access::AdminGroupText() const {
  return admin_gid_ != gid_t(-1)
             ? absl::StrCat(", members of --admin-group ", admin_gid_)
             : std::string();
}

absl::Status Access::CheckAdmin(const Caller& caller,
                                const std::string& what) const {
  if (IsAdmin(caller)) return absl::OkStatus();
  return absl::PermissionDeniedError(absl::StrCat(
      what, " is for batchd's administrators (root, uid ", geteuid(),
      AdminGroupText(),
      caller.known ? "" : "; TCP callers only with --tcp-admin", "), not ",
      caller.Describe()));
}

absl::StatusOr<StreamKey> Access::AuthorizeOpen(
    const std::string& name, const Caller& caller,
    std::optional<uint32_t> owner_uid) const {
  const uint32_t own = OwnerOf(caller);
  if (!owner_uid.has_value() || *owner_uid == own) return StreamKey{own, name};
  // Another uid's stream is joined only when asked for by owner, and only
  // by an administrator: its data and its ranks are that uid's.
  if (!IsAdmin(caller)) {
    return absl::PermissionDeniedError(absl::StrCat(
        "stream '", name, "' of ", DescribeOwner(*owner_uid),
        " is not to be joined by ", caller.Describe(),
        ": joining another uid's stream (owner_uid ", *owner_uid,
        ") is for batchd's administrators (root, uid ", geteuid(),
        AdminGroupText(),
        caller.known ? "" : "; TCP callers only with --tcp-admin",
        "); without owner_uid you open a stream of your own"));
  }
  return StreamKey{*owner_uid, name};
}

absl::StatusOr<StreamKey> Access::AuthorizeClose(
    const std::string& name, const Caller& caller,
    std::optional<uint32_t> owner_uid,
    const std::function<std::vector<uint32_t>()>& owners_named) const {
  const uint32_t own = OwnerOf(caller);
  const uint32_t owner = owner_uid.value_or(own);
  // Anonymous TCP callers own nothing they could prove is theirs.
  const bool owns = owner == own && caller.known;
  if (!owns && !IsAdmin(caller)) {
    return absl::PermissionDeniedError(absl::StrCat(
        "stream '", name, "' of ", DescribeOwner(owner),
        ": only its owner or batchd's administrators may close it, not ",
        caller.Describe()));
  }
  if (owner_uid.has_value()) return StreamKey{owner, name};
  const std::vector<uint32_t> others = owners_named();
  if (others.empty()) return StreamKey{owner, name};
  // Only another uid has a stream of that name: say whose, and how an
  // administrator names it.
  const std::string whose = DescribeOwner(others.front());
  if (!IsAdmin(caller)) {
    return absl::PermissionDeniedError(
        absl::StrCat("stream '", name, "' belongs to ", whose, ", not to ",
                     caller.Describe(),
                     " (who has no stream of that name); only its "
                     "owner or batchd's administrators may close it"));
  }
  return absl::NotFoundError(absl::StrCat(
      DescribeOwner(owner), " has no stream '", name, "'; ", whose,
      " has: name its owner to close it (owner_uid ", others.front(),
      "; batchctl close ", name, " --owner ", others.front(), ")"));
}

}  // namespace batchd

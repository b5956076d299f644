// Who may do what to whose stream: administrators, and the stream an
// OpenStream or CloseStream of a caller names. See Core's paragraph for
// the rules.
//
// Thread safety: constant after construction; every method is
// thread-safe.
#ifndef BATCHD_SERVER_ACCESS_H_
#define BATCHD_SERVER_ACCESS_H_

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "server/caller.h"
#include "storage/read_access.h"

namespace batchd {

// Streams are keyed by (owner uid, name).
using StreamKey = std::pair<uint32_t, std::string>;

class Access {
 public:
  // `admin_gid`: members are administrators (-1: none);
  // `anonymous_admin`: so are TCP callers.
  Access(gid_t admin_gid, bool anonymous_admin)
      : admin_gid_(admin_gid), anonymous_admin_(anonymous_admin) {}

  // Root, the daemon's uid, members of admin_gid; TCP callers only with
  // anonymous_admin.
  bool IsAdmin(const Caller& caller) const;
  // OK when `caller` may drain or shut down the daemon; PermissionDenied
  // naming `what` otherwise.
  absl::Status CheckAdmin(const Caller& caller, const std::string& what) const;
  // Whose permissions a stream `caller` opens reads its data with: its
  // own uid and groups (SO_PEERCRED, SO_PEERGROUPS); a TCP caller's, what
  // any local user may read, or with anonymous_admin the daemon's.
  ReadAccess ReadAccessOf(const Caller& caller) const;
  // Whose stream `name` an OpenStream asks for: the caller's own, or
  // another uid's (`owner_uid`) when the caller may join that uid's
  // streams.
  absl::StatusOr<StreamKey> AuthorizeOpen(
      const std::string& name, const Caller& caller,
      std::optional<uint32_t> owner_uid) const;
  // The stream a CloseStream of `name` may close: the caller's own, or with
  // `owner_uid` that uid's (another's for administrators only).
  // `owners_named` lists the owners of streams named `name` when the
  // caller's own is missing (empty when it exists); asked only without
  // `owner_uid`, so that the error can say whose stream that name is.
  absl::StatusOr<StreamKey> AuthorizeClose(
      const std::string& name, const Caller& caller,
      std::optional<uint32_t> owner_uid,
      const std::function<std::vector<uint32_t>()>& owners_named) const;

 private:
  // ", members of --admin-group N" when one is set.
  std::string AdminGroupText() const;

  const gid_t admin_gid_;
  const bool anonymous_admin_;
};

}  // namespace batchd

#endif  // BATCHD_SERVER_ACCESS_H_

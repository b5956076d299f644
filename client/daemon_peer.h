// Who serves a daemon address: the client's check, before it sends anything
// or maps a ring, that the process behind a unix socket is the batchd it
// trusts. A socket in a shared directory can be bound by anyone first; the
// kernel's SO_PEERCRED names the process that did.
//
// Thread safety: pure functions.
#ifndef BATCHD_CLIENT_DAEMON_PEER_H_
#define BATCHD_CLIENT_DAEMON_PEER_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace batchd {

// The uid of the process listening on `address` when it is a unix socket
// the client may trust, or -1 for a TCP address (no peer to ask).
// `expected_uid` >= 0: that uid (or root) only. Otherwise root, this
// process's effective uid, and the owner of the socket's directory when no
// one else may write that directory are trusted. PermissionDenied names the
// uid found and what to set; Unavailable when nothing listens there.
absl::StatusOr<int64_t> TrustedDaemonUid(const std::string& address,
                                         int64_t expected_uid);

}  // namespace batchd

#endif  // BATCHD_CLIENT_DAEMON_PEER_H_

// The daemon's identity as the kernel reports it; see daemon_peer.h.
#include "client/daemon_peer.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/address.h"

namespace batchd {
namespace {

std::string DirectoryOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

// The process that listens on the unix socket `path`: its uid and pid.
absl::Status PeerOfSocketPath(const std::string& path, uid_t* uid,
                              pid_t* pid) {
  sockaddr_un addr;
  memset(&addr, 0, sizeof(addr));
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path)) {
    return absl::InvalidArgumentError(
        absl::StrCat("socket path ", path, " is too long"));
  }
  memcpy(addr.sun_path, path.data(), path.size());
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot make a socket: ", strerror(errno)));
  }
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    const int err = errno;
    close(fd);
    return absl::UnavailableError(
        absl::StrCat("cannot connect to batchd at unix://", path, ": ",
                     strerror(err), " (is batchd running at unix://", path,
                     "?)"));
  }
  ucred cred;
  socklen_t len = sizeof(cred);
  const int rc = getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len);
  const int err = errno;
  close(fd);
  if (rc != 0) {
    return absl::UnavailableError(absl::StrCat(
        "cannot tell who serves unix://", path, ": ", strerror(err)));
  }
  *uid = cred.uid;
  *pid = cred.pid;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<int64_t> TrustedDaemonUid(const std::string& address,
                                         int64_t expected_uid) {
  const Address a = ParseAddress(address);
  if (a.scheme != Address::Scheme::kUnix) return -1;
  uid_t uid = 0;
  pid_t pid = 0;
  if (absl::Status s = PeerOfSocketPath(a.socket_path, &uid, &pid); !s.ok()) {
    return s;
  }
  if (uid == 0) return int64_t(uid);
  if (expected_uid >= 0) {
    if (uid == uid_t(expected_uid)) return int64_t(uid);
    return absl::PermissionDeniedError(absl::StrCat(
        "the process serving ", address, " (pid ", pid, ") runs as uid ", uid,
        ", not as uid ", expected_uid,
        " that batchd was expected to run as (server_uid, "
        "$BATCHD_SERVER_UID): refused, it may be another user's impostor"));
  }
  if (uid == geteuid()) return int64_t(uid);
  // A directory only its owner may write cannot hold another user's socket;
  // one others may write (even a sticky /tmp) may hold anyone's.
  const std::string dir = DirectoryOf(a.socket_path);
  struct stat st;
  if (stat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode) &&
      (st.st_mode & (S_IWGRP | S_IWOTH)) == 0 && st.st_uid == uid) {
    return int64_t(uid);
  }
  return absl::PermissionDeniedError(absl::StrCat(
      "the process serving ", address, " (pid ", pid, ") runs as uid ", uid,
      ", which this client does not trust: it is neither root nor this "
      "process's uid ", geteuid(), ", and the socket's directory ", dir,
      " is not that uid's own (writable by it alone); if batchd runs as uid ",
      uid, ", say so with server_uid=", uid, " (C++: "
      "LoaderOptions::server_uid) or BATCHD_SERVER_UID=", uid));
}

}  // namespace batchd

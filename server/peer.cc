// Accepting the unix socket's connections with their kernel identity; see
// peer.h.
#include "server/peer.h"

#include <errno.h>
#include <grpcpp/server.h>
#include <grpcpp/server_posix.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/log.h"

namespace batchd {

Caller PeerOfSocket(int fd) {
  Caller c;
  ucred cred;
  socklen_t len = sizeof(cred);
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) return c;
  // The kernel gives the pid as this daemon's pid namespace sees it (0 when
  // the peer's namespace is not below ours): two containers' pid 1 arrive
  // as different pids, or as 0, never as 1 and 1.
  if (cred.pid > 0) {
    c = Caller::Process(uint32_t(cred.pid));
  }
  c.known = true;
  c.pid = cred.pid > 0 ? uint32_t(cred.pid) : 0;
  c.uid = cred.uid;
  c.gid = cred.gid;
  // Groups as they were when the peer connected, not as /proc says later.
  std::vector<gid_t> groups(64);
  for (;;) {
    len = socklen_t(groups.size() * sizeof(gid_t));
    if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups.data(), &len) == 0) {
      groups.resize(len / sizeof(gid_t));
      c.groups.assign(groups.begin(), groups.end());
      break;
    }
    if (errno != ERANGE || groups.size() >= 65536) {
      c.groups.clear();  // unknown: the primary group only
      break;
    }
    groups.resize(std::max<size_t>(len / sizeof(gid_t), groups.size() * 2));
  }
  return c;
}

absl::StatusOr<std::unique_ptr<PeerListener>> PeerListener::Listen(
    const std::string& path) {
  sockaddr_un addr;
  memset(&addr, 0, sizeof(addr));
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path)) {
    return absl::InvalidArgumentError(
        absl::StrCat("socket path ", path, " is longer than ",
                     sizeof(addr.sun_path) - 1, " bytes"));
  }
  memcpy(addr.sun_path, path.data(), path.size());
  struct stat st;
  if (lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) {
      return absl::FailedPreconditionError(absl::StrCat(
          path, " exists and is not a socket; refusing to replace it"));
    }
    unlink(path.c_str());
  }
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    return absl::InternalError(absl::StrCat("socket: ", strerror(errno)));
  }
  // Owner-only from birth; the daemon then sets --socket-mode and group.
  const mode_t old_mask = umask(0177);
  const int bound = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  umask(old_mask);
  if (bound != 0 || listen(fd, 128) != 0) {
    const int err = errno;
    close(fd);
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", path, ": ", strerror(err)));
  }
  return std::unique_ptr<PeerListener>(new PeerListener(fd, path));
}

PeerListener::~PeerListener() {
  Stop();
  close(fd_);
}

void PeerListener::Stop() {
  stop_.store(true);
  if (thread_.joinable()) thread_.join();
}

void PeerListener::Serve(grpc::Server* server) {
  thread_ = std::thread([this, server] { AcceptLoop(server); });
}

void PeerListener::AcceptLoop(grpc::Server* server) {
  while (!stop_.load()) {
    pollfd p{fd_, POLLIN, 0};
    // A bounded wait, so that the destructor's stop is seen.
    if (poll(&p, 1, 100) <= 0) continue;
    const int conn =
        accept4(fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (conn < 0) {
      if (errno == EMFILE || errno == ENFILE) {
        Log(LogLevel::kWarn, "accept_failed", {{"msg", strerror(errno)}});
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
      continue;
    }
    {
      // Recorded before gRPC sees the connection, so that its first call
      // finds it. An older entry for the same number is of a connection
      // gRPC has closed (the kernel reuses only free numbers).
      std::lock_guard<std::mutex> lock(mu_);
      peers_[conn] = PeerOfSocket(conn);
    }
    grpc::AddInsecureChannelFromFd(server, conn);
  }
}

Caller PeerListener::Lookup(const std::string& peer) const {
  int fd;
  if (peer.rfind("fd:", 0) != 0 || !absl::SimpleAtoi(peer.substr(3), &fd)) {
    return Caller();
  }
  std::lock_guard<std::mutex> lock(mu_);
  auto it = peers_.find(fd);
  return it == peers_.end() ? Caller() : it->second;
}

}  // namespace batchd

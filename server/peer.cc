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

#include <fcntl.h>

#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/clock.h"
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
    const std::string& path, const Options& options) {
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
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
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
  std::unique_ptr<PeerListener> listener(new PeerListener(fd, path, options));
  listener->reserve_fd_ = open("/dev/null", O_RDONLY | O_CLOEXEC);
  return listener;
}

PeerListener::~PeerListener() {
  Stop();
  close(fd_);
  if (reserve_fd_ >= 0) close(reserve_fd_);
}

void PeerListener::Stop() {
  stop_.store(true);
  thread_.Join();
  absl::MutexLock lock(&mu_);
  for (auto it = conns_.begin(); it != conns_.end();) {
    if (it->second.handed) {
      ++it;
      continue;
    }
    close(it->first);
    auto next = std::next(it);
    Forget(it);
    it = next;
  }
}

absl::Status PeerListener::Serve(grpc::Server* server) {
  absl::StatusOr<Thread> t =
      StartThread("the thread that accepts connections", "",
                  [this, server] { AcceptLoop(server); });
  if (!t.ok()) return t.status();
  thread_ = *std::move(t);
  return absl::OkStatus();
}

void PeerListener::AcceptLoop(grpc::Server* server) {
  uint64_t last_prune = 0;
  std::vector<pollfd> fds;
  std::vector<int> readable, hung_up;
  while (!stop_.load()) {
    fds.assign(1, pollfd{fd_, POLLIN, 0});
    {
      // Only this thread adds, hands or closes waiting connections.
      absl::MutexLock lock(&mu_);
      for (const auto& [conn, c] : conns_) {
        if (!c.handed) fds.push_back(pollfd{conn, POLLIN | POLLRDHUP, 0});
      }
    }
    // A bounded wait, so that Stop and the idle deadline are seen.
    if (poll(fds.data(), fds.size(), 100) < 0 && errno != EINTR) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    const uint64_t now = MonotonicNanos();
    readable.clear();
    hung_up.clear();
    for (size_t i = 1; i < fds.size(); ++i) {
      if ((fds[i].revents & POLLIN) != 0) {
        readable.push_back(fds[i].fd);
      } else if ((fds[i].revents & (POLLHUP | POLLERR | POLLRDHUP)) != 0) {
        hung_up.push_back(fds[i].fd);
      }
    }
    std::vector<int> hand;
    {
      absl::MutexLock lock(&mu_);
      for (int conn : readable) {
        auto it = conns_.find(conn);
        if (it == conns_.end() || it->second.handed) continue;
        // Recorded before gRPC sees the connection, so that its first call
        // finds it.
        it->second.handed = true;
        --waiting_;
        hand.push_back(conn);
      }
      CloseWaiting(hung_up, now);
      if ((fds[0].revents & POLLIN) != 0) AcceptAll();
      if (now - last_prune > 1000000000) {
        Prune();
        last_prune = now;
      }
    }
    for (int conn : hand) grpc::AddInsecureChannelFromFd(server, conn);
  }
}

void PeerListener::CloseWaiting(const std::vector<int>& hung_up,
                                uint64_t now) {
  for (int conn : hung_up) {
    auto it = conns_.find(conn);
    if (it == conns_.end() || it->second.handed) continue;
    close(conn);
    Forget(it);
  }
  const uint64_t idle_ns = uint64_t(options_.idle_seconds * 1e9);
  for (auto it = conns_.begin(); it != conns_.end();) {
    const Conn& c = it->second;
    if (c.handed || now - c.accepted_ns < idle_ns) {
      ++it;
      continue;
    }
    ++idle_closed_;
    LogKeyed(LogLevel::kWarn, absl::StrCat("connection_idle ", c.caller.uid),
             "connection_closed",
             {{"caller", c.caller.Describe()},
              {"msg", absl::StrCat("sent nothing for ", options_.idle_seconds,
                                   " s (--connection-idle-seconds)")}});
    close(it->first);
    auto next = std::next(it);
    Forget(it);
    it = next;
  }
}

void PeerListener::AcceptAll() {
  for (int i = 0; i < 256; ++i) {
    int conn = accept4(fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (conn < 0) {
      if ((errno == EMFILE || errno == ENFILE) && reserve_fd_ >= 0) {
        // No descriptor left: one from the reserve accepts the connection,
        // which is closed at once (refused, not left in the backlog, where
        // it would wake this loop forever).
        close(reserve_fd_);
        reserve_fd_ = -1;
        conn = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
        if (conn >= 0) close(conn);
        reserve_fd_ = open("/dev/null", O_RDONLY | O_CLOEXEC);
        ++refused_;
        LogKeyed(LogLevel::kWarn, "accept_emfile", "connection_refused",
                 {{"msg", "the daemon has no file descriptor left (raise "
                          "LimitNOFILE= or lower --max-connections)"}});
        continue;
      }
      return;  // EAGAIN: none left to accept
    }
    // A connection gRPC has closed is gone, whatever Prune knows yet.
    auto old = conns_.find(conn);
    if (old != conns_.end()) Forget(old);
    Conn c;
    c.caller = PeerOfSocket(conn);
    c.accepted_ns = MonotonicNanos();
    struct stat st;
    if (fstat(conn, &st) == 0) c.inode = st.st_ino;
    const uid_t uid = c.caller.uid;
    const int total = int(conns_.size());
    const int mine = per_uid_.count(uid) != 0 ? per_uid_[uid] : 0;
    const bool over_total = total >= options_.max_connections;
    if (over_total || mine >= options_.max_connections_per_uid) {
      close(conn);
      ++refused_;
      LogKeyed(LogLevel::kWarn, absl::StrCat("connection_refused ", uid),
               "connection_refused",
               {{"caller", c.caller.Describe()},
                {"connections", std::to_string(total)},
                {"uid_connections", std::to_string(mine)},
                {"limit",
                 over_total
                     ? absl::StrCat("--max-connections ",
                                    options_.max_connections)
                     : absl::StrCat("--max-connections-per-uid ",
                                    options_.max_connections_per_uid)}});
      continue;
    }
    conns_[conn] = std::move(c);
    ++per_uid_[uid];
    ++waiting_;
  }
}

void PeerListener::Prune() {
  for (auto it = conns_.begin(); it != conns_.end();) {
    struct stat st;
    auto next = std::next(it);
    if (it->second.handed &&
        (fstat(it->first, &st) != 0 || st.st_ino != it->second.inode)) {
      Forget(it);
    }
    it = next;
  }
}

void PeerListener::Forget(std::map<int, Conn>::iterator it) {
  const uid_t uid = it->second.caller.uid;
  if (!it->second.handed) --waiting_;
  auto u = per_uid_.find(uid);
  if (u != per_uid_.end() && --u->second <= 0) per_uid_.erase(u);
  conns_.erase(it);
}

PeerListener::Counts PeerListener::counts() const {
  absl::MutexLock lock(&mu_);
  Counts c;
  c.connections = int(conns_.size());
  c.waiting = waiting_;
  c.refused = refused_;
  c.idle_closed = idle_closed_;
  return c;
}

Caller PeerListener::Lookup(const std::string& peer) const {
  int fd;
  if (peer.rfind("fd:", 0) != 0 || !absl::SimpleAtoi(peer.substr(3), &fd)) {
    return Caller();
  }
  absl::MutexLock lock(&mu_);
  auto it = conns_.find(fd);
  return it == conns_.end() ? Caller() : it->second.caller;
}

}  // namespace batchd

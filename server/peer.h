// Who is on the other end of the unix socket. gRPC tells a handler only
// "unix:/path" about its caller, so the daemon accepts the socket's
// connections itself, asks the kernel who connected (SO_PEERCRED: pid, uid,
// gid; SO_PEERGROUPS: the supplementary groups) and hands each connection
// to gRPC (AddInsecureChannelFromFd). gRPC names such a connection's peer
// "fd:N", which is how a handler finds its caller here.
//
// Why an fd number is a sound key: gRPC closes a connection's fd only when
// its transport is destroyed, and a call in progress holds its transport;
// so while a handler runs, fd N is still its connection's, the kernel
// cannot hand N to a newer connection, and the entry for N is the one
// recorded when that connection was accepted.
//
// Connections are bounded, so that no user can take the daemon's file
// descriptors (every connection holds one): at most max_connections at
// once, and max_connections_per_uid of one uid; one past a limit is closed
// at once, and logged (rate-limited). A connection is handed to gRPC only
// once it has sent something (every gRPC client sends its preface at
// once); one that sends nothing for idle_seconds is closed. A connection
// counts until gRPC has closed it (noticed within a second: its fd then
// names another file, or none).
//
// Thread safety: thread-safe.
#ifndef BATCHD_SERVER_PEER_H_
#define BATCHD_SERVER_PEER_H_

#include <sys/types.h>

#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "base/threads.h"
#include "server/caller.h"

namespace grpc {
class Server;
}

namespace batchd {

// The kernel's description of the peer of a connected unix socket `fd`
// (known is false if the kernel says nothing).
Caller PeerOfSocket(int fd);

class PeerListener {
 public:
  struct Options {
    // Connections at once, over all users. Default: 512.
    int max_connections = 512;
    // Connections at once of one uid. Default: 128.
    int max_connections_per_uid = 128;
    // A connection that has sent nothing this long is closed. Default: 30.
    double idle_seconds = 30;
  };
  // Figures, for status and tests.
  struct Counts {
    int connections = 0;  // open now (waiting for a first byte, or gRPC's)
    int waiting = 0;      // ... of which have sent nothing yet
    uint64_t refused = 0;     // closed at once: over a limit
    uint64_t idle_closed = 0;  // closed: sent nothing for idle_seconds
  };

  // Binds and listens on the unix socket `path`; an old socket file there
  // (of a dead daemon: the caller holds the lock) is replaced. Only a
  // socket is ever unlinked.
  static absl::StatusOr<std::unique_ptr<PeerListener>> Listen(
      const std::string& path, const Options& options);
  static absl::StatusOr<std::unique_ptr<PeerListener>> Listen(
      const std::string& path) {
    return Listen(path, Options());
  }
  // Stops accepting and closes the listening socket; connections already
  // handed to gRPC are gRPC's. Destroy only after the server has stopped:
  // handlers look their callers up here.
  ~PeerListener();
  // Stops accepting new connections (before the server shuts down) and
  // closes those that sent nothing yet.
  void Stop();

  // Accepts connections for `server` (started, without listening ports of
  // its own for this socket) on a thread of the listener. Call once.
  // ResourceExhausted when the thread cannot be started.
  absl::Status Serve(grpc::Server* server);
  // The caller of a call whose ServerContext::peer() is `peer`; anonymous
  // (known false) for a peer that is not one of this listener's.
  Caller Lookup(const std::string& peer) const;
  Counts counts() const;

 private:
  // A connection the listener knows: its caller and the socket's inode
  // (how a closed fd is told from its number's next file).
  struct Conn {
    Caller caller;
    ino_t inode = 0;
    uint64_t accepted_ns = 0;
    bool handed = false;  // gRPC's now
  };

  PeerListener(int fd, std::string path, const Options& options)
      : fd_(fd), path_(std::move(path)), options_(options) {}
  void AcceptLoop(grpc::Server* server);
  // Accepts what waits on the listening socket.
  void AcceptAll() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Closes the waiting connections that hung up or sent nothing for
  // idle_seconds.
  void CloseWaiting(const std::vector<int>& hung_up, uint64_t now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Forgets connections gRPC has closed.
  void Prune() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Forget(std::map<int, Conn>::iterator it)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int fd_;
  const std::string path_;
  const Options options_;
  int reserve_fd_ = -1;  // closed to accept (and refuse) at EMFILE
  std::atomic<bool> stop_{false};
  Thread thread_;
  mutable absl::Mutex mu_;
  std::map<int, Conn> conns_ ABSL_GUARDED_BY(mu_);     // by connection fd
  std::map<uid_t, int> per_uid_ ABSL_GUARDED_BY(mu_);  // open connections
  int waiting_ ABSL_GUARDED_BY(mu_) = 0;               // not handed yet
  uint64_t refused_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t idle_closed_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace batchd

#endif  // BATCHD_SERVER_PEER_H_

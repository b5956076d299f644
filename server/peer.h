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
// Thread safety: thread-safe.
#ifndef BATCHD_SERVER_PEER_H_
#define BATCHD_SERVER_PEER_H_

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
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
  // Binds and listens on the unix socket `path`; an old socket file there
  // (of a dead daemon: the caller holds the lock) is replaced. Only a
  // socket is ever unlinked.
  static absl::StatusOr<std::unique_ptr<PeerListener>> Listen(
      const std::string& path);
  // Stops accepting and closes the listening socket; connections already
  // handed to gRPC are gRPC's. Destroy only after the server has stopped:
  // handlers look their callers up here.
  ~PeerListener();
  // Stops accepting new connections (before the server shuts down).
  void Stop();

  // Accepts connections for `server` (started, without listening ports of
  // its own for this socket) on a thread of the listener. Call once.
  void Serve(grpc::Server* server);
  // The caller of a call whose ServerContext::peer() is `peer`; anonymous
  // (known false) for a peer that is not one of this listener's.
  Caller Lookup(const std::string& peer) const;

 private:
  PeerListener(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  void AcceptLoop(grpc::Server* server);

  const int fd_;
  const std::string path_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  mutable std::mutex mu_;
  std::map<int, Caller> peers_;  // by connection fd; guarded by mu_
};

}  // namespace batchd

#endif  // BATCHD_SERVER_PEER_H_

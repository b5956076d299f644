// Addresses of the daemon as users write them ("unix:///path/to/socket",
// "tcp://host:port") and as gRPC takes them ("unix:/path", "host:port").
// The daemon (--listen), batchctl (--server), the C++ and Python clients and
// the test tools read them through here.
//
// Thread safety: pure functions.
#ifndef BATCHD_BASE_ADDRESS_H_
#define BATCHD_BASE_ADDRESS_H_

#include <string>

namespace batchd {

// Where the daemon listens, and clients look, unless told otherwise.
inline constexpr char kDefaultServerAddress[] =
    "unix:///run/batchd/batchd.sock";

// One address split by its scheme.
struct Address {
  enum class Scheme {
    kUnix,   // "unix:///path" or gRPC's "unix:path"
    kTcp,    // "tcp://host:port"
    kOther,  // anything else (gRPC's "host:port", "dns:///..."): as given
  };
  Scheme scheme = Scheme::kOther;
  // kUnix: the socket's path ("unix:///run/x" -> "/run/x"); else empty.
  std::string socket_path;
  // kTcp: "host:port"; else empty.
  std::string host_port;
  // The address in gRPC's terms: "unix:" + socket_path, host_port, or the
  // address unchanged.
  std::string grpc_target;
};

// Splits `address`; never fails (checks belong to the caller, whose rules
// differ: the daemon refuses kOther, batchctl wants absolute paths).
Address ParseAddress(const std::string& address);

// "host" of "host:port" (the part before the last ':'); empty without one.
std::string HostOf(const std::string& host_port);

// True when something accepts connections on the unix socket `path` now.
bool UnixSocketAccepts(const std::string& path);

// A TCP port on 127.0.0.1 that was free a moment ago (bound to port 0 and
// released), for rendezvous and tests; another process may take it before
// the caller binds it. 0 when no socket could be bound.
int FreeLoopbackPort();

}  // namespace batchd

#endif  // BATCHD_BASE_ADDRESS_H_

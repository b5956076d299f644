// Daemon addresses; see address.h.
#include "base/address.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

namespace batchd {

Address ParseAddress(const std::string& address) {
  Address a;
  a.grpc_target = address;
  if (address.rfind("unix://", 0) == 0) {
    a.scheme = Address::Scheme::kUnix;
    a.socket_path = address.substr(7);
    a.grpc_target = "unix:" + a.socket_path;
  } else if (address.rfind("unix:", 0) == 0) {
    a.scheme = Address::Scheme::kUnix;
    a.socket_path = address.substr(5);
  } else if (address.rfind("tcp://", 0) == 0) {
    a.scheme = Address::Scheme::kTcp;
    a.host_port = address.substr(6);
    a.grpc_target = a.host_port;
  }
  return a;
}

std::string HostOf(const std::string& host_port) {
  const size_t colon = host_port.rfind(':');
  return colon == std::string::npos ? "" : host_port.substr(0, colon);
}

bool UnixSocketAccepts(const std::string& path) {
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_un addr;
  memset(&addr, 0, sizeof(addr));
  addr.sun_family = AF_UNIX;
  snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", path.c_str());
  const bool ok =
      connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  close(fd);
  return ok;
}

int FreeLoopbackPort() {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 0;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  const bool ok = bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 &&
                  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0;
  close(fd);
  return ok ? ntohs(a.sin_port) : 0;
}

}  // namespace batchd

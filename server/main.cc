// batchd: the daemon. Reads its settings (flags, --config), removes stale
// segments, serves gRPC on a unix socket (or TCP), tells systemd when it is
// ready, and on SIGTERM / SIGINT / Shutdown / a finished drain closes every
// stream and unlinks every segment before it exits.
#include <fcntl.h>
#include <grp.h>
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "batchd/version.h"
#include "client/ring.h"
#include "server/config.h"
#include "server/core.h"
#include "server/grpc_service.h"
#include "server/log.h"
#include "server/metrics.h"
#include "server/peer.h"
#include "workloads/common/cache_dir.h"

namespace {

int Fail(int code, const std::string& msg) {
  fprintf(stderr, "batchd: %s\n", msg.c_str());
  return code;
}

// True when something accepts connections on the unix socket `path`.
bool SocketAccepts(const std::string& path) {
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_un addr;
  memset(&addr, 0, sizeof(addr));
  addr.sun_family = AF_UNIX;
  snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", path.c_str());
  const bool ok = connect(fd, reinterpret_cast<sockaddr*>(&addr),
                          sizeof(addr)) == 0;
  close(fd);
  return ok;
}

std::string HostOf(const std::string& host_port) {
  const size_t colon = host_port.rfind(':');
  return colon == std::string::npos ? "" : host_port.substr(0, colon);
}

// The directory that holds the socket must be writable by us (and root)
// only: whoever can write it can replace the socket and impersonate the
// daemon to every trainer. A sticky directory (/tmp) is allowed, since
// others cannot remove or rename our entries there.
absl::Status CheckSocketDirectory(const std::string& dir) {
  const int fd =
      open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("socket directory ", dir, ": ", strerror(errno),
                     errno == ELOOP || errno == ENOTDIR
                         ? " (a symbolic link or not a directory is refused)"
                         : ""));
  }
  struct stat st;
  const int rc = fstat(fd, &st);
  close(fd);
  if (rc != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot stat socket directory ", dir));
  }
  if (st.st_uid != geteuid() && st.st_uid != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("socket directory ", dir, " is owned by uid ", st.st_uid,
                     ", not by batchd's uid ", geteuid(),
                     " or root: its owner could "
                     "replace the socket; use a directory of batchd's own"));
  }
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0 && (st.st_mode & S_ISVTX) == 0) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "socket directory %s has mode %04o: group- or world-writable "
        "without the sticky bit, so others could replace the socket",
        dir, unsigned(st.st_mode & 07777)));
  }
  return absl::OkStatus();
}

// Opens (or creates) the lock file without following a link: a link
// planted there would make a root daemon truncate its target.
absl::StatusOr<int> OpenLockFile(const std::string& path) {
  const int fd =
      open(path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC,
           0600);
  if (fd < 0) {
    const int err = errno;
    struct stat st;
    const bool link = lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode);
    return absl::FailedPreconditionError(
        absl::StrCat("cannot open lock file ", path, ": ", strerror(err),
                     link ? " (it is a symbolic link: refused)" : ""));
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid() ||
      st.st_nlink != 1) {
    close(fd);
    return absl::FailedPreconditionError(absl::StrCat(
        "lock file ", path, " is not a regular file of uid ", geteuid(),
        " with one link: refused (remove it if it is stale)"));
  }
  return fd;
}

bool ReadFile(const std::string& path, std::string* out) {
  std::ifstream in(path);
  if (!in) return false;
  std::stringstream ss;
  ss << in.rdbuf();
  *out = ss.str();
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  batchd::DaemonConfig config;
  batchd::ParsedArgs parsed;
  if (absl::Status s = batchd::ParseArgs(argc, argv, &config, &parsed);
      !s.ok()) {
    return Fail(2, std::string(s.message()));
  }
  if (parsed.help) {
    fputs(batchd::Usage().c_str(), stdout);
    return 0;
  }
  if (parsed.version) {
    printf("batchd %s (protocol %u, shared-memory layout version %u)\n",
           batchd::kBatchdVersion, batchd::kProtocolVersion,
           batchd::shm::kLayoutVersion);
    return 0;
  }
  if (parsed.print_config) {
    fputs(batchd::ConfigToToml(config).c_str(), stdout);
    return 0;
  }
  batchd::SetLogLevel(config.log_level);

  // Where to listen, in gRPC's terms.
  const std::string& listen = config.listen;
  std::string grpc_address, socket_path;
  if (listen.rfind("unix://", 0) == 0) {
    socket_path = listen.substr(7);
    grpc_address = "unix:" + socket_path;
  } else if (listen.rfind("unix:", 0) == 0) {
    socket_path = listen.substr(5);
    grpc_address = listen;
  } else if (listen.rfind("tcp://", 0) == 0) {
    grpc_address = listen.substr(6);
  } else {
    return Fail(2, absl::StrCat("--listen ", listen,
                                ": use unix:///path or tcp://127.0.0.1:PORT"));
  }
  std::shared_ptr<grpc::ServerCredentials> creds =
      grpc::InsecureServerCredentials();
  // TCP: the numeric addresses checked, which are what gets bound.
  std::vector<std::string> tcp_addresses;
  if (socket_path.empty()) {
    absl::StatusOr<std::vector<std::string>> resolved =
        batchd::ResolveListenAddress("listen", grpc_address, false);
    const bool loopback = resolved.ok();
    if (!loopback && !config.allow_remote) {
      return Fail(2, absl::StrCat(resolved.status().message(),
                                  " (TCP listens on loopback only: "
                                  "127.0.0.1 or [::1]; other addresses "
                                  "need --allow-remote with TLS)"));
    }
    if (!loopback) {
      resolved = batchd::ResolveListenAddress("listen", grpc_address, true);
      if (!resolved.ok())
        return Fail(2, std::string(resolved.status().message()));
    }
    tcp_addresses = *resolved;
    if (!loopback || !config.tls_cert.empty()) {
      if (config.tls_cert.empty() || config.tls_key.empty()) {
        return Fail(2, "--allow-remote needs --tls-cert and --tls-key: "
                       "batchd never serves other hosts in plain text");
      }
      grpc::SslServerCredentialsOptions ssl;
      grpc::SslServerCredentialsOptions::PemKeyCertPair pair;
      if (!ReadFile(config.tls_key, &pair.private_key) ||
          !ReadFile(config.tls_cert, &pair.cert_chain)) {
        return Fail(2, absl::StrCat("cannot read --tls-cert ",
                                    config.tls_cert, " or --tls-key ",
                                    config.tls_key));
      }
      ssl.pem_key_cert_pairs.push_back(pair);
      if (!config.tls_client_ca.empty()) {
        if (!ReadFile(config.tls_client_ca, &ssl.pem_root_certs)) {
          return Fail(2, absl::StrCat("cannot read --tls-client-ca ",
                                      config.tls_client_ca));
        }
        ssl.client_certificate_request =
            GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
      }
      creds = grpc::SslServerCredentials(ssl);
    }
  }
  // Civetweb gets one numeric address, never the flag's text: its own
  // syntax would read "127.0.0.1:X,Y" as two ports, the second on 0.0.0.0.
  std::string metrics_address;
  if (!config.metrics_listen.empty()) {
    absl::StatusOr<std::vector<std::string>> resolved =
        batchd::ResolveListenAddress("metrics-listen", config.metrics_listen,
                                     config.allow_remote);
    if (!resolved.ok()) {
      return Fail(2, std::string(resolved.status().message()));
    }
    metrics_address = resolved->front();
  }

  // One daemon per socket: a lock file beside the socket, then a probe, so
  // that a second daemon never unlinks the socket of a live one (gRPC
  // removes an existing socket file when it binds).
  int lock_fd = -1;
  if (!socket_path.empty()) {
    const size_t slash = socket_path.rfind('/');
    const std::string dir = slash == std::string::npos ? "."
                            : slash == 0               ? "/"
                                         : socket_path.substr(0, slash);
    mkdir(dir.c_str(), 0755);
    if (absl::Status s = CheckSocketDirectory(dir); !s.ok()) {
      return Fail(1, std::string(s.message()));
    }
    const std::string lock_path = socket_path + ".lock";
    absl::StatusOr<int> lock = OpenLockFile(lock_path);
    if (!lock.ok()) return Fail(1, std::string(lock.status().message()));
    lock_fd = *lock;
    if (flock(lock_fd, LOCK_EX | LOCK_NB) != 0) {
      char buf[32] = {0};
      if (pread(lock_fd, buf, sizeof(buf) - 1, 0) < 0) buf[0] = '\0';
      return Fail(1, absl::StrCat("another batchd (pid ", atoi(buf),
                                  ") already serves ", listen));
    }
    if (SocketAccepts(socket_path)) {
      return Fail(1, absl::StrCat("another process already accepts on ",
                                  socket_path));
    }
    const std::string pid = absl::StrCat(getpid(), "\n");
    if (ftruncate(lock_fd, 0) != 0 ||
        pwrite(lock_fd, pid.data(), pid.size(), 0) < 0) {
      return Fail(1, absl::StrCat("cannot write ", lock_path));
    }
  }
  gid_t socket_gid = gid_t(-1);
  if (!config.socket_group.empty()) {
    int64_t gid;
    if (absl::SimpleAtoi(config.socket_group, &gid)) {
      socket_gid = gid_t(gid);
    } else if (group* gr = getgrnam(config.socket_group.c_str())) {
      socket_gid = gr->gr_gid;
    } else {
      return Fail(2, absl::StrCat("--socket-group: no group named '",
                                  config.socket_group, "'"));
    }
  }

  // Signals are taken by sigwait below, never by a handler: block them
  // before any thread starts so that every thread inherits the mask.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  const std::string stale_prefix =
      absl::StrCat(config.core.shm_prefix, ".", getuid(), ".");
  std::vector<std::string> skipped;
  for (const std::string& seg :
       batchd::RemoveStaleSegments(stale_prefix, &skipped)) {
    batchd::Log(batchd::LogLevel::kInfo, "stale_segment_removed",
                {{"segment", seg}});
  }
  for (const std::string& why : skipped) {
    batchd::Log(batchd::LogLevel::kWarn, "shm_entry_ignored", {{"entry", why}});
  }

  // The cache: a given directory must be usable; the default one may not be
  // (a read-only home), and then the daemon runs without it.
  absl::StatusOr<std::shared_ptr<const batchd::CacheDir>> cache =
      batchd::CacheDir::Open(config.cache_dir);
  if (!cache.ok() && config.cache_dir_given) {
    return Fail(1, std::string(cache.status().message()));
  }
  if (!cache.ok()) {
    batchd::Log(batchd::LogLevel::kWarn, "cache_off",
                {{"dir", config.cache_dir},
                 {"reason", std::string(cache.status().message())}});
  } else {
    config.core.cache = *cache;
    batchd::Log(batchd::LogLevel::kInfo, "cache",
                {{"dir", config.cache_dir.empty() ? "off" : config.cache_dir}});
  }
  absl::StatusOr<std::unique_ptr<batchd::Core>> core =
      batchd::Core::Create(config.core);
  if (!core.ok()) return Fail(1, std::string(core.status().message()));
  (*core)->SetOnDrained([] {
    batchd::Log(batchd::LogLevel::kInfo, "drained");
    kill(getpid(), SIGTERM);
  });

  // The unix socket is accepted by the daemon itself, so that every call
  // carries its caller's kernel identity (peer.h); TCP is gRPC's.
  std::unique_ptr<batchd::PeerListener> peers;
  if (!socket_path.empty()) {
    auto listener = batchd::PeerListener::Listen(socket_path);
    if (!listener.ok()) return Fail(1, std::string(listener.status().message()));
    peers = std::move(*listener);
  }
  batchd::PeerListener* const peer_table = peers.get();
  batchd::BatchdService service(
      **core, [] { kill(getpid(), SIGTERM); },
      [peer_table](const grpc::ServerContext& ctx) {
        // TCP callers are anonymous: no kernel identity crosses TCP.
        return peer_table != nullptr ? peer_table->Lookup(ctx.peer())
                                     : batchd::Caller();
      });
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  // Requests are small; a huge one is refused before it is parsed.
  builder.SetMaxReceiveMessageSize(1 << 20);
  int port = 0;
  std::vector<int> extra_ports;
  if (socket_path.empty()) {
    // Every address the host resolved to, unless the port is chosen by the
    // kernel (then one: the ports would differ).
    builder.AddListeningPort(tcp_addresses.front(), creds, &port);
    const std::string& first = tcp_addresses.front();
    if (first.substr(first.rfind(':') + 1) != "0") {
      extra_ports.resize(tcp_addresses.size() - 1);
      for (size_t i = 1; i < tcp_addresses.size(); ++i) {
        builder.AddListeningPort(tcp_addresses[i], creds, &extra_ports[i - 1]);
      }
    }
  }
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  bool bound = !socket_path.empty() || port != 0;
  for (int p : extra_ports) bound = bound && p != 0;
  if (server == nullptr || !bound) {
    return Fail(1, absl::StrCat("cannot listen on ", listen,
                                " (in use, or no permission)"));
  }
  if (peers != nullptr) peers->Serve(server.get());
  if (!socket_path.empty()) {
    chmod(socket_path.c_str(), config.socket_mode);
    if (socket_gid != gid_t(-1) &&
        chown(socket_path.c_str(), uid_t(-1), socket_gid) != 0) {
      return Fail(1, absl::StrCat("cannot give ", socket_path, " to group ",
                                  config.socket_group, ": ",
                                  strerror(errno)));
    }
  }
  std::unique_ptr<batchd::MetricsServer> metrics;
  if (!config.metrics_listen.empty()) {
    auto m = batchd::MetricsServer::Start(metrics_address, **core);
    if (!m.ok()) return Fail(1, std::string(m.status().message()));
    metrics = std::move(*m);
  }
  batchd::Log(
      batchd::LogLevel::kInfo, "ready",
      {{"pid", std::to_string(getpid())},
       {"listen",
        socket_path.empty()
            ? absl::StrCat("tcp://", HostOf(tcp_addresses.front()), ":", port)
            : listen},
       {"data_root", (*core)->options().data_root},
       {"threads", std::to_string((*core)->options().threads)},
       {"shm_prefix", config.core.shm_prefix},
       {"metrics", config.metrics_listen}});
  // systemd (Type=notify): ready only now that the socket accepts.
  sd_notify(0, "READY=1");
  std::atomic<bool> stopping{false};
  std::thread watchdog;
  uint64_t watchdog_usec = 0;
  if (sd_watchdog_enabled(0, &watchdog_usec) > 0) {
    watchdog = std::thread([&stopping, watchdog_usec] {
      while (!stopping.load()) {
        sd_notify(0, "WATCHDOG=1");
        std::this_thread::sleep_for(
            std::chrono::microseconds(watchdog_usec / 3));
      }
    });
  }

  int sig = 0;
  sigwait(&signals, &sig);
  sd_notify(0, "STOPPING=1");
  batchd::Log(batchd::LogLevel::kInfo, "shutdown",
              {{"signal", sig == SIGINT ? "SIGINT" : "SIGTERM"}});
  stopping.store(true);
  if (watchdog.joinable()) watchdog.join();
  metrics.reset();
  if (peers != nullptr) peers->Stop();  // no new connections
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  server->Wait();
  core->reset();  // closes every stream, unlinks every segment
  if (!socket_path.empty()) {
    // The lock file stays: unlinking it would let two daemons hold locks
    // on different files of the same name.
    unlink(socket_path.c_str());
  }
  batchd::Log(batchd::LogLevel::kInfo, "stopped");
  return 0;
}

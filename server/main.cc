// batchd: the daemon. Reads its settings (flags, --config), removes stale
// segments, serves gRPC on a unix socket (or TCP), tells systemd when it is
// ready, and on SIGTERM / SIGINT / Shutdown / a finished drain closes every
// stream and unlinks every segment before it exits. main() is the list of
// those steps; each is a function below.
#include <fcntl.h>
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/address.h"
#include "base/files.h"
#include "base/format.h"
#include "base/groups.h"
#include "base/log.h"
#include "base/threads.h"
#include "batchd/version.h"
#include "ring/ring.h"
#include "server/config.h"
#include "server/core.h"
#include "server/grpc_service.h"
#include "server/library_log.h"
#include "server/metrics.h"
#include "server/peer.h"
#include "storage/cache_dir.h"

namespace {

int Fail(int code, const std::string& msg) {
  // The message may quote a setting's value: one line, escaped.
  fprintf(stderr, "batchd: %s\n", batchd::Printable(msg).c_str());
  return code;
}
int Fail(int code, const absl::Status& status) {
  return Fail(code, std::string(status.message()));
}
// A start-up that cannot go on: the message, then out at once. Destructors
// are not run: with gRPC initialised but its threads refused (a pids
// limit), grpc_shutdown would wait for them for ever.
[[noreturn]] void FailNow(int code, const absl::Status& status) {
  Fail(code, status);
  fflush(nullptr);
  _exit(code);
}

// The directory that holds the socket must be writable by us (and root)
// only: whoever can write it can replace the socket and impersonate the
// daemon to every trainer. In a sticky directory (/tmp) others cannot
// remove or rename our entries, but they can bind the socket's name first,
// while batchd is down, and pass for it: accepted only when
// `allow_shared` (--allow-shared-socket-dir).
absl::Status CheckSocketDirectory(const std::string& dir, bool allow_shared) {
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
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0 && !allow_shared) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "socket directory %s has mode %04o: others may write it, so another "
        "user can bind the socket's name there before batchd does (at boot, "
        "or while it restarts) and pass for batchd to every trainer, "
        "handing them rings of its own; put the socket in a directory only "
        "batchd's uid may write (e.g. unix:///run/batchd/batchd.sock, "
        "systemd's RuntimeDirectory=), or accept that risk with "
        "--allow-shared-socket-dir",
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

// Step 1b. File descriptors: the soft limit raised to the hard one (1,024
// is systemd's default soft limit, and every connection, ring and data
// file takes one), then the connection limits made to leave half of them
// to rings and data files. Returns the soft limit now in force.
uint64_t RaiseFileLimit(batchd::DaemonConfig* config) {
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < lim.rlim_max) {
    rlimit raised = lim;
    // A huge hard limit (infinity) would only make fd tables huge.
    raised.rlim_cur = std::min<rlim_t>(lim.rlim_max, rlim_t(1) << 20);
    if (raised.rlim_cur > lim.rlim_cur && setrlimit(RLIMIT_NOFILE, &raised) == 0) {
      lim = raised;
    }
  }
  const uint64_t soft = lim.rlim_cur == RLIM_INFINITY ? uint64_t(1) << 20
                                                      : uint64_t(lim.rlim_cur);
  const int half = int(std::max<uint64_t>(16, soft / 2));
  if (config->max_connections == 0) {
    config->max_connections = std::min(half, 4096);
  } else if (config->max_connections > half) {
    batchd::Log(batchd::LogLevel::kWarn, "max_connections_lowered",
                {{"asked", std::to_string(config->max_connections)},
                 {"now", std::to_string(half)},
                 {"msg", absl::StrCat("half of RLIMIT_NOFILE ", soft,
                                      ", so that rings and data files keep "
                                      "the rest (raise LimitNOFILE=)")}});
    config->max_connections = half;
  }
  return soft;
}

// Step 1. The settings: flags over --config over defaults. Returns the exit
// code when the command is done already (--help, --version, --print-config,
// a bad flag), nothing when the daemon is to run.
std::optional<int> ReadSettings(int argc, char** argv,
                                batchd::DaemonConfig* config) {
  batchd::ParsedArgs parsed;
  if (absl::Status s = batchd::ParseArgs(argc, argv, config, &parsed);
      !s.ok()) {
    return Fail(2, s);
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
    fputs(batchd::ConfigToToml(*config).c_str(), stdout);
    return 0;
  }
  batchd::SetLogLevel(config->log_level);
  RaiseFileLimit(config);
  return std::nullopt;
}

// Where the daemon listens, checked before anything is bound.
struct Endpoints {
  std::string grpc_address;  // --listen in gRPC's terms
  std::string socket_path;   // the unix socket; empty for TCP
  // TCP: the numeric addresses checked, which are what gets bound.
  std::vector<std::string> tcp_addresses;
  std::shared_ptr<grpc::ServerCredentials> credentials;
  // Civetweb gets one numeric address, never the flag's text: its own
  // syntax would read "127.0.0.1:X,Y" as two ports, the second on 0.0.0.0.
  std::string metrics_address;  // empty: no metrics endpoint
};

// TLS credentials from --tls-cert, --tls-key and --tls-client-ca.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> TlsCredentials(
    const batchd::DaemonConfig& config) {
  grpc::SslServerCredentialsOptions ssl;
  grpc::SslServerCredentialsOptions::PemKeyCertPair pair;
  absl::StatusOr<std::string> key = batchd::ReadFileToString(config.tls_key);
  absl::StatusOr<std::string> cert = batchd::ReadFileToString(config.tls_cert);
  if (!key.ok() || !cert.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot read --tls-cert ", config.tls_cert,
                     " or --tls-key ", config.tls_key));
  }
  pair.private_key = std::move(*key);
  pair.cert_chain = std::move(*cert);
  ssl.pem_key_cert_pairs.push_back(pair);
  if (!config.tls_client_ca.empty()) {
    absl::StatusOr<std::string> ca =
        batchd::ReadFileToString(config.tls_client_ca);
    if (!ca.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot read --tls-client-ca ", config.tls_client_ca));
    }
    ssl.pem_root_certs = std::move(*ca);
    ssl.client_certificate_request =
        GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
  }
  return grpc::SslServerCredentials(ssl);
}

// Step 2. --listen and --metrics-listen checked and resolved: TCP on
// loopback unless --allow-remote, and then only with TLS.
absl::StatusOr<Endpoints> ResolveEndpoints(const batchd::DaemonConfig& config) {
  Endpoints e;
  const batchd::Address listen = batchd::ParseAddress(config.listen);
  if (listen.scheme == batchd::Address::Scheme::kOther) {
    return absl::InvalidArgumentError(
        absl::StrCat("--listen ", config.listen,
                     ": use unix:///path or tcp://127.0.0.1:PORT"));
  }
  e.grpc_address = listen.grpc_target;
  e.socket_path = listen.socket_path;
  e.credentials = grpc::InsecureServerCredentials();
  if (e.socket_path.empty()) {
    absl::StatusOr<std::vector<std::string>> resolved =
        batchd::ResolveListenAddress("listen", e.grpc_address, false);
    const bool loopback = resolved.ok();
    if (!loopback && !config.allow_remote) {
      return absl::InvalidArgumentError(
          absl::StrCat(resolved.status().message(),
                       " (TCP listens on loopback only: "
                       "127.0.0.1 or [::1]; other addresses "
                       "need --allow-remote with TLS)"));
    }
    if (!loopback) {
      resolved = batchd::ResolveListenAddress("listen", e.grpc_address, true);
      if (!resolved.ok()) return resolved.status();
    }
    e.tcp_addresses = *resolved;
    if (!loopback || !config.tls_cert.empty()) {
      if (config.tls_cert.empty() || config.tls_key.empty()) {
        return absl::InvalidArgumentError(
            "--allow-remote needs --tls-cert and --tls-key: "
            "batchd never serves other hosts in plain text");
      }
      absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> tls =
          TlsCredentials(config);
      if (!tls.ok()) return tls.status();
      e.credentials = std::move(*tls);
    }
  }
  if (!config.metrics_listen.empty()) {
    absl::StatusOr<std::vector<std::string>> resolved =
        batchd::ResolveListenAddress("metrics-listen", config.metrics_listen,
                                     config.allow_remote);
    if (!resolved.ok()) return resolved.status();
    e.metrics_address = resolved->front();
  }
  return e;
}

// Step 3. One daemon per socket: a lock file beside the socket, then a
// probe, so that a second daemon never unlinks the socket of a live one
// (gRPC removes an existing socket file when it binds). Returns the lock
// file's descriptor, held (and locked) until the process exits; -1 for TCP.
absl::StatusOr<int> ClaimSocket(const std::string& listen,
                                const std::string& socket_path,
                                bool allow_shared_dir) {
  if (socket_path.empty()) return -1;
  const size_t slash = socket_path.rfind('/');
  const std::string dir = slash == std::string::npos ? "."
                          : slash == 0               ? "/"
                                       : socket_path.substr(0, slash);
  mkdir(dir.c_str(), 0755);
  if (absl::Status s = CheckSocketDirectory(dir, allow_shared_dir); !s.ok()) {
    return s;
  }
  const std::string lock_path = socket_path + ".lock";
  absl::StatusOr<int> lock = OpenLockFile(lock_path);
  if (!lock.ok()) return lock.status();
  const int lock_fd = *lock;
  if (flock(lock_fd, LOCK_EX | LOCK_NB) != 0) {
    char buf[32] = {0};
    if (batchd::PreadFull(lock_fd, buf, sizeof(buf) - 1, 0) < 0) buf[0] = '\0';
    return absl::FailedPreconditionError(absl::StrCat(
        "another batchd (pid ", atoi(buf), ") already serves ", listen));
  }
  if (batchd::UnixSocketAccepts(socket_path)) {
    return absl::FailedPreconditionError(
        absl::StrCat("another process already accepts on ", socket_path));
  }
  const std::string pid = absl::StrCat(getpid(), "\n");
  if (ftruncate(lock_fd, 0) != 0 ||
      pwrite(lock_fd, pid.data(), pid.size(), 0) < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot write ", lock_path));
  }
  return lock_fd;
}

// Before step 1. Signals are taken by sigwait, never by a handler: blocked
// before any thread starts (gRPC's too) so that every thread inherits the
// mask.
sigset_t BlockStopSignals() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  return signals;
}

// Step 5. Segments of this uid and prefix whose recorded pid is dead.
void RemoveStaleSegments(const batchd::DaemonConfig& config) {
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
  if (!config.shm_group.empty()) {
    batchd::Log(batchd::LogLevel::kWarn, "shm_group_ignored",
                {{"group", config.shm_group},
                 {"msg",
                  "a ring is its client's uid's alone (0600 and a "
                  "POSIX ACL entry for that uid); --shm-group no "
                  "longer gives a group access"}});
  }
}

// Step 6. The core: streams, worker pool, read-ahead. A finished drain
// stops the daemon as SIGTERM does.
absl::StatusOr<std::unique_ptr<batchd::Core>> StartCore(
    const batchd::DaemonConfig& config) {
  batchd::CoreOptions core_options = config.core;
  // The cache: a given directory must be usable; the default one may not be
  // (a read-only home), and then the daemon runs without it.
  absl::StatusOr<std::shared_ptr<const batchd::CacheDir>> cache =
      batchd::CacheDir::Open(config.cache_dir);
  if (!cache.ok() && config.cache_dir_given) {
    return cache.status();
  }
  if (!cache.ok()) {
    batchd::Log(batchd::LogLevel::kWarn, "cache_off",
                {{"dir", config.cache_dir},
                 {"reason", std::string(cache.status().message())}});
  } else {
    core_options.cache = *cache;
    batchd::Log(batchd::LogLevel::kInfo, "cache",
                {{"dir", config.cache_dir.empty() ? "off" : config.cache_dir}});
  }
  absl::StatusOr<std::unique_ptr<batchd::Core>> core =
      batchd::Core::Create(core_options);
  if (!core.ok()) return core.status();
  (*core)->SetOnDrained([] {
    batchd::Log(batchd::LogLevel::kInfo, "drained");
    kill(getpid(), SIGTERM);
  });
  return core;
}

// The gRPC side while it serves; members are destroyed in reverse order
// (the server before the service it calls, before the peer table).
struct Serving {
  std::unique_ptr<batchd::PeerListener> peers;
  std::unique_ptr<batchd::BatchdService> service;
  std::unique_ptr<grpc::Server> server;
  int port = 0;  // TCP: the first bound port
};

// Step 7. The gRPC server on the unix socket (accepted by the daemon
// itself, so that every call carries its caller's kernel identity, peer.h)
// or on TCP (gRPC's), with the socket's mode and group applied.
absl::Status StartServing(const batchd::DaemonConfig& config,
                          const Endpoints& endpoints, gid_t socket_gid,
                          batchd::Core& core, Serving* serving) {
  const std::string& socket_path = endpoints.socket_path;
  if (!socket_path.empty()) {
    batchd::PeerListener::Options limits;
    limits.max_connections = config.max_connections;
    limits.max_connections_per_uid = config.max_connections_per_uid;
    limits.idle_seconds = config.connection_idle_seconds > 0
                              ? config.connection_idle_seconds
                              : 1e9;
    auto listener = batchd::PeerListener::Listen(socket_path, limits);
    if (!listener.ok()) return listener.status();
    serving->peers = std::move(*listener);
  }
  batchd::PeerListener* const peer_table = serving->peers.get();
  serving->service = std::make_unique<batchd::BatchdService>(
      core, [] { kill(getpid(), SIGTERM); },
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
  std::vector<int> extra_ports;
  if (socket_path.empty()) {
    // Every address the host resolved to, unless the port is chosen by the
    // kernel (then one: the ports would differ).
    const std::vector<std::string>& tcp = endpoints.tcp_addresses;
    builder.AddListeningPort(tcp.front(), endpoints.credentials,
                             &serving->port);
    if (tcp.front().substr(tcp.front().rfind(':') + 1) != "0") {
      extra_ports.resize(tcp.size() - 1);
      for (size_t i = 1; i < tcp.size(); ++i) {
        builder.AddListeningPort(tcp[i], endpoints.credentials,
                                 &extra_ports[i - 1]);
      }
    }
  }
  builder.RegisterService(serving->service.get());
  serving->server = builder.BuildAndStart();
  bool bound = !socket_path.empty() || serving->port != 0;
  for (int p : extra_ports) bound = bound && p != 0;
  if (serving->server == nullptr || !bound) {
    return absl::UnavailableError(absl::StrCat(
        "cannot listen on ", config.listen, " (in use, or no permission)"));
  }
  if (serving->peers != nullptr) {
    if (absl::Status s = serving->peers->Serve(serving->server.get());
        !s.ok()) {
      return s;
    }
  }
  if (!socket_path.empty()) {
    chmod(socket_path.c_str(), config.socket_mode);
    if (socket_gid != gid_t(-1) &&
        chown(socket_path.c_str(), uid_t(-1), socket_gid) != 0) {
      return absl::PermissionDeniedError(
          absl::StrCat("cannot give ", socket_path, " to group ",
                       config.socket_group, ": ", strerror(errno)));
    }
  }
  return absl::OkStatus();
}

// Step 8. Prometheus metrics at /metrics when --metrics-listen is set.
absl::StatusOr<std::unique_ptr<batchd::MetricsServer>> StartMetrics(
    const Endpoints& endpoints, batchd::Core& core) {
  if (endpoints.metrics_address.empty()) return nullptr;
  return batchd::MetricsServer::Start(endpoints.metrics_address, core);
}

// Step 9. The "ready" line, then systemd (Type=notify): ready only now that
// the socket accepts.
void AnnounceReady(const batchd::DaemonConfig& config,
                   const Endpoints& endpoints, const Serving& serving,
                   const batchd::Core& core) {
  batchd::Log(
      batchd::LogLevel::kInfo, "ready",
      {{"pid", std::to_string(getpid())},
       {"listen",
        endpoints.socket_path.empty()
            ? absl::StrCat("tcp://",
                           batchd::HostOf(endpoints.tcp_addresses.front()), ":",
                           serving.port)
            : config.listen},
       {"data_root", core.options().data_root},
       {"threads", std::to_string(core.options().threads)},
       {"index_threads", std::to_string(core.options().index_threads)},
       {"shm_prefix", config.core.shm_prefix},
       {"metrics", config.metrics_listen}});
  sd_notify(0, "READY=1");
}

// systemd's watchdog (WatchdogSec=), petted at a third of its period from a
// thread of its own while the daemon serves; nothing when it is not enabled.
class Watchdog {
 public:
  absl::Status Start() {
    uint64_t usec = 0;
    if (sd_watchdog_enabled(0, &usec) <= 0) return absl::OkStatus();
    absl::StatusOr<batchd::Thread> t =
        batchd::StartThread("the systemd watchdog thread", "", [this, usec] {
          while (!stopping_.load()) {
            sd_notify(0, "WATCHDOG=1");
            std::this_thread::sleep_for(std::chrono::microseconds(usec / 3));
          }
        });
    if (!t.ok()) return t.status();
    thread_ = *std::move(t);
    return absl::OkStatus();
  }
  void Stop() {
    stopping_.store(true);
    thread_.Join();
  }
  ~Watchdog() { Stop(); }

 private:
  std::atomic<bool> stopping_{false};
  batchd::Thread thread_;
};

// Step 10. Blocks until SIGTERM or SIGINT (a Shutdown call and a finished
// drain send SIGTERM to the daemon itself).
int WaitForStopSignal(const sigset_t& signals) {
  int sig = 0;
  sigwait(&signals, &sig);
  sd_notify(0, "STOPPING=1");
  batchd::Log(batchd::LogLevel::kInfo, "shutdown",
              {{"signal", sig == SIGINT ? "SIGINT" : "SIGTERM"}});
  return sig;
}

// The bound on a stop: if the steps of Stop have not finished
// kStopSeconds after SIGTERM (a call stuck in a mount that does not answer
// holds a lock or a gRPC handler), the rings this daemon created are
// unlinked and the process exits with status 1 at once.
class StopDeadline {
 public:
  static constexpr int kStopSeconds = 10;
  explicit StopDeadline(const std::string& shm_prefix)
      : state_(std::make_shared<State>()) {
    state_->prefix = absl::StrCat(shm_prefix, ".", getuid(), ".");
    absl::StatusOr<batchd::Thread> t =
        batchd::StartThread("the thread that bounds the stop", "",
                            [state = state_] { Run(*state); });
    if (t.ok()) {
      t->Detach();
    } else {
      // No thread to spare: the stop is then unbounded, as it was.
      batchd::Log(batchd::LogLevel::kWarn, "stop_unbounded",
                  {{"msg", std::string(t.status().message())}});
    }
  }
  ~StopDeadline() {
    absl::MutexLock lock(&state_->mu);
    state_->done = true;
    state_->cv.SignalAll();
  }

 private:
  // Shared with the thread, which may wake after the stop is done.
  struct State {
    std::string prefix;
    absl::Mutex mu;
    absl::CondVar cv;
    bool done ABSL_GUARDED_BY(mu) = false;
  };
  static void Run(State& state) {
    {
      absl::MutexLock lock(&state.mu);
      const absl::Time until = absl::Now() + absl::Seconds(kStopSeconds);
      while (!state.done && !state.cv.WaitWithDeadline(&state.mu, until)) {
      }
      if (state.done) return;
    }
    batchd::Log(batchd::LogLevel::kError, "stop_timeout",
                {{"seconds", std::to_string(kStopSeconds)},
                 {"msg", "the stop is stuck (in storage that does not "
                         "answer?): rings unlinked, exiting now"}});
    batchd::RemoveOwnSegments(state.prefix);
    fflush(nullptr);
    _exit(1);
  }

  const std::shared_ptr<State> state_;
};

// Step 11. New connections refused first, calls in flight given 2 s, then
// every stream closed and every segment unlinked, then the socket. The lock
// file stays: unlinking it would let two daemons hold locks on different
// files of the same name.
void Stop(const std::string& socket_path, Serving* serving,
          std::unique_ptr<batchd::MetricsServer> metrics,
          std::unique_ptr<batchd::Core> core) {
  metrics.reset();
  if (serving->peers != nullptr) serving->peers->Stop();  // no new connections
  serving->server->Shutdown(std::chrono::system_clock::now() +
                            std::chrono::seconds(2));
  serving->server->Wait();
  core.reset();  // closes every stream, unlinks every segment
  if (!socket_path.empty()) unlink(socket_path.c_str());
  batchd::Log(batchd::LogLevel::kInfo, "stopped");
}

}  // namespace

int main(int argc, char** argv) {
  // First: reading the settings makes gRPC credentials, and gRPC starts
  // its threads then; each must inherit the mask.
  const sigset_t signals = BlockStopSignals();
  // Debian's Abseil is built with its deadlock detection on, which makes
  // every Mutex::Lock look up a graph under a global lock (about 3 % of a
  // busy worker's CPU). The daemon's locks are checked by the tests (whose
  // binaries keep it on) and by TSan; in the daemon it is off.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  // Before anything that may log through protobuf or gRPC.
  batchd::RouteLibraryLogs();
  batchd::DaemonConfig config;
  if (std::optional<int> done = ReadSettings(argc, argv, &config)) return *done;

  absl::StatusOr<Endpoints> endpoints = ResolveEndpoints(config);
  if (!endpoints.ok()) FailNow(2, endpoints.status());

  absl::StatusOr<int> lock_fd = ClaimSocket(
      config.listen, endpoints->socket_path, config.allow_shared_socket_dir);
  if (!lock_fd.ok()) FailNow(1, lock_fd.status());

  gid_t socket_gid = gid_t(-1);
  if (!config.socket_group.empty()) {
    absl::StatusOr<gid_t> gid =
        batchd::ResolveGroup("socket-group", config.socket_group);
    if (!gid.ok()) FailNow(2, gid.status());
    socket_gid = *gid;
  }

  RemoveStaleSegments(config);

  absl::StatusOr<std::unique_ptr<batchd::Core>> core = StartCore(config);
  if (!core.ok()) FailNow(1, core.status());

  Serving serving;
  if (absl::Status s =
          StartServing(config, *endpoints, socket_gid, **core, &serving);
      !s.ok()) {
    FailNow(1, s);
  }
  absl::StatusOr<std::unique_ptr<batchd::MetricsServer>> metrics =
      StartMetrics(*endpoints, **core);
  if (!metrics.ok()) FailNow(1, metrics.status());

  Watchdog watchdog;
  if (absl::Status s = watchdog.Start(); !s.ok()) FailNow(1, s);
  AnnounceReady(config, *endpoints, serving, **core);

  WaitForStopSignal(signals);
  StopDeadline deadline(config.core.shm_prefix);
  watchdog.Stop();
  Stop(endpoints->socket_path, &serving, std::move(*metrics), std::move(*core));
  if (batchd::AbandonedThreads() > 0) {
    // Threads stuck in storage that does not answer still run: the static
    // destructors must not run under them.
    fflush(nullptr);
    _exit(0);
  }
  return 0;
}

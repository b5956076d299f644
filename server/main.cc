// batchd: the daemon. Parses flags, removes stale segments, serves gRPC on a
// unix socket (or loopback TCP), and on SIGTERM / SIGINT / Shutdown closes
// every stream and unlinks every segment before it exits.
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "client/ring.h"
#include "server/core.h"
#include "server/grpc_service.h"

namespace {

constexpr char kUsage[] = R"(batchd - one input-pipeline server per node for data-parallel training

Usage: batchd [flags]

batchd reads, shuffles and decodes a data set once and writes every local
rank's slice of every global batch into a shared-memory ring of that rank
(/dev/shm/<prefix>.<uid>.<stream>.<rank>). Trainers attach with the batchd
client (C++ batchd::Loader, Python batchd.Loader); operators use batchctl.

Flags:
  --listen ADDR          where the gRPC control plane listens:
                         unix:///path/to/socket or tcp://127.0.0.1:PORT
                         (TCP binds loopback only). Default:
                         unix:///run/batchd/batchd.sock
  --data-root DIR        data paths of stream specs are confined to DIR
                         ('..' and symlinks out of it are refused).
                         Default: the current directory
  --threads N            worker threads shared by every stream and rank.
                         Default: the cores this process may use
  --shm-prefix NAME      first part of segment names. Default: batchd
  --shm-group GROUP      give this group (name or gid) read/write access to
                         the rings (mode 0660); default: owner only (0600)
  --slots N              ring slots per rank when a spec asks for 0.
                         Default: 4
  --client-stale-seconds S
                         a client in another pid namespace whose heartbeat
                         is older than S is taken as dead. Default: 10
  --idle-stream-seconds S
                         forget a stream none of whose ranks has been
                         attached for S seconds. Default: 300
  --version              print the version and exit
  --help                 print this help and exit

Signals: SIGTERM and SIGINT close every stream, unlink every segment and
exit 0. At start, segments left by dead batchd processes are removed.

Exit codes: 0 clean shutdown, 1 could not start, 2 bad flags.
)";

bool IsLoopback(const std::string& host) {
  return host == "localhost" || host.rfind("127.", 0) == 0 ||
         host == "[::1]" || host == "::1";
}

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

}  // namespace

int main(int argc, char** argv) {
  batchd::CoreOptions options;
  std::string listen = "unix:///run/batchd/batchd.sock";
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    std::string value;
    const size_t eq = arg.find('=');
    const bool has_eq = arg.rfind("--", 0) == 0 && eq != std::string::npos;
    if (has_eq) {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
    }
    auto next = [&](std::string* out) {
      if (has_eq) {
        *out = value;
        return true;
      }
      if (i + 1 >= argc) return false;
      *out = argv[++i];
      return true;
    };
    auto need = [&](std::string* out) {
      if (!next(out)) {
        fprintf(stderr, "batchd: %s needs a value (see --help)\n",
                arg.c_str());
        exit(2);
      }
    };
    auto need_int = [&](int64_t lo) {
      std::string v;
      need(&v);
      int64_t n;
      if (!absl::SimpleAtoi(v, &n) || n < lo) {
        fprintf(stderr, "batchd: %s wants an integer >= %lld, not '%s'\n",
                arg.c_str(), static_cast<long long>(lo), v.c_str());
        exit(2);
      }
      return n;
    };
    if (arg == "--help" || arg == "-h") {
      fputs(kUsage, stdout);
      return 0;
    } else if (arg == "--version") {
      printf("batchd 0.1.0 (shared-memory layout version %u)\n",
             batchd::shm::kLayoutVersion);
      return 0;
    } else if (arg == "--listen") {
      need(&listen);
    } else if (arg == "--data-root") {
      need(&options.data_root);
    } else if (arg == "--threads") {
      options.threads = int(need_int(1));
    } else if (arg == "--shm-prefix") {
      need(&options.shm_prefix);
    } else if (arg == "--slots") {
      options.default_slots = uint32_t(need_int(1));
    } else if (arg == "--client-stale-seconds") {
      options.client_stale_seconds = double(need_int(1));
    } else if (arg == "--idle-stream-seconds") {
      options.idle_stream_seconds = double(need_int(0));
    } else if (arg == "--shm-group") {
      std::string g;
      need(&g);
      int64_t gid;
      if (absl::SimpleAtoi(g, &gid)) {
        options.shm_group = gid_t(gid);
      } else if (group* gr = getgrnam(g.c_str())) {
        options.shm_group = gr->gr_gid;
      } else {
        return Fail(2, absl::StrCat("--shm-group: no group named '", g, "'"));
      }
    } else {
      return Fail(2, absl::StrCat("unknown flag '", argv[i],
                                  "' (see batchd --help)"));
    }
  }

  // Where to listen, in gRPC's terms.
  std::string grpc_address, socket_path;
  if (listen.rfind("unix://", 0) == 0) {
    socket_path = listen.substr(7);
    grpc_address = "unix:" + socket_path;
  } else if (listen.rfind("unix:", 0) == 0) {
    socket_path = listen.substr(5);
    grpc_address = listen;
  } else if (listen.rfind("tcp://", 0) == 0) {
    grpc_address = listen.substr(6);
    const size_t colon = grpc_address.rfind(':');
    const std::string host =
        colon == std::string::npos ? "" : grpc_address.substr(0, colon);
    if (!IsLoopback(host)) {
      return Fail(2, absl::StrCat("--listen ", listen,
                                  ": TCP listens on loopback only "
                                  "(127.0.0.1 or [::1])"));
    }
  } else {
    return Fail(2, absl::StrCat("--listen ", listen,
                                ": use unix:///path or tcp://127.0.0.1:PORT"));
  }

  // One daemon per socket: a lock file beside the socket, then a probe, so
  // that a second daemon never unlinks the socket of a live one (gRPC
  // removes an existing socket file when it binds).
  int lock_fd = -1;
  if (!socket_path.empty()) {
    const std::string dir = socket_path.substr(0, socket_path.rfind('/'));
    if (!dir.empty()) mkdir(dir.c_str(), 0755);
    const std::string lock_path = socket_path + ".lock";
    lock_fd = open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (lock_fd < 0) {
      return Fail(1, absl::StrCat("cannot open ", lock_path, ": ",
                                  strerror(errno)));
    }
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

  // Signals are taken by sigwait below, never by a handler: block them
  // before any thread starts so that every thread inherits the mask.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  const std::string stale_prefix =
      absl::StrCat(options.shm_prefix, ".", getuid(), ".");
  for (const std::string& seg : batchd::RemoveStaleSegments(stale_prefix)) {
    fprintf(stderr,
            "batchd: level=info event=stale_segment_removed segment=%s\n",
            seg.c_str());
  }

  absl::StatusOr<std::unique_ptr<batchd::Core>> core =
      batchd::Core::Create(options);
  if (!core.ok()) return Fail(1, std::string(core.status().message()));

  batchd::BatchdService service(**core, [] { kill(getpid(), SIGTERM); });
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  int port = 0;
  builder.AddListeningPort(grpc_address, grpc::InsecureServerCredentials(),
                           &port);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || (socket_path.empty() && port == 0)) {
    return Fail(1, absl::StrCat("cannot listen on ", listen,
                                " (in use, or no permission)"));
  }
  if (!socket_path.empty()) chmod(socket_path.c_str(), 0660);
  fprintf(stderr,
          "batchd: level=info event=ready pid=%d listen=%s data_root=%s "
          "threads=%d shm_prefix=%s\n",
          getpid(), listen.c_str(), (*core)->options().data_root.c_str(),
          (*core)->options().threads, options.shm_prefix.c_str());

  int sig = 0;
  sigwait(&signals, &sig);
  fprintf(stderr, "batchd: level=info event=shutdown signal=%s\n",
          sig == SIGINT ? "SIGINT" : "SIGTERM");
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  server->Wait();
  core->reset();  // closes every stream, unlinks every segment
  if (!socket_path.empty()) {
    // The lock file stays: unlinking it would let two daemons hold locks
    // on different files of the same name.
    unlink(socket_path.c_str());
  }
  fprintf(stderr, "batchd: level=info event=stopped\n");
  return 0;
}

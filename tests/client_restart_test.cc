// The client opening its stream at the worst moments of a daemon restart,
// against a scripted daemon (a gRPC server in the test whose OpenStream
// answers as the test says) and a socket whose listener drops every
// connection: an exiting daemon that refuses, a daemon that answers and
// stops before the ring is mapped, and a socket that drops connections while
// the daemon restarts. Each is a pause for the rank, never an error, and a
// short one; so is a call the daemon cancels as it stops. And a daemon
// killed while it creates a ring leaves no segment; one killed after is
// removed by the daemon that follows.
#include <dlfcn.h>
#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_format.h"
#include "batchd/loader.h"
#include "batchd/v1/batchd.grpc.pb.h"
#include "batchd/version.h"
#include "ring/ring.h"
#include "tests/testutil.h"

// posix_fallocate, the slow step of a ring's creation (it reserves every
// page), as the test wants it: in a child that set it, the process is
// killed there, or stops there until killed.
// kHang writes a byte to hang_fd first, so that the test knows.
enum class Fallocate { kReal, kDie, kHang };
Fallocate fallocate_mode = Fallocate::kReal;
int hang_fd = -1;

extern "C" int posix_fallocate(int fd, off_t offset, off_t len) {
  if (fallocate_mode == Fallocate::kDie) raise(SIGKILL);
  if (fallocate_mode == Fallocate::kHang) {
    if (write(hang_fd, "h", 1) != 1) _exit(2);
    for (;;) pause();
  }
  using Real = int (*)(int, off_t, off_t);
  static Real real = reinterpret_cast<Real>(dlsym(RTLD_NEXT, "posix_fallocate"));
  return real(fd, offset, len);
}

namespace batchd {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

using testutil::WaitFor;

// A daemon whose OpenStream answers call number n (from 0) with
// answer(n, &response): an error status, or OK with the response filled.
class ScriptedDaemon final : public v1::Batchd::Service {
 public:
  using Answer = std::function<grpc::Status(int, v1::OpenStreamResponse*)>;

  ScriptedDaemon(const std::string& socket, Answer answer)
      : answer_(std::move(answer)) {
    grpc::ServerBuilder b;
    b.AddListeningPort("unix:" + socket, grpc::InsecureServerCredentials());
    b.RegisterService(this);
    server_ = b.BuildAndStart();
  }
  ~ScriptedDaemon() override { server_->Shutdown(); }
  bool ok() const { return server_ != nullptr; }
  int calls() const { return calls_.load(); }

  grpc::Status OpenStream(grpc::ServerContext*, const v1::OpenStreamRequest*,
                          v1::OpenStreamResponse* resp) override {
    resp->set_protocol_version(kProtocolVersion);
    resp->set_server_version(kBatchdVersion);
    resp->set_server_pid(uint32_t(getpid()));
    return answer_(calls_++, resp);
  }

 private:
  Answer answer_;
  std::atomic<int> calls_{0};
  std::unique_ptr<grpc::Server> server_;
};

// A ring as a daemon would have made it for the stream.
class Ring {
 public:
  explicit Ring(const std::string& tag) {
    RingGeometry g;
    g.slot_count = 2;
    g.payload_bytes = 64;
    g.stream_name = "job";
    name_ = "/bdrst" + std::to_string(getpid()) + tag;
    auto w = RingWriter::Create(name_, g);
    if (w.ok()) writer_ = std::move(*w);
  }
  bool ok() const { return writer_ != nullptr; }
  // An answer with this ring.
  grpc::Status Fill(v1::OpenStreamResponse* resp) const {
    resp->set_segment(name_);
    resp->set_slots(writer_->geometry().slot_count);
    resp->set_slot_bytes(writer_->geometry().SlotBytes());
    return grpc::Status::OK;
  }

 private:
  std::string name_;
  std::unique_ptr<RingWriter> writer_;
};

// A listener on a unix socket that drops every connection as soon as it
// is made, as a daemon that stops while a rank connects: it notes when
// each gRPC connection (one that sends HTTP/2's preface; the client's
// identity check sends nothing) came.
class DroppingSocket {
 public:
  explicit DroppingSocket(const std::string& path) : path_(path) {
    fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    strncpy(a.sun_path, path.c_str(), sizeof(a.sun_path) - 1);
    unlink(path.c_str());
    ok_ = bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 &&
          listen(fd_, 16) == 0;
    thread_ = std::thread([this] { Serve(); });
  }
  ~DroppingSocket() { Stop(); }
  bool ok() const { return ok_; }
  // Stops listening and removes the socket, as a daemon that exits.
  void Stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
    unlink(path_.c_str());
  }
  std::vector<double> grpc_connections() {
    std::lock_guard<std::mutex> lock(mu_);
    return times_;
  }

 private:
  void Serve() {
    const auto start = Clock::now();
    while (!stop_) {
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, 20) <= 0) continue;
      const int c = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) continue;
      pollfd q{c, POLLIN, 0};
      char buf[64];
      ssize_t n = 0;
      if (poll(&q, 1, 2000) > 0) n = read(c, buf, sizeof(buf));
      if (n >= 3 && memcmp(buf, "PRI", 3) == 0) {
        std::lock_guard<std::mutex> lock(mu_);
        times_.push_back(SecondsSince(start));
      }
      close(c);
    }
  }

  std::string path_;
  int fd_ = -1;
  bool ok_ = false;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::mutex mu_;
  std::vector<double> times_;
};

LoaderOptions Options(const std::string& socket) {
  LoaderOptions o;
  o.server = "unix://" + socket;
  o.stream = "job";
  o.global_batch_size = 8;
  o.world_size = 1;
  o.rank = 0;
  o.connect_timeout_seconds = 30;
  return o;
}

// Opens the stream against a scripted daemon whose first OpenStream is
// answered by `first` (a ring named for `tag` answers the next): the open
// waits for the next answer and succeeds.
void ExpectOpenedByTheSecondAnswer(
    const std::string& tag,
    const std::function<grpc::Status(v1::OpenStreamResponse*)>& first) {
  const testutil::TempDir tmp("restart");
  Ring ring(tag);
  ASSERT_TRUE(ring.ok());
  ScriptedDaemon daemon(tmp.Path("sock"),
                        [&](int call, v1::OpenStreamResponse* resp) {
                          return call == 0 ? first(resp) : ring.Fill(resp);
                        });
  ASSERT_TRUE(daemon.ok());
  auto loader = Loader::Open(Options(tmp.Path("sock")));
  ASSERT_TRUE(loader.ok()) << loader.status();
  EXPECT_EQ(daemon.calls(), 2);
}

TEST(ClientRestartTest, AnOpenRefusedByAnExitingDaemonWaitsForTheNextOne) {
  ExpectOpenedByTheSecondAnswer("exiting", [](v1::OpenStreamResponse*) {
    return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                        "batchd is exiting (SIGTERM)");
  });
}

TEST(ClientRestartTest, ARingGoneBeforeItWasMappedIsOpenedAgain) {
  // The daemon answered, then stopped; the one that followed removed the
  // dead one's ring before this rank mapped it.
  ExpectOpenedByTheSecondAnswer("again", [](v1::OpenStreamResponse* resp) {
    resp->set_segment("/bdrst" + std::to_string(getpid()) + "gone");
    resp->set_slots(2);
    return grpc::Status::OK;
  });
}

TEST(ClientRestartTest, AnOpenTheDaemonCancelsWaitsForTheNextOne) {
  // SIGTERM while ranks reopen: a daemon that stops cancels the OpenStream
  // calls it has not answered (the soak saw "OpenStream wmt-train rank 0:
  // CANCELLED"). The rank took it for its stream closed and raised it to
  // the trainer; the client never cancels the call itself.
  ExpectOpenedByTheSecondAnswer("cancelled", [](v1::OpenStreamResponse*) {
    return grpc::Status(grpc::StatusCode::CANCELLED, "");
  });
}

TEST(ClientRestartTest, ASocketThatDropsConnectionsIsTriedAgainAtOnce) {
  // While a daemon restarts, connections are refused or dropped. gRPC's
  // default reconnect backoff (1 s, growing by 1.6 to 120 s, jitter +-20 %)
  // made every rank that met it wait a second or more, and longer each
  // time, after the new daemon accepted. Its 9th connection comes 55.9 s
  // after the first at the earliest (0.8 s x (1 + 1.6 + ... + 1.6^7)); the
  // client's own backoff (100 ms, at most 1 s) brings it within about 5 s.
  // The bound of the wait below lies between the two, far from both, so
  // that no load can make the client miss it and nothing can make the
  // default backoff meet it.
  const testutil::TempDir tmp("restart");
  const std::string& dir = tmp.path();
  const std::string sock = dir + "/sock";
  DroppingSocket dropping(sock);
  ASSERT_TRUE(dropping.ok());
  LoaderOptions o = Options(sock);
  o.connect_timeout_seconds = 120;  // one OpenStream call outlives the wait
  absl::StatusOr<std::unique_ptr<Loader>> loader =
      absl::UnknownError("not opened");
  std::thread opener([&] { loader = Loader::Open(o); });
  constexpr size_t kConnections = 9;
  const bool tried = WaitFor(
      [&] { return dropping.grpc_connections().size() >= kConnections; },
      50);
  const std::vector<double> t = dropping.grpc_connections();
  dropping.Stop();
  Ring ring("dropped");
  ASSERT_TRUE(ring.ok());
  ScriptedDaemon daemon(sock, [&](int, v1::OpenStreamResponse* resp) {
    return ring.Fill(resp);
  });
  ASSERT_TRUE(daemon.ok());
  opener.join();
  std::string at;
  for (double s : t) at += absl::StrFormat(" %.2f", s);
  EXPECT_TRUE(tried) << t.size() << " gRPC connections in 50 s, not "
                     << kConnections << " (the reconnect backoff is gRPC's "
                     << "default?), at" << at << " s";
  ASSERT_TRUE(loader.ok()) << loader.status();
}

// A child that creates ring `name` and meets posix_fallocate in `mode`
// (kHang: writes to `hang_pipe` when it is there).
pid_t CreateInChild(const std::string& name, Fallocate mode,
                    int hang_pipe = -1) {
  const pid_t pid = fork();
  if (pid == 0) {
    fallocate_mode = mode;
    hang_fd = hang_pipe;
    RingGeometry g;
    g.payload_bytes = 1 << 20;
    auto w = RingWriter::Create(name, g);
    _exit(w.ok() ? 0 : 1);
  }
  return pid;
}

bool Exists(const std::string& name) {
  return access(("/dev/shm" + name).c_str(), F_OK) == 0;
}

TEST(ClientRestartTest, ARingWhoseDaemonDiedCreatingItLeavesNothing) {
  // kill -9 (an OOM kill, a restart) in the middle of an OpenStream, while
  // the ring's pages are being reserved: no segment may stay behind. It
  // would hold its whole size of /dev/shm, and a walk cannot tell whose a
  // file with no header is until it is a minute old.
  const std::string prefix = "bdhalf" + std::to_string(getpid()) + ".";
  const std::string dead = "/" + prefix + "dead";
  const pid_t killed = CreateInChild(dead, Fallocate::kDie);
  int status = 0;
  ASSERT_EQ(waitpid(killed, &status, 0), killed);
  ASSERT_TRUE(WIFSIGNALED(status)) << "the child was to die creating it";
  EXPECT_FALSE(Exists(dead));
  // One whose creator is still reserving has no name yet: nobody can open
  // it, and a walk has nothing of it to judge.
  const std::string busy = "/" + prefix + "busy";
  int there[2];
  ASSERT_EQ(pipe(there), 0);
  const pid_t hung = CreateInChild(busy, Fallocate::kHang, there[1]);
  pollfd p{there[0], POLLIN, 0};
  ASSERT_EQ(poll(&p, 1, 60000), 1) << "the child never reserved its ring";
  EXPECT_FALSE(Exists(busy));
  EXPECT_TRUE(RemoveStaleSegments(prefix).empty());
  kill(hung, SIGKILL);
  waitpid(hung, &status, 0);
  EXPECT_FALSE(Exists(busy));
  close(there[0]);
  close(there[1]);
  // A ring made whole whose creator was then killed is the next walk's.
  const std::string made = "/" + prefix + "made";
  const pid_t maker = fork();
  if (maker == 0) {
    RingGeometry g;
    g.payload_bytes = 1 << 20;
    auto w = RingWriter::Create(made, g);
    if (!w.ok()) _exit(1);
    raise(SIGKILL);
  }
  ASSERT_EQ(waitpid(maker, &status, 0), maker);
  ASSERT_TRUE(WIFSIGNALED(status)) << "the maker could not create its ring";
  ASSERT_TRUE(Exists(made));
  EXPECT_EQ(RemoveStaleSegments(prefix), std::vector<std::string>{made});
  EXPECT_FALSE(Exists(made));
}

}  // namespace
}  // namespace batchd

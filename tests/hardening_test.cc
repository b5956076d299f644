// Attacks on the daemon and on its clients, each by the means an attacker
// has: a request whose sizes wrap, a field naming another job's pid, two
// containers whose trainers are both pid 1, another user on the socket, a
// TCP caller, a ring nobody maps, a forged slot or header in shared memory.
// Callers other than the test itself are real processes (test_rpc_caller),
// forked and, where the attack needs it, turned into user nobody or put in
// a new pid namespace before they exec.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "base/address.h"
#include "base/process.h"
#include "batchd/loader.h"
#include "ring/ring.h"
#include "tests/synthetic_stream.h"
#include "tests/test_server.h"
#include "tests/testutil.h"

namespace batchd {
namespace {

using testing::TestServer;

constexpr uid_t kNobody = 65534;

// A test_rpc_caller process, run as this process's user, as nobody (with
// `extra_group` among its groups when given) or as pid 1 of a new pid
// namespace.
class Caller : public testutil::Child {
 public:
  enum class As { kSelf, kNobody, kPidOne };
  Caller(const std::string& server, std::vector<std::string> args,
         As as = As::kSelf, gid_t extra_group = gid_t(-1))
      : Child({BATCHD_RPC_CALLER_PATH, server}, args, [as, extra_group] {
          if (as == As::kNobody) {
            std::vector<gid_t> groups;
            if (extra_group != gid_t(-1)) groups.push_back(extra_group);
            if (!testutil::BecomeUser(kNobody, kNobody, groups)) _exit(90);
          }
          if (as == As::kPidOne) EnterPidNamespace();
        }) {}

  // The next line it prints, or "" at its end or after 30 s.
  std::string Line() { return Child::Line(30000); }

 private:
  // Makes what is exec'd next pid 1 of a new pid namespace, as a
  // container's trainer is: this process forks it and exits with its code.
  static void EnterPidNamespace() {
    if (unshare(CLONE_NEWPID) != 0) _exit(91);
    const pid_t inner = fork();
    if (inner < 0) _exit(92);
    if (inner == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      return;
    }
    int status;
    waitpid(inner, &status, 0);
    _exit(WIFEXITED(status) ? WEXITSTATUS(status) : 93);
  }
};

constexpr int kOk = 0, kInvalidArgument = 3, kAlreadyExists = 6,
              kPermissionDenied = 7;

bool Exited(pid_t pid, double seconds) {
  for (int i = 0; i < int(seconds * 100); ++i) {
    int status;
    if (waitpid(pid, &status, WNOHANG) == pid) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

bool StillRunning(pid_t pid) {
  int status;
  return waitpid(pid, &status, WNOHANG) == 0;
}

LoaderOptions Options(const TestServer& s, const std::string& stream) {
  LoaderOptions o = testutil::SyntheticStream(s.address(), stream, 8, 1, 0);
  o.connect_timeout_seconds = 10;
  return o;
}

bool StartShared(TestServer& server, std::vector<std::string> extra = {}) {
  return server.Start(testutil::SharedDaemonFlags(server.dir(), extra));
}

// ------------------------------------------------------------ 1: overflow

TEST(HardeningTest, WrappingSizesAreRefusedAndTheDaemonStaysUp) {
  TestServer server("overflow");
  ASSERT_TRUE(server.Start());
  // Each bound holds alone; the product wraps to a 4 MiB segment.
  LoaderOptions o = Options(server, "wrap");
  o.slots = 1024;
  o.global_batch_size = uint64_t(1) << 22;
  o.options = {{"examples", std::to_string(uint64_t(1) << 22)},
               {"payload_bytes", std::to_string((uint64_t(1) << 32) - 24)}};
  auto l = Loader::Open(o);
  ASSERT_FALSE(l.ok());
  EXPECT_EQ(l.status().code(), absl::StatusCode::kInvalidArgument)
      << l.status();
  EXPECT_TRUE(server.Segments().empty());
  ASSERT_TRUE(StillRunning(server.pid()));
  auto fine = Loader::Open(Options(server, "fine"));
  ASSERT_TRUE(fine.ok()) << fine.status();
  auto b = (*fine)->Next();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_TRUE(StillRunning(server.pid()));
}

// ------------------------------------------- 5: client_pid from a request

TEST(HardeningTest, NamingAnotherProcessPidDoesNotEvictItsRank) {
  TestServer server("pid");
  ASSERT_TRUE(StartShared(server));
  Caller victim(server.address(), {"open", "job", "0", "--hold"});
  ASSERT_EQ(victim.Line(), "attached");
  const std::string pid = std::to_string(victim.pid());
  // The same user, then another one, each naming the victim's pid; the
  // other user reaches the victim's stream only by naming its owner.
  Caller same(server.address(), {"open", "job", "0", "--client-pid", pid});
  EXPECT_EQ(same.Wait(), kAlreadyExists);
  Caller other(server.address(),
               {"open", "job", "0", "--client-pid", pid, "--owner",
                std::to_string(geteuid())},
               Caller::As::kNobody);
  EXPECT_EQ(other.Wait(), kPermissionDenied);
  // Without owner_uid its `job` is a stream of its own.
  Caller own(server.address(), {"open", "job", "0", "--client-pid", pid},
             Caller::As::kNobody);
  EXPECT_EQ(own.Line().rfind("opened ", 0), 0u);
  own.CloseStdin();
  EXPECT_EQ(own.Wait(), kOk);
  victim.CloseStdin();
  EXPECT_EQ(victim.Wait(), kOk) << victim.Line();
}

TEST(HardeningTest, TheSameProcessMayReopenItsRank) {
  TestServer server("reopen");
  ASSERT_TRUE(server.Start());
  auto first = Loader::Open(Options(server, "again"));
  ASSERT_TRUE(first.ok()) << first.status();
  // A second Open by the same process (a re-created Loader) takes the rank
  // over; the first one's ring is closed.
  auto second = Loader::Open(Options(server, "again"));
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_TRUE((*second)->Next().ok());
}

// ------------------------------------------------- 6: pid 1 in containers

TEST(HardeningTest, TwoPidOneContainersDoNotStealARank) {
  if (unshare(0) != 0 || geteuid() != 0) GTEST_SKIP() << "needs root";
  TestServer server("pidns");
  ASSERT_TRUE(server.Start());
  Caller first(server.address(), {"open", "ns", "0", "--hold"},
               Caller::As::kPidOne);
  const std::string line = first.Line();
  if (line.empty() && first.Wait() == 91) {
    GTEST_SKIP() << "no CLONE_NEWPID here";
  }
  ASSERT_EQ(line, "attached");
  // The other container's trainer is pid 1 too, and says so.
  Caller second(server.address(), {"open", "ns", "0", "--client-pid", "1"},
                Caller::As::kPidOne);
  EXPECT_EQ(second.Wait(), kAlreadyExists);
  Caller third(server.address(), {"open", "ns", "0", "--hold"},
               Caller::As::kPidOne);
  EXPECT_EQ(third.Wait(), kAlreadyExists);
  first.CloseStdin();
  EXPECT_EQ(first.Wait(), kOk) << first.Line();
}

// ------------------------------------------------------ authorization

TEST(HardeningTest, AnotherUserCannotCloseDrainOrShutDown) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to become another user";
  TestServer server("authz");
  ASSERT_TRUE(StartShared(server));
  Caller owner(server.address(), {"open", "mine", "0", "--hold"});
  ASSERT_EQ(owner.Line(), "attached");
  for (const char* op : {"shutdown", "drain"}) {
    Caller nobody(server.address(), {op}, Caller::As::kNobody);
    EXPECT_EQ(nobody.Wait(), kPermissionDenied) << op;
  }
  Caller close(server.address(), {"close", "mine"}, Caller::As::kNobody);
  EXPECT_EQ(close.Wait(), kPermissionDenied);
  // Nobody may open streams of its own, and close those.
  Caller theirs(server.address(), {"open", "theirs", "1", "--hold"},
                Caller::As::kNobody);
  ASSERT_EQ(theirs.Line(), "attached");
  Caller close_theirs(server.address(), {"close", "theirs"},
                      Caller::As::kNobody);
  EXPECT_EQ(close_theirs.Wait(), kOk);
  ASSERT_TRUE(StillRunning(server.pid()));
  owner.CloseStdin();
  EXPECT_EQ(owner.Wait(), kOk) << owner.Line();
  // The owner (root here) may close its stream; root may shut down.
  Caller root_close(server.address(), {"close", "mine"});
  EXPECT_EQ(root_close.Wait(), kOk);
  Caller shutdown(server.address(), {"shutdown"});
  EXPECT_EQ(shutdown.Wait(), kOk);
  EXPECT_TRUE(Exited(server.pid(), 20));
}

TEST(HardeningTest, AdminGroupMayDrain) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to become another user";
  TestServer server("admin");
  ASSERT_TRUE(StartShared(server, {"--admin-group", "4242"}));
  Caller plain(server.address(), {"drain"}, Caller::As::kNobody);
  EXPECT_EQ(plain.Wait(), kPermissionDenied);
  Caller admin(server.address(), {"drain"}, Caller::As::kNobody, 4242);
  EXPECT_EQ(admin.Wait(), kOk);
  EXPECT_TRUE(Exited(server.pid(), 20)) << "a drained daemon exits";
}

pid_t StartTcpDaemon(const std::string& address, const std::string& dir,
                     std::vector<std::string> extra) {
  std::vector<std::string> args = {testing::DaemonPath(),
                                   "--listen",
                                   address,
                                   "--data-root",
                                   dir,
                                   "--shm-prefix",
                                   "bdtcp" + std::to_string(getpid()),
                                   "--threads",
                                   "1"};
  args.insert(args.end(), extra.begin(), extra.end());
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    execv(argv[0], argv.data());
    _exit(127);
  }
  return pid;
}

TEST(HardeningTest, TcpWithoutClientCertificatesGetsNoShutdown) {
  const std::string dir = testing::MakeTempDir();
  const std::string address = "tcp://127.0.0.1:" + std::to_string(FreeLoopbackPort());
  const pid_t daemon = StartTcpDaemon(address, dir, {});
  // Whoever reaches a loopback port: any local user.
  int code = -1;
  for (int i = 0; i < 100; ++i) {
    Caller c(address, {"shutdown"});
    code = c.Wait();
    if (code != 14) break;  // UNAVAILABLE: not listening yet
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(code, kPermissionDenied);
  Caller drain(address, {"drain"});
  EXPECT_EQ(drain.Wait(), kPermissionDenied);
  EXPECT_TRUE(StillRunning(daemon));
  kill(daemon, SIGTERM);
  EXPECT_TRUE(Exited(daemon, 20));

  // Allowed only when the operator says so.
  const std::string address2 = "tcp://127.0.0.1:" + std::to_string(FreeLoopbackPort());
  const pid_t allowed = StartTcpDaemon(address2, dir, {"--tcp-admin"});
  for (int i = 0; i < 100; ++i) {
    Caller c(address2, {"shutdown"});
    code = c.Wait();
    if (code != 14) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(code, kOk);
  EXPECT_TRUE(Exited(allowed, 20));
}

// ------------------------------------------------ 10: rings nobody maps

TEST(HardeningTest, ARingNobodyMapsIsFreedAndDoesNotBlockADrain) {
  TestServer server("attach");
  ASSERT_TRUE(server.Start({"--attach-timeout-seconds", "1"}));
  // A live process that asks for a ring and never maps it.
  Caller squatter(server.address(), {"open", "squat", "0"});
  ASSERT_EQ(squatter.Line().rfind("opened ", 0), 0u);
  ASSERT_EQ(server.Segments().size(), 1u);
  bool freed = false;
  for (int i = 0; i < 1500 && !freed; ++i) {
    freed = server.Segments().empty();
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(freed) << "the ring outlived --attach-timeout-seconds";
  // Asked again and again, it still cannot hold a drain.
  Caller again(server.address(), {"open", "squat", "1"});
  ASSERT_EQ(again.Line().rfind("opened ", 0), 0u);
  Caller drain(server.address(), {"drain"});
  EXPECT_EQ(drain.Wait(), kOk);
  EXPECT_TRUE(Exited(server.pid(), 30)) << "the drain never finished";
}

// ------------------------------------------------------------- minor

TEST(HardeningTest, NulBytesAndFarStartStepsAreRefused) {
  TestServer server("nul");
  ASSERT_TRUE(server.Start());
  mkdir((server.dir() + "/sub").c_str(), 0755);
  LoaderOptions o = Options(server, "nul");
  o.data = std::string("sub\0/../../etc", 14);
  auto l = Loader::Open(o);
  ASSERT_FALSE(l.ok());
  EXPECT_EQ(l.status().code(), absl::StatusCode::kInvalidArgument)
      << l.status();
  o = Options(server, "nulopt");
  o.options["payload_bytes"] = std::string("64\0junk", 7);
  l = Loader::Open(o);
  EXPECT_EQ(l.status().code(), absl::StatusCode::kInvalidArgument)
      << l.status();
  for (uint64_t step : {~uint64_t(0), ~uint64_t(0) - 3, uint64_t(1) << 62}) {
    o = Options(server, "far");
    o.start_step = step;
    l = Loader::Open(o);
    EXPECT_EQ(l.status().code(), absl::StatusCode::kInvalidArgument)
        << step << ": " << l.status();
  }
  // A name that tools would read as a flag (batchctl close --x).
  o = Options(server, "--x");
  l = Loader::Open(o);
  EXPECT_EQ(l.status().code(), absl::StatusCode::kInvalidArgument)
      << l.status();
  EXPECT_TRUE(StillRunning(server.pid()));
}

// ----------------------------------------- 11: forged shared memory

TEST(HardeningTest, AForgedSlotIsACleanErrorNotAnOutOfBoundsRead) {
  testutil::TestRing ring = testutil::MakeRing(
      testutil::SegmentName("harden"), testutil::RingGeometryOf(2, 4096));
  ASSERT_TRUE(ring.ok());
  RingWriter& writer = *ring.writer;
  RingReader& reader = *ring.reader;
  struct Forgery {
    const char* what;
    std::vector<int64_t> shape;
    uint32_t dtype;
    uint64_t offset, nbytes;
  };
  const uint64_t two32 = uint64_t(1) << 32;
  const std::vector<Forgery> forgeries = {
      // The shape's product wraps to 0 bytes: a [2^32, 2^32] view.
      {"shape product", {int64_t(two32), int64_t(two32)}, 1, 4096, 0},
      // offset + nbytes wraps below the slot size.
      {"offset + nbytes", {16}, 1, ~uint64_t(0) - 7, 16},
      // A negative dimension.
      {"negative dim", {-1, -16}, 1, 4096, 16},
      // elements * dtype size wraps.
      {"dtype product", {int64_t(uint64_t(1) << 61)}, 3, 4096, 0},
  };
  for (const Forgery& f : forgeries) {
    uint64_t pos;
    ASSERT_TRUE(writer.TryClaim(&pos));
    shm::SlotHeader* h = writer.Slot(pos);
    memset(h, 0, sizeof(*h));
    h->num_tensors = 1;
    shm::TensorDesc& d = h->tensors[0];
    snprintf(d.name, sizeof(d.name), "forged");
    d.dtype = f.dtype;
    d.ndim = uint32_t(f.shape.size());
    for (size_t i = 0; i < f.shape.size(); ++i) d.shape[i] = f.shape[i];
    d.offset = f.offset;
    d.nbytes = f.nbytes;
    writer.Publish(pos);
    absl::StatusOr<uint64_t> got = reader.Acquire(5.0);
    ASSERT_TRUE(got.ok()) << got.status();
    absl::StatusOr<std::vector<SlotTensor>> t = reader.Tensors(*got);
    EXPECT_EQ(t.status().code(), absl::StatusCode::kDataLoss) << f.what;
    reader.Release(*got);
  }
}

TEST(HardeningTest, AForgedHeaderWhoseSlotsWrapIsRefused) {
  const std::string name = testutil::SegmentName("harden");
  const std::unique_ptr<RingWriter> writer =
      testutil::MakeRingWriter(name, testutil::RingGeometryOf(2, 4096));
  ASSERT_NE(writer, nullptr);
  // 2 * 2^63 wraps to 0: every slot would pass a sum that wraps.
  writer->header()->slot_bytes = uint64_t(1) << 63;
  auto reader = RingReader::Attach(name);
  ASSERT_FALSE(reader.ok());
  EXPECT_EQ(reader.status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(HardeningTest, GeometryProductsSaturateAndAreRefused) {
  RingGeometry g;
  g.slot_count = 1024;
  g.payload_bytes = (uint64_t(1) << 22) * ((uint64_t(1) << 32) - 24);
  EXPECT_FALSE(g.Check().ok());
  g.payload_bytes = ~uint64_t(0) - 100;
  EXPECT_EQ(g.SlotBytes(), ~uint64_t(0));
  EXPECT_EQ(g.SegmentBytes(), ~uint64_t(0));
  EXPECT_FALSE(g.Check().ok());
  g.slot_count = 4;
  g.payload_bytes = 1000;
  EXPECT_TRUE(g.Check().ok());
  EXPECT_EQ(g.SegmentBytes(), shm::kHeaderBytes + 4 * 8192u);
}

TEST(HardeningTest, AClosedRingTellsItsClientWhy) {
  testutil::TestRing ring = testutil::MakeRing(testutil::SegmentName("harden"),
                                               testutil::RingGeometryOf(2, 64));
  ASSERT_TRUE(ring.ok());
  ring.writer->Close("step 7 failed: cannot read shard 3");
  absl::StatusOr<uint64_t> got = ring.reader->Acquire(5.0);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), absl::StatusCode::kCancelled);
  EXPECT_NE(got.status().message().find("cannot read shard 3"),
            std::string::npos)
      << got.status();
}

}  // namespace
}  // namespace batchd

// Streams keyed by their owner and fair shares between owners, each shown
// with real processes of other users: a forked child that setuid()s to
// nobody (or to another uid) and execs test_rpc_caller, against a real
// daemon. Two uids' streams of one name are two streams; another uid's
// stream is joined or closed only by an administrator naming its owner; one
// uid cannot take every stream slot or ring byte from another; rings asked
// for and never mapped give their stream's slot back. Needs root to become
// other users (the tests skip otherwise).
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/address.h"
#include "batchd/loader.h"
#include "batchd/v1/batchd.grpc.pb.h"
#include "tests/synthetic_stream.h"
#include "tests/test_server.h"
#include "tests/testutil.h"

namespace batchd {
namespace {

using testing::TestServer;

constexpr uid_t kNobody = 65534;
constexpr uid_t kOther = 4242;  // a second plain user, with nobody's group
constexpr int kOk = 0, kNotFound = 5, kPermissionDenied = 7,
              kResourceExhausted = 8;

// A test_rpc_caller process run as `uid` (root: as this process), with
// nobody's group among its groups so that it may map rings the daemon
// shares with that group. Its stdout is read line by line, its stderr (the
// server's error message) once it has exited.
class Call : public testutil::Child {
 public:
  Call(const std::string& server, std::vector<std::string> args, uid_t uid)
      : Child({BATCHD_RPC_CALLER_PATH, server}, args, [uid] {
          if (uid != geteuid() &&
              !testutil::BecomeUser(uid, uid, {gid_t(kNobody)})) {
            _exit(90);
          }
        }) {}

  // The next line it prints, or "" at its end or after 60 s.
  std::string Line() { return Child::Line(60000); }
  // Its exit status (the call's gRPC code), or -1 after 60 s. Closes its
  // stdin first: an open that succeeded then returns (--hold: after one
  // more batch).
  int Wait() {
    CloseStdin();
    return Child::Wait();
  }
};

// The segment named by an "opened /seg" line.
std::string OpenedSegment(const std::string& line) {
  return line.rfind("opened ", 0) == 0 ? line.substr(7) : std::string();
}

bool StartShared(TestServer& server, std::vector<std::string> extra = {}) {
  return server.Start(testutil::SharedDaemonFlags(server.dir(), extra));
}

v1::GetStatusResponse Status(const TestServer& server) {
  auto stub = v1::Batchd::NewStub(
      grpc::CreateChannel(ParseAddress(server.address()).grpc_target,
                          grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  v1::GetStatusResponse st;
  const grpc::Status s = stub->GetStatus(&ctx, v1::GetStatusRequest(), &st);
  EXPECT_TRUE(s.ok()) << s.error_message();
  return st;
}

// The listed streams named `name`, as "owner:attached ranks".
std::vector<std::string> Streams(const v1::GetStatusResponse& st,
                                 const std::string& name) {
  std::vector<std::string> out;
  for (const v1::StreamStatus& s : st.streams()) {
    if (s.spec().name() != name) continue;
    int attached = 0;
    for (const v1::RankStatus& r : s.ranks()) attached += r.attached();
    out.push_back(std::to_string(s.owner_uid()) + ":" +
                  std::to_string(attached));
  }
  return out;
}

// The spec test_rpc_caller opens, for this process's own Loader.
LoaderOptions CallerSpec(const TestServer& s, const std::string& stream,
                         int rank) {
  LoaderOptions o = testutil::SyntheticStream(s.address(), stream, 8, 2, rank);
  o.connect_timeout_seconds = 20;
  return o;
}

// Polls `cond` every 50 ms for up to `seconds`.
bool Eventually(const std::function<bool()>& cond, double seconds) {
  return testutil::WaitFor(cond, seconds, 50);
}

#define REQUIRE_ROOT() \
  if (geteuid() != 0) GTEST_SKIP() << "needs root to become other users"

// ------------------------------------------------- break 9: one namespace

// A daemon every user may reach, run as root to become them.
class StreamOwnership : public ::testing::Test {
 protected:
  void SetUp() override {
    REQUIRE_ROOT();
    ASSERT_TRUE(StartShared(server_));
  }

  TestServer server_{"own"};
};

TEST_F(StreamOwnership, AnotherUidsStreamOfTheSameNameIsAnotherStream) {
  Call user(server_.address(), {"open", "train", "0", "--hold"}, kNobody);
  ASSERT_EQ(user.Line(), "attached");
  // Root's trainer asks for `train` too: a stream of its own, not a join.
  auto mine = Loader::Open(CallerSpec(server_, "train", 0));
  ASSERT_TRUE(mine.ok()) << mine.status();
  ASSERT_TRUE((*mine)->Next().ok());
  const std::string own = std::to_string(geteuid());
  EXPECT_EQ(Streams(Status(server_), "train"),
            (std::vector<std::string>{own + ":1", "65534:1"}));
  // Each ring is named for its owner: prefix.<daemon uid>.<owner>.train.0.
  const std::string base = server_.prefix() + "." + own + ".";
  int ours = 0, theirs = 0;
  for (const std::string& seg : server_.Segments()) {
    ours += seg.rfind(base + own + ".train.0.", 0) == 0;
    theirs += seg.rfind(base + "65534.train.0.", 0) == 0;
  }
  EXPECT_EQ(ours, 1);
  EXPECT_EQ(theirs, 1);

  // The user cannot close root's stream, not even by naming its owner.
  Call named(server_.address(), {"close", "train", "--owner", own}, kNobody);
  EXPECT_EQ(named.Wait(), kPermissionDenied);
  EXPECT_NE(named.Err().find("uid " + own), std::string::npos);
  // Closing `train` closes the user's own; root's trainer reads on.
  Call closes(server_.address(), {"close", "train"}, kNobody);
  EXPECT_EQ(closes.Wait(), kOk) << closes.Err();
  // Its ring is gone; root's stays.
  const std::vector<std::string> left = server_.Segments();
  ASSERT_EQ(left.size(), 1u);
  EXPECT_EQ(left[0].rfind(base + own + ".train.0.", 0), 0u) << left[0];
  for (int i = 0; i < 8; ++i) {
    absl::StatusOr<Batch> b = (*mine)->Next();
    ASSERT_TRUE(b.ok()) << b.status();
  }
  EXPECT_EQ(Streams(Status(server_), "train"),
            (std::vector<std::string>{own + ":1"}));
}

TEST_F(StreamOwnership, OnlyAnAdministratorJoinsAnotherUidsStreamByNamingIt) {
  Call user(server_.address(), {"open", "job", "0", "--hold"}, kNobody);
  ASSERT_EQ(user.Line(), "attached");
  // Another plain user may not join it, naming the owner or not.
  Call other(server_.address(), {"open", "job", "1", "--owner", "65534"},
             kOther);
  EXPECT_EQ(other.Wait(), kPermissionDenied);
  EXPECT_NE(other.Err().find("uid 65534"), std::string::npos);
  // Root without owner_uid opens a stream of its own ...
  auto own_job = Loader::Open(CallerSpec(server_, "job", 1));
  ASSERT_TRUE(own_job.ok()) << own_job.status();
  const std::string own = std::to_string(geteuid());
  EXPECT_EQ(Streams(Status(server_), "job"),
            (std::vector<std::string>{own + ":1", "65534:1"}));
  // ... and with it joins the user's: rank 1 of the user's `job`.
  LoaderOptions join = CallerSpec(server_, "job", 1);
  join.owner_uid = kNobody;
  auto joined = Loader::Open(join);
  ASSERT_TRUE(joined.ok()) << joined.status();
  absl::StatusOr<Batch> b = (*joined)->Next();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->position() % 8, 4u) << "rank 1's half of the global batch";
  EXPECT_EQ(Streams(Status(server_), "job"),
            (std::vector<std::string>{own + ":1", "65534:2"}));
  // A stream the named owner does not have is not created for it.
  LoaderOptions missing = CallerSpec(server_, "nosuch", 0);
  missing.owner_uid = kNobody;
  EXPECT_EQ(Loader::Open(missing).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(user.Wait(), kOk);
}

// ------------------------------------------------- break 5: fair shares

TEST(Quotas, OneUidFillsItsStreamQuotaAndAnotherStillOpens) {
  REQUIRE_ROOT();
  TestServer server("squota");
  // Rings nobody maps are kept for the whole test.
  ASSERT_TRUE(StartShared(server, {"--max-streams-per-uid", "2",
                                   "--attach-timeout-seconds", "3600"}));
  Call a(server.address(), {"open", "a", "0"}, kNobody);
  ASSERT_FALSE(OpenedSegment(a.Line()).empty());
  Call b(server.address(), {"open", "b", "0"}, kNobody);
  ASSERT_FALSE(OpenedSegment(b.Line()).empty());
  Call c(server.address(), {"open", "c", "0"}, kNobody);
  EXPECT_EQ(c.Wait(), kResourceExhausted);
  const std::string why = c.Err();
  EXPECT_NE(why.find("uid 65534 owns 2 streams"), std::string::npos) << why;
  EXPECT_NE(why.find("--max-streams-per-uid 2"), std::string::npos) << why;
  // Another user's share is its own.
  Call other(server.address(), {"open", "a", "0"}, kOther);
  EXPECT_FALSE(OpenedSegment(other.Line()).empty());
  // Administrators are exempt (the global --max-streams still binds them).
  std::vector<std::unique_ptr<Call>> admin;
  for (const char* name : {"x", "y", "z"}) {
    admin.push_back(std::make_unique<Call>(
        server.address(), std::vector<std::string>{"open", name, "0"},
        geteuid()));
    EXPECT_FALSE(OpenedSegment(admin.back()->Line()).empty()) << name;
  }
  const v1::GetStatusResponse st = Status(server);
  EXPECT_EQ(st.max_streams_per_uid(), 2u);
  std::map<uint32_t, v1::UidUsage> uses;
  for (const v1::UidUsage& u : st.uids()) uses[u.uid()] = u;
  EXPECT_EQ(uses[kNobody].streams(), 2u);
  EXPECT_FALSE(uses[kNobody].exempt());
  EXPECT_EQ(uses[kOther].streams(), 1u);
  EXPECT_EQ(uses[geteuid()].streams(), 3u);
  EXPECT_TRUE(uses[geteuid()].exempt());
  EXPECT_GT(uses[kNobody].ring_bytes(), 0u);
}

// The default quota follows --max-streams: with 8, one uid's streams that
// never attach take two slots, and root's next stream opens.
TEST(Quotas, TheDefaultStreamQuotaFollowsMaxStreams) {
  REQUIRE_ROOT();
  TestServer server("autoquota");
  ASSERT_TRUE(StartShared(
      server, {"--max-streams", "8", "--attach-timeout-seconds", "3600"}));
  std::vector<std::unique_ptr<Call>> ghosts;
  for (int i = 0; i < 2; ++i) {
    ghosts.push_back(std::make_unique<Call>(
        server.address(),
        std::vector<std::string>{"open", "g" + std::to_string(i), "0"},
        kNobody));
    ASSERT_FALSE(OpenedSegment(ghosts.back()->Line()).empty()) << i;
  }
  for (int i = 2; i < 8; ++i) {
    Call refused(server.address(), {"open", "g" + std::to_string(i), "0"},
                 kNobody);
    EXPECT_EQ(refused.Wait(), kResourceExhausted) << i;
    EXPECT_NE(refused.Err().find("--max-streams-per-uid 2"), std::string::npos)
        << refused.Err();
  }
  Call root(server.address(), {"open", "mine", "0"}, geteuid());
  EXPECT_FALSE(OpenedSegment(root.Line()).empty());
  EXPECT_EQ(Status(server).max_streams_per_uid(), 2u);
}

TEST(Quotas, OneUidFillsItsRingBytesAndAnotherStillOpens) {
  REQUIRE_ROOT();
  // One ring's size, from a daemon without the quota.
  off_t ring = 0;
  {
    TestServer probe("rprobe");
    ASSERT_TRUE(StartShared(probe));
    Call p(probe.address(), {"open", "p", "0"}, kNobody);
    const std::string seg = OpenedSegment(p.Line());
    ASSERT_FALSE(seg.empty());
    struct stat st;
    ASSERT_EQ(stat(("/dev/shm" + seg).c_str(), &st), 0);
    ring = st.st_size;
  }
  // Room for one ring and a half per uid.
  TestServer server("rquota");
  ASSERT_TRUE(StartShared(
      server, {"--max-ring-bytes-per-uid", std::to_string(ring * 3 / 2),
               "--attach-timeout-seconds", "3600"}));
  Call first(server.address(), {"open", "r", "0"}, kNobody);
  ASSERT_FALSE(OpenedSegment(first.Line()).empty());
  Call second(server.address(), {"open", "r", "1"}, kNobody);
  EXPECT_EQ(second.Wait(), kResourceExhausted);
  const std::string why = second.Err();
  EXPECT_NE(why.find("uid 65534 holds " + std::to_string(ring) + " ring bytes"),
            std::string::npos)
      << why;
  EXPECT_NE(
      why.find("--max-ring-bytes-per-uid " + std::to_string(ring * 3 / 2)),
      std::string::npos)
      << why;
  Call other(server.address(), {"open", "r", "0"}, kOther);
  EXPECT_FALSE(OpenedSegment(other.Line()).empty());
}

TEST(Quotas, GhostStreamsGiveTheirSlotBackWithTheirRing) {
  REQUIRE_ROOT();
  constexpr double kAttachTimeout = 3;
  TestServer server("ghost");
  ASSERT_TRUE(
      StartShared(server, {"--max-streams", "3", "--attach-timeout-seconds",
                           std::to_string(int(kAttachTimeout)),
                           // One uid's three streams fill --max-streams
                           // (its quota, auto, would be one of them).
                           "--max-streams-per-uid", "3"}));
  // A stream whose rank attached and died is kept, for a restarted rank.
  Call died(server.address(), {"open", "kept", "0", "--hold"}, kNobody);
  ASSERT_EQ(died.Line(), "attached");
  died.Kill9();
  const auto t0 = std::chrono::steady_clock::now();
  Call g1(server.address(), {"open", "g1", "0"}, kNobody);
  ASSERT_FALSE(OpenedSegment(g1.Line()).empty());
  Call g2(server.address(), {"open", "g2", "0"}, kNobody);
  ASSERT_FALSE(OpenedSegment(g2.Line()).empty());
  Call refused(server.address(), {"open", "mine", "0"}, kOther);
  const int code = refused.Wait();
  // The ghosts' rings cannot have timed out before t0 + the timeout.
  if (std::chrono::steady_clock::now() - t0 <
      std::chrono::milliseconds(int64_t(kAttachTimeout * 1000))) {
    EXPECT_EQ(code, kResourceExhausted) << refused.Err();
  }
  // Past the attach timeout the ghosts are gone, rings and slots.
  EXPECT_TRUE(Eventually(
      [&] {
        const v1::GetStatusResponse st = Status(server);
        return Streams(st, "g1").empty() && Streams(st, "g2").empty();
      },
      60))
      << "ghosts kept their slots past --attach-timeout-seconds";
  EXPECT_EQ(Streams(Status(server), "kept"),
            (std::vector<std::string>{"65534:0"}));
  Call opens(server.address(), {"open", "mine", "0"}, kOther);
  EXPECT_FALSE(OpenedSegment(opens.Line()).empty());
}

}  // namespace
}  // namespace batchd

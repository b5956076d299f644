// The client against what a shared node does to it, with real processes: a
// daemon killed -9 or stopped and restarted (a pause, not an error), a
// daemon that does not come back (named after the window), batches kept
// out of order (never a stall; every slot kept is a named error), a forked
// child (leaves its parent's stream alone and exits), a dead client holding
// slots out of order (reclaimed), and a daemon run by another user (refused).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <pwd.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "batchd/loader.h"
#include "ring/ring.h"
#include "tests/synthetic_stream.h"
#include "tests/test_server.h"
#include "tests/testutil.h"
#include "workloads/sampler.h"

namespace batchd {
namespace {

using testing::TestServer;

constexpr uint64_t kExamples = 1000;

LoaderOptions Options(const TestServer& server, const std::string& stream,
                      int w, int rank, uint32_t slots = 2) {
  LoaderOptions o = testutil::SyntheticStream(server.address(), stream, 8, w,
                                              rank, kExamples, 40);
  o.seed = 3;
  o.slots = slots;
  o.timeout_seconds = 60;
  return o;
}

// The ids of rank `rank`'s slice of `step`, from the sampler alone.
std::vector<uint64_t> ExpectedIds(uint64_t step, int w, int rank) {
  absl::StatusOr<Sampler> s = Sampler::Create(kExamples, 8, w, 3, true);
  const RankSlice slice = s->Slice(step, rank);
  std::vector<uint64_t> ids;
  for (uint64_t i = 0; i < slice.count; ++i) {
    ids.push_back(s->ExampleId(slice.epoch, slice.first_position + i));
  }
  return ids;
}

std::vector<uint64_t> Ids(const Batch& b) {
  const Tensor* t = b.tensor("ids");
  const auto* p = static_cast<const uint64_t*>(t->data);
  return std::vector<uint64_t>(p, p + t->shape[0]);
}

// Next() must give step `step` of rank `rank`, with the sampler's ids.
void ExpectStep(Loader& loader, uint64_t step, int w, int rank) {
  absl::StatusOr<Batch> b = loader.Next();
  ASSERT_TRUE(b.ok()) << "step " << step << " rank " << rank << ": "
                      << b.status();
  EXPECT_EQ(b->step(), step);
  EXPECT_EQ(Ids(*b), ExpectedIds(step, w, rank)) << "step " << step;
}

using testutil::WaitFor;

// The child's exit status, or -1 if it did not exit within `seconds`
// (then it is killed).
int WaitChild(pid_t pid, double seconds) {
  int status = 0;
  if (!WaitFor([&] { return waitpid(pid, &status, WNOHANG) == pid; },
               seconds)) {
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    return -1;
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

TEST(ClientResilienceTest, ADaemonKilledAndRestartedIsAPauseNotAnError) {
  TestServer server("restart");
  ASSERT_TRUE(server.Start());
  auto r0 = Loader::Open(Options(server, "job", 2, 0));
  auto r1 = Loader::Open(Options(server, "job", 2, 1));
  ASSERT_TRUE(r0.ok() && r1.ok()) << r0.status() << r1.status();
  // The ranks are two steps apart when the daemon dies.
  for (uint64_t s = 0; s < 5; ++s) ExpectStep(**r0, s, 2, 0);
  for (uint64_t s = 0; s < 3; ++s) ExpectStep(**r1, s, 2, 1);
  {
    // A batch kept across the restart stays readable.
    absl::StatusOr<Batch> kept = (*r0)->Next();
    ASSERT_TRUE(kept.ok()) << kept.status();
    const std::vector<uint64_t> ids = Ids(*kept);
    server.Kill9();
    ASSERT_TRUE(server.Start());  // as systemd would
    EXPECT_EQ(Ids(*kept), ids);
  }
  // Each rank resumes at its own next step: no gap, no repeat.
  for (uint64_t s = 6; s < 12; ++s) ExpectStep(**r0, s, 2, 0);
  for (uint64_t s = 3; s < 12; ++s) ExpectStep(**r1, s, 2, 1);
  EXPECT_EQ((*r0)->reconnects(), 1u);
  EXPECT_EQ((*r1)->reconnects(), 1u);
  EXPECT_NE((*r0)->info().server_pid, 0u);
}

// The one rank of stream "job" on `server`, steps [0, steps) read and
// checked; null (and a test failure) when it cannot be opened.
std::unique_ptr<Loader> OpenAndRead(const TestServer& server, uint64_t steps) {
  absl::StatusOr<std::unique_ptr<Loader>> r0 =
      Loader::Open(Options(server, "job", 1, 0));
  EXPECT_TRUE(r0.ok()) << r0.status();
  if (!r0.ok()) return nullptr;
  for (uint64_t s = 0; s < steps; ++s) ExpectStep(**r0, s, 1, 0);
  return *std::move(r0);
}

TEST(ClientResilienceTest, AWaitingClientRidesOutARestart) {
  TestServer server("waiting");
  ASSERT_TRUE(server.Start());
  const std::unique_ptr<Loader> r0 = OpenAndRead(server, 3);
  ASSERT_NE(r0, nullptr);
  // Kept, so that no batch is published ahead: the consumer below waits.
  absl::StatusOr<Batch> a = r0->Next();
  absl::StatusOr<Batch> b = r0->Next();
  ASSERT_TRUE(a.ok() && b.ok());
  server.Kill9();
  a->Release();
  b->Release();
  std::vector<uint64_t> steps;
  std::thread consumer([&] {
    for (int i = 0; i < 4; ++i) {
      absl::StatusOr<Batch> n = r0->Next();
      if (!n.ok()) {
        ADD_FAILURE() << n.status();
        return;
      }
      EXPECT_EQ(Ids(*n), ExpectedIds(n->step(), 1, 0));
      steps.push_back(n->step());
    }
  });
  // The consumer is reconnecting (or about to) while no daemon exists.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  ASSERT_TRUE(server.Start());
  consumer.join();
  EXPECT_EQ(steps, (std::vector<uint64_t>{5, 6, 7, 8}));
}

TEST(ClientResilienceTest, ADaemonStoppedWithSigtermAndRestartedIsAPause) {
  TestServer server("sigterm");
  ASSERT_TRUE(server.Start());
  const std::unique_ptr<Loader> r0 = OpenAndRead(server, 4);
  ASSERT_NE(r0, nullptr);
  EXPECT_EQ(server.Stop(), 0);  // an upgrade: systemctl restart
  ASSERT_TRUE(server.Start());
  for (uint64_t s = 4; s < 9; ++s) ExpectStep(*r0, s, 1, 0);
  EXPECT_EQ(r0->reconnects(), 1u);
}

TEST(ClientResilienceTest, ADaemonThatDoesNotComeBackIsNamedAfterTheWindow) {
  TestServer server("gone");
  ASSERT_TRUE(server.Start());
  LoaderOptions o = Options(server, "job", 1, 0);
  o.reconnect_seconds = 1.5;
  auto r0 = Loader::Open(o);
  ASSERT_TRUE(r0.ok()) << r0.status();
  ExpectStep(**r0, 0, 1, 0);
  server.Kill9();
  const auto t0 = std::chrono::steady_clock::now();
  absl::Status s;
  for (int i = 0; i < 3 && s.ok(); ++i) s = (*r0)->Next().status();
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
          .count();
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
  EXPECT_NE(s.message().find("did not come back"), std::string::npos) << s;
  EXPECT_NE(s.message().find(server.address()), std::string::npos) << s;
  EXPECT_LT(took, 30.0);
}

TEST(ClientResilienceTest, KeptBatchesNeverStallTheStream) {
  TestServer server("kept");
  ASSERT_TRUE(server.Start());
  auto r0 = Loader::Open(Options(server, "job", 1, 0, /*slots=*/4));
  ASSERT_TRUE(r0.ok()) << r0.status();
  std::vector<Batch> kept;
  for (uint64_t s = 0; s < 3; ++s) {
    absl::StatusOr<Batch> b = (*r0)->Next();
    ASSERT_TRUE(b.ok()) << b.status();
    kept.push_back(*std::move(b));
  }
  // Steps 3.. flow through the one slot left while 0, 1, 2 are kept.
  for (uint64_t s = 3; s < 40; ++s) ExpectStep(**r0, s, 1, 0);
  for (uint64_t s = 0; s < 3; ++s) {
    EXPECT_EQ(Ids(kept[s]), ExpectedIds(s, 1, 0)) << "kept step " << s;
  }
  // Given back in any order, each slot is taken again.
  kept.erase(kept.begin() + 1);
  for (uint64_t s = 40; s < 45; ++s) ExpectStep(**r0, s, 1, 0);
}

TEST(ClientResilienceTest, EverySlotKeptFailsNamingTheKeptSteps) {
  TestServer server("allheld");
  ASSERT_TRUE(server.Start());
  LoaderOptions o = Options(server, "job", 1, 0, /*slots=*/3);
  o.timeout_seconds = 2;
  auto r0 = Loader::Open(o);
  ASSERT_TRUE(r0.ok()) << r0.status();
  std::vector<Batch> kept;
  for (int i = 0; i < 3; ++i) kept.push_back(*(*r0)->Next());
  absl::StatusOr<Batch> b = (*r0)->Next();
  ASSERT_TRUE(absl::IsDeadlineExceeded(b.status())) << b.status();
  const std::string m(b.status().message());
  EXPECT_NE(m.find("steps 0, 1 and 2"), std::string::npos) << m;
  EXPECT_NE(m.find("slots=6"), std::string::npos) << m;
  kept.pop_back();
  ExpectStep(**r0, 3, 1, 0);
}

TEST(ClientResilienceTest, AForkedChildLeavesItsParentsStreamAlone) {
  TestServer server("fork");
  ASSERT_TRUE(server.Start());
  auto r0 = Loader::Open(Options(server, "job", 1, 0, /*slots=*/3));
  ASSERT_TRUE(r0.ok()) << r0.status();
  ExpectStep(**r0, 0, 1, 0);
  absl::StatusOr<Batch> held = (*r0)->Next();  // a slot held across fork
  ASSERT_TRUE(held.ok());
  // The parent's own mapping of its ring's header.
  const auto* header =
      static_cast<const shm::RingHeader*>((*r0)->mapped_address());
  const uint64_t released_before = header->released.load();
  for (int use = 0; use < 2; ++use) {
    const pid_t child = fork();
    if (child == 0) {
      int code = 0;
      if (use == 1) {
        // The inherited Loader refuses, naming why.
        absl::StatusOr<Batch> b = (*r0)->Next();
        if (!absl::IsFailedPrecondition(b.status())) code = 3;
      }
      // Drop the inherited batch and Loader as a normal exit would.
      held = absl::UnknownError("dropped");
      r0->reset();
      exit(code);
    }
    EXPECT_EQ(WaitChild(child, 30), 0) << "the child hung or failed";
  }
  // The parent's ring was neither detached nor given a slot back.
  EXPECT_EQ(header->client_detached.load(), 0u);
  EXPECT_EQ(header->released.load(), released_before);
  EXPECT_EQ(header->client_pid.load(), uint32_t(getpid()));
  held = absl::UnknownError("dropped");
  for (uint64_t s = 2; s < 10; ++s) ExpectStep(**r0, s, 1, 0);
}

TEST(ClientResilienceTest, ADeadClientHoldingSlotsOutOfOrderIsReclaimed) {
  TestServer server("deadheld");
  ASSERT_TRUE(server.Start());
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t child = fork();
  if (child == 0) {
    auto r0 = Loader::Open(Options(server, "job", 1, 0, /*slots=*/4));
    if (!r0.ok()) _exit(2);
    std::vector<Batch> kept;
    for (int i = 0; i < 3; ++i) kept.push_back(*(*r0)->Next());
    kept[1].Release();  // out of order: 0 and 2 still held
    char c = 'r';
    if (write(ready[1], &c, 1) != 1) _exit(3);
    pause();
    _exit(0);
  }
  close(ready[1]);
  char c;
  ASSERT_EQ(read(ready[0], &c, 1), 1);
  close(ready[0]);
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  // The server frees the dead client's ring; the rank re-attaches at the
  // step it asks.
  LoaderOptions o = Options(server, "job", 1, 0, 4);
  o.start_step = 3;
  absl::StatusOr<std::unique_ptr<Loader>> again;
  ASSERT_TRUE(WaitFor(
      [&] {
        again = Loader::Open(o);
        return again.ok();
      },
      60))
      << again.status();
  for (uint64_t s = 3; s < 12; ++s) ExpectStep(**again, s, 1, 0);
}

TEST(ClientResilienceTest, AStateResumesTheJobAtAnotherWorldSize) {
  TestServer server("state");
  ASSERT_TRUE(server.Start());
  auto r0 = Loader::Open(Options(server, "job", 2, 0));
  auto r1 = Loader::Open(Options(server, "job", 2, 1));
  ASSERT_TRUE(r0.ok() && r1.ok());
  for (uint64_t s = 0; s < 7; ++s) {
    ExpectStep(**r0, s, 2, 0);
    ExpectStep(**r1, s, 2, 1);
  }
  // Rank 1's checkpoint, through its JSON form.
  absl::StatusOr<LoaderState> state =
      LoaderState::FromJson((*r1)->State().ToJson());
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_EQ(state->next_step, 7u);
  EXPECT_EQ((*r0)->State().ToJson(), (*r1)->State().ToJson());
  LoaderOptions o = Options(server, "resumed", 1, 0);
  o.state = *state;
  auto one = Loader::Open(o);
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ((*one)->info().start_step, 7u);
  for (uint64_t s = 7; s < 12; ++s) ExpectStep(**one, s, 1, 0);
  // A spec the state was not saved for is refused, naming the field.
  o = Options(server, "other", 1, 0);
  o.seed = 4;
  o.state = *state;
  auto other = Loader::Open(o);
  EXPECT_TRUE(absl::IsInvalidArgument(other.status())) << other.status();
  EXPECT_NE(other.status().message().find("seed"), std::string::npos);
}

// Whether `batchd --help` names `flag`.
bool DaemonHas(const std::string& flag) {
  const std::string cmd = testing::DaemonPath() + " --help";
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return false;
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  pclose(p);
  return out.find(flag) != std::string::npos;
}

// A daemon of `nobody` listening in a sticky, world-writable directory: the
// socket name a user can take before the real daemon does.
class ImpostorDaemon {
 public:
  ImpostorDaemon() {
    dir_ = testing::MakeTempDir();
    chmod(dir_.c_str(), 01777);
    socket_ = dir_ + "/batchd.sock";
    const passwd* pw = getpwnam("nobody");
    uid_ = pw != nullptr ? pw->pw_uid : 65534;
    const gid_t gid = pw != nullptr ? pw->pw_gid : 65534;
    // The impostor runs its own daemon, so it allows what it likes.
    std::vector<std::string> args = {
        testing::DaemonPath(), "--listen", "unix://" + socket_,
        "--data-root", "/tmp", "--shm-prefix",
        "bdimp" + std::to_string(getpid()), "--cache-dir", "", "--threads",
        "1"};
    if (DaemonHas("--allow-shared-socket-dir")) {
      args.push_back("--allow-shared-socket-dir");
    }
    pid_ = fork();
    if (pid_ == 0) {
      if (setgid(gid) != 0 || setuid(uid_) != 0) _exit(126);
      std::vector<char*> argv;
      for (std::string& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
  }
  ~ImpostorDaemon() {
    kill(pid_, SIGTERM);
    waitpid(pid_, nullptr, 0);
  }
  bool Ready() {
    return WaitFor([&] { return testing::UnixSocketAccepts(socket_); }, 30);
  }
  std::string address() const { return "unix://" + socket_; }
  uid_t uid() const { return uid_; }

 private:
  std::string dir_, socket_;
  uid_t uid_;
  pid_t pid_;
};

TEST(ClientResilienceTest, ADaemonOfAnotherUserInASharedDirectoryIsRefused) {
  ImpostorDaemon impostor;
  ASSERT_TRUE(impostor.Ready());
  LoaderOptions o =
      testutil::SyntheticStream(impostor.address(), "train", 8, 1, 0);
  o.connect_timeout_seconds = 10;
  auto loader = Loader::Open(o);
  ASSERT_FALSE(loader.ok());
  EXPECT_TRUE(absl::IsPermissionDenied(loader.status())) << loader.status();
  EXPECT_NE(loader.status().message().find(
                "runs as uid " + std::to_string(impostor.uid())),
            std::string::npos)
      << loader.status();
  // Named as the daemon's uid, it is trusted, and so is its ring.
  o.server_uid = impostor.uid();
  loader = Loader::Open(o);
  EXPECT_TRUE(loader.ok()) << loader.status();
}

TEST(ClientResilienceTest, ARingOfAnotherOwnerIsRefused) {
  const std::string name = testutil::SegmentName("owner");
  const std::unique_ptr<RingWriter> w =
      testutil::MakeRingWriter(name, testutil::RingGeometryOf(2, 64));
  ASSERT_NE(w, nullptr);
  RingReader::Options ro;
  ro.owner_uid = geteuid() + 1;
  auto r = RingReader::Attach(name, ro);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(absl::IsPermissionDenied(r.status())) << r.status();
  ro.owner_uid = geteuid();
  EXPECT_TRUE(RingReader::Attach(name, ro).ok());
}

// Sets the POSIX access ACL of /dev/shm`name`: user::rw, user:`uid`:rw
// (none when uid < 0), group::`group_perm`, mask::rw, other::---.
bool SetAcl(const std::string& name, int64_t uid, uint16_t group_perm) {
  std::vector<uint8_t> acl = {2, 0, 0, 0};
  auto entry = [&](uint16_t tag, uint16_t perm, uint32_t id) {
    for (int i = 0; i < 2; ++i) acl.push_back(uint8_t(tag >> (8 * i)));
    for (int i = 0; i < 2; ++i) acl.push_back(uint8_t(perm >> (8 * i)));
    for (int i = 0; i < 4; ++i) acl.push_back(uint8_t(id >> (8 * i)));
  };
  entry(0x01, 6, 0xFFFFFFFFu);
  if (uid >= 0) entry(0x02, 6, uint32_t(uid));
  entry(0x04, group_perm, 0xFFFFFFFFu);
  entry(0x10, 6, 0xFFFFFFFFu);
  entry(0x20, 0, 0xFFFFFFFFu);
  const std::string path = "/dev/shm" + name;
  return setxattr(path.c_str(), "system.posix_acl_access", acl.data(),
                  acl.size(), 0) == 0;
}

TEST(ClientResilienceTest, ARingOthersMayWriteIsRefusedNamingWho) {
  const std::string name = testutil::SegmentName("writers");
  const std::unique_ptr<RingWriter> w =
      testutil::MakeRingWriter(name, testutil::RingGeometryOf(2, 64));
  ASSERT_NE(w, nullptr);
  const std::string path = "/dev/shm" + name;
  RingReader::Options ro;
  ro.owner_uid = geteuid();
  // Group-writable by mode (no ACL): refused, naming the group and mode.
  ASSERT_EQ(chmod(path.c_str(), 0660), 0);
  auto r = RingReader::Attach(name, ro);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(absl::IsPermissionDenied(r.status())) << r.status();
  EXPECT_NE(r.status().message().find("mode 0660"), std::string::npos)
      << r.status();
  EXPECT_NE(r.status().message().find("its group"), std::string::npos)
      << r.status();
  // Another uid's ACL entry: refused, naming that uid.
  const uint32_t other = geteuid() + 4242;
  ASSERT_TRUE(SetAcl(name, other, 0)) << strerror(errno);
  r = RingReader::Attach(name, ro);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("uid " + std::to_string(other)),
            std::string::npos)
      << r.status();
  // Its group writes through the ACL: refused.
  ASSERT_TRUE(SetAcl(name, -1, 6));
  EXPECT_FALSE(RingReader::Attach(name, ro).ok());
  // This process's own uid by ACL (what the daemon gives a client): taken.
  ASSERT_TRUE(SetAcl(name, geteuid(), 0));
  EXPECT_TRUE(RingReader::Attach(name, ro).ok());
  // An owner outside the trusted set: refused, naming both.
  RingReader::Options trusted;
  trusted.owner_uids = {geteuid() + 1, geteuid() + 2};
  r = RingReader::Attach(name, trusted);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find(
                absl::StrCat("belongs to uid ", geteuid(), ", not to uid ",
                             geteuid() + 1, " or ", geteuid() + 2)),
            std::string::npos)
      << r.status();
}

TEST(ClientResilienceTest, ARingIsGivenToItsClientUidAloneByAcl) {
  RingGeometry g;
  g.slot_count = 2;
  g.payload_bytes = 64;
  const std::string name = "/bdacl" + std::to_string(getpid());
  const uint32_t client = geteuid() + 4243;
  auto w = RingWriter::Create(name, g, client);
  ASSERT_TRUE(w.ok()) << w.status();
  const std::string path = "/dev/shm" + name;
  uint8_t acl[256];
  const ssize_t n =
      getxattr(path.c_str(), "system.posix_acl_access", acl, sizeof(acl));
  ASSERT_EQ(n, 4 + 5 * 8) << strerror(errno);
  // user::rw, user:<client>:rw, group::---, mask::rw, other::---.
  const uint16_t want[5][2] = {
      {0x01, 6}, {0x02, 6}, {0x04, 0}, {0x10, 6}, {0x20, 0}};
  for (int i = 0; i < 5; ++i) {
    const uint8_t* e = acl + 4 + 8 * i;
    EXPECT_EQ(e[0] | e[1] << 8, want[i][0]) << i;
    EXPECT_EQ(e[2] | e[3] << 8, want[i][1]) << i;
  }
  EXPECT_EQ(uint32_t(acl[16] | acl[17] << 8 | acl[18] << 16 |
                     uint32_t(acl[19]) << 24),
            client);
  // Without a client uid other than ours: 0600, no ACL.
  const std::string plain = "/bdplain" + std::to_string(getpid());
  auto p = RingWriter::Create(plain, g, geteuid());
  ASSERT_TRUE(p.ok()) << p.status();
  struct stat st;
  ASSERT_EQ(stat(("/dev/shm" + plain).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  EXPECT_LT(getxattr(("/dev/shm" + plain).c_str(), "system.posix_acl_access",
                     acl, sizeof(acl)),
            0);
}

}  // namespace
}  // namespace batchd

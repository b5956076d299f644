// Attacks on the daemon through world-writable places and its addresses,
// each made by a real process: another user (a child that setuid()s to
// nobody) planting FIFOs, links and forged rings in /dev/shm or links and
// directories next to the socket, and listen addresses that a string test
// would take for loopback. Needs root for the setuid and chown cases (they
// skip otherwise).
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <pwd.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "base/address.h"
#include "batchd/loader.h"
#include "ring/ring.h"
#include "ring/shm_layout.h"
#include "server/config.h"
#include "tests/synthetic_stream.h"
#include "tests/test_images.h"
#include "tests/test_server.h"
#include "tests/testutil.h"

namespace batchd {
namespace {

using testing::TestServer;

uid_t NobodyUid() {
  passwd* pw = getpwnam("nobody");
  return pw == nullptr ? uid_t(65534) : pw->pw_uid;
}

// Runs `fn` in a forked child as user nobody; returns its exit status
// (fn's return value), or -1 when the child could not become nobody.
int AsNobody(const std::function<int()>& fn) {
  const int code = testutil::ExitCodeInChild(
      [&] { return testutil::BecomeUser(NobodyUid(), 65534) ? fn() : 99; });
  return code == 99 || code >= 128 ? -1 : code;
}

// Runs the daemon with `args`; returns its wait status and its output. A
// daemon that starts instead of refusing is killed after `seconds`.
int RunDaemon(const std::vector<std::string>& args, std::string* out,
              int seconds = 10,
              const std::function<bool()>& in_child = nullptr) {
  int fds[2];
  if (pipe(fds) != 0) return -1;
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], 1);
    dup2(fds[1], 2);
    close(fds[0]);
    if (in_child && !in_child()) _exit(77);
    std::vector<std::string> a = args;
    a.insert(a.begin(), testing::DaemonPath());
    std::vector<char*> argv;
    for (std::string& s : a) argv.push_back(s.data());
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  close(fds[1]);
  int status = -1;
  for (int i = 0; i < seconds * 100; ++i) {
    if (waitpid(pid, &status, WNOHANG) == pid) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    if (i == seconds * 100 - 1) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
    }
  }
  char buf[4096];
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof(buf))) > 0) out->append(buf, size_t(n));
  close(fds[0]);
  return status;
}

bool Exited(int status, int code) {
  return WIFEXITED(status) && WEXITSTATUS(status) == code;
}

// A fresh directory of mode `mode`, for a daemon's socket.
std::string DirectoryOfMode(mode_t mode) {
  const std::string dir = testing::MakeTempDir();
  EXPECT_EQ(chmod(dir.c_str(), mode), 0) << dir << ": " << strerror(errno);
  return dir;
}

// Runs `server` (with `extra` flags), which must refuse to start (exit 1);
// what it said.
std::string Refusal(TestServer& server, std::vector<std::string> extra = {}) {
  std::string err;
  EXPECT_TRUE(Exited(server.RunExpectingExit(&err, extra), 1)) << err;
  return err;
}

// ------------------------------------------------------------ break 3

TEST(ShmEntries, FifoNamedLikeASegmentDoesNotHangTheStaleScan) {
  const std::string prefix = "bdfifo" + std::to_string(getpid()) + "." +
                             std::to_string(getuid()) + ".";
  const std::string fifo = "/dev/shm/" + prefix + "job.0";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0666), 0) << strerror(errno);
  const int code = testutil::ExitCodeInChild(
      [&] {
        std::vector<std::string> skipped;
        const std::vector<std::string> removed =
            RemoveStaleSegments(prefix, &skipped);
        const bool reported =
            skipped.size() == 1 &&
            skipped[0].find("not a regular file") != std::string::npos;
        return removed.empty() && reported ? 0 : 3;
      },
      /*alarm_seconds=*/10);  // the scan used to block in open() for ever
  unlink(fifo.c_str());
  EXPECT_EQ(code, 0) << (code >= 128 ? "the scan hung (killed by SIGALRM)"
                                     : "the FIFO was not reported as skipped");
}

TEST(ShmEntries, DaemonStartsDespiteAFifoAndALinkUnderItsPrefix) {
  TestServer server("fifo");
  const std::string base =
      "/dev/shm/" + server.prefix() + "." + std::to_string(getuid()) + ".";
  ASSERT_EQ(mkfifo((base + "job.0").c_str(), 0666), 0);
  ASSERT_EQ(symlink("/dev/zero", (base + "job.1").c_str()), 0);
  const bool started = server.Start();
  unlink((base + "job.0").c_str());
  unlink((base + "job.1").c_str());
  EXPECT_TRUE(started) << "startup hung on a FIFO in /dev/shm";
}

// ------------------------------------------------------------ break 4

TEST(ShmEntries, AnotherUsersFilesCannotDenyOrPoisonAStream) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to act as nobody";
  TestServer server("squat");
  ASSERT_TRUE(server.Start());
  // The names a stream's rings had before they became unguessable.
  const std::string base =
      "/dev/shm/" + server.prefix() + "." + std::to_string(getuid()) + ".job.";
  const std::string victim = server.dir() + "/victim";
  { std::ofstream(victim) << "precious"; }
  const int planted = AsNobody([&] {
    // Rank 0: a forged ring whose server "is" pid 1 (alive for ever).
    const int fd = open((base + "0").c_str(), O_RDWR | O_CREAT | O_EXCL, 0666);
    if (fd < 0) return 1;
    shm::RingHeader h;
    memset(static_cast<void*>(&h), 0, sizeof(h));
    h.magic = shm::kMagic;
    h.server_pid = 1;
    if (write(fd, &h, sizeof(h)) != ssize_t(sizeof(h))) return 2;
    close(fd);
    // Rank 1: a link to a file of root's.
    return symlink(victim.c_str(), (base + "1").c_str()) == 0 ? 0 : 3;
  });
  ASSERT_EQ(planted, 0);
  std::vector<std::unique_ptr<Loader>> loaders;
  for (uint32_t rank = 0; rank < 2; ++rank) {
    absl::StatusOr<std::unique_ptr<Loader>> l = Loader::Open(
        testutil::SyntheticStream(server.address(), "job", 8, 2, rank, 64));
    ASSERT_TRUE(l.ok()) << "rank " << rank << ": " << l.status();
    const std::string seg = (*l)->info().segment;
    EXPECT_NE("/dev/shm" + seg, base + std::to_string(rank));
    struct stat st;
    ASSERT_EQ(lstat(("/dev/shm" + seg).c_str(), &st), 0);
    EXPECT_TRUE(S_ISREG(st.st_mode));
    EXPECT_EQ(st.st_uid, geteuid());
    absl::StatusOr<Batch> b = (*l)->Next();
    EXPECT_TRUE(b.ok()) << b.status();
    loaders.push_back(std::move(*l));
  }
  EXPECT_EQ(testutil::ReadFile(victim), "precious");
  // The forged ring is neither trusted nor touched by a restart's scan.
  std::vector<std::string> skipped;
  const std::vector<std::string> removed = RemoveStaleSegments(
      server.prefix() + "." + std::to_string(getuid()) + ".", &skipped);
  EXPECT_TRUE(removed.empty());
  bool forged_reported = false, link_reported = false;
  for (const std::string& s : skipped) {
    forged_reported |= s.find(".job.0: owned by uid") != std::string::npos;
    link_reported |= s.find(".job.1: a symbolic link") != std::string::npos;
  }
  EXPECT_TRUE(forged_reported);
  EXPECT_TRUE(link_reported);
  loaders.clear();
  unlink((base + "0").c_str());
  unlink((base + "1").c_str());
}

TEST(ShmEntries, ForgedRingOfAnotherUserWithADeadServerIsNotRemoved) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to act as nobody";
  // A root daemon trusting a foreign header would unlink whatever a user
  // names "dead"; it must leave other users' files alone.
  const std::string prefix = "bdforge" + std::to_string(getpid()) + "." +
                             std::to_string(getuid()) + ".";
  const std::string path = "/dev/shm/" + prefix + "x.0";
  ASSERT_EQ(AsNobody([&] {
              const int fd = open(path.c_str(), O_RDWR | O_CREAT, 0644);
              if (fd < 0) return 1;
              shm::RingHeader h;
              memset(static_cast<void*>(&h), 0, sizeof(h));
              h.magic = shm::kMagic;
              h.server_pid = 0x3ffffff0;  // no such process
              const bool ok = write(fd, &h, sizeof(h)) == ssize_t(sizeof(h));
              close(fd);
              return ok ? 0 : 2;
            }),
            0);
  std::vector<std::string> skipped;
  EXPECT_TRUE(RemoveStaleSegments(prefix, &skipped).empty());
  struct stat st;
  EXPECT_EQ(lstat(path.c_str(), &st), 0) << "another user's file was removed";
  ASSERT_EQ(skipped.size(), 1u);
  EXPECT_NE(skipped[0].find("owned by uid " + std::to_string(NobodyUid())),
            std::string::npos)
      << skipped[0];
  unlink(path.c_str());
}

// ------------------------------------------------------------ break 9

TEST(SocketDirectory, LockFileLinkPlantedByAnotherUserIsNotFollowed) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to act as nobody";
  // A shared sticky directory, as /tmp is.
  const std::string dir = DirectoryOfMode(01777);
  const std::string victim = testing::MakeTempDir() + "/victim";
  { std::ofstream(victim) << "precious"; }
  TestServer server("lk", dir);
  const std::string lock = server.socket_path() + ".lock";
  ASSERT_EQ(AsNobody([&] {
              return symlink(victim.c_str(), lock.c_str()) == 0 ? 0 : 1;
            }),
            0);
  // Past the directory's own refusal, to the lock file.
  const std::string err = Refusal(server, {"--allow-shared-socket-dir"});
  EXPECT_NE(err.find("symbolic link"), std::string::npos) << err;
  EXPECT_EQ(testutil::ReadFile(victim), "precious")
      << "truncated through the link";
}

TEST(SocketDirectory, LockFileLinkIsNotFollowedWhateverTheSysctls) {
  // fs.protected_symlinks may stop a link of another user in a sticky
  // directory; a link in the daemon's own directory is refused by the open.
  const std::string victim = testing::MakeTempDir() + "/victim";
  { std::ofstream(victim) << "precious"; }
  TestServer server("lr");
  ASSERT_EQ(symlink(victim.c_str(), (server.socket_path() + ".lock").c_str()),
            0);
  const std::string err = Refusal(server);
  EXPECT_NE(err.find("symbolic link"), std::string::npos) << err;
  EXPECT_EQ(testutil::ReadFile(victim), "precious")
      << "truncated through the link";
}

TEST(SocketDirectory, LockFileOfAnotherUserIsRefused) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to act as nobody";
  const std::string dir = DirectoryOfMode(01777);
  TestServer server("lo", dir);
  const std::string lock = server.socket_path() + ".lock";
  ASSERT_EQ(AsNobody([&] {
              const int fd = open(lock.c_str(), O_RDWR | O_CREAT, 0666);
              return fd >= 0 ? 0 : 1;
            }),
            0);
  const std::string err = Refusal(server, {"--allow-shared-socket-dir"});
  EXPECT_NE(err.find("not a regular file of uid"), std::string::npos) << err;
}

TEST(SocketDirectory, DirectoryOwnedByAnotherUserIsRefused) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to chown";
  const std::string dir = testing::MakeTempDir() + "/run";
  ASSERT_EQ(mkdir(dir.c_str(), 0755), 0);
  ASSERT_EQ(chown(dir.c_str(), NobodyUid(), 65534), 0);
  TestServer server("own", dir);
  const std::string err = Refusal(server);
  EXPECT_NE(err.find("owned by uid " + std::to_string(NobodyUid())),
            std::string::npos)
      << err;
  EXPECT_FALSE(testing::UnixSocketAccepts(server.socket_path()));
}

TEST(SocketDirectory, WorldWritableDirectoryWithoutStickyBitIsRefused) {
  const std::string dir = DirectoryOfMode(0777);
  TestServer server("ww", dir);
  const std::string err = Refusal(server);
  EXPECT_NE(err.find("mode 0777"), std::string::npos) << err;
}

TEST(SocketDirectory, OwnDirectoryIsAcceptedAndStickySharedOneOnlyWhenAllowed) {
  TestServer own("ok");
  ASSERT_TRUE(own.Start());
  const std::string shared = DirectoryOfMode(01777);
  // Anyone may bind a name in /tmp before the daemon does: refused, saying
  // why and what to do.
  TestServer sticky("st", shared);
  std::string err = Refusal(sticky);
  EXPECT_NE(err.find("mode 1777"), std::string::npos) << err;
  EXPECT_NE(err.find("pass for batchd"), std::string::npos) << err;
  EXPECT_NE(err.find("--allow-shared-socket-dir"), std::string::npos) << err;
  EXPECT_FALSE(testing::UnixSocketAccepts(sticky.socket_path()));
  EXPECT_TRUE(sticky.Start({"--allow-shared-socket-dir"}));
  // Without the sticky bit nothing allows it.
  const std::string open = DirectoryOfMode(0777);
  TestServer ww("wa", open);
  err = Refusal(ww, {"--allow-shared-socket-dir"});
  EXPECT_NE(err.find("without the sticky bit"), std::string::npos) << err;
}

// ------------------------------------------------------------ break 7

TEST(ListenAddress, OnlyOneHostAndADecimalPortAreAccepted) {
  for (const char* bad :
       {"127.0.0.1:9100,9101", "127.0.0.1:9100,[::]:9100", "+9100",
        "127.0.0.1:9100s", "127.0.0.1:9100r", "9100", ":9100",
        "127.0.0.1:", "127.0.0.1:99999", "127.0.0.1 :9100", "[::1:9100",
        "[127.0.0.1]:9100", "0.0.0.0:9100", "[::]:9100", "10.1.2.3:9100"}) {
    absl::StatusOr<std::vector<std::string>> r =
        ResolveListenAddress("metrics-listen", bad, false);
    EXPECT_FALSE(r.ok()) << bad << " was accepted as " << (*r)[0];
  }
  absl::StatusOr<std::vector<std::string>> r =
      ResolveListenAddress("listen", "127.0.0.1:0", false);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, std::vector<std::string>{"127.0.0.1:0"});
  r = ResolveListenAddress("listen", "[::1]:80", false);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, std::vector<std::string>{"[::1]:80"});
  r = ResolveListenAddress("listen", "localhost:80", false);
  ASSERT_TRUE(r.ok()) << r.status();
  for (const std::string& a : *r) {
    EXPECT_TRUE(a == "127.0.0.1:80" || a == "[::1]:80") << a;
  }
  r = ResolveListenAddress("listen", "0.0.0.0:80", true);
  ASSERT_TRUE(r.ok()) << "--allow-remote: " << r.status();
}

TEST(ListenAddress, DaemonRefusesCivetwebListSyntaxForMetrics) {
  TestServer server("ml");
  for (const char* metrics : {"127.0.0.1:19411,19412", "+19413"}) {
    std::string out;
    const int status = RunDaemon(
        {"--listen", server.address(), "--data-root", server.dir(),
         "--shm-prefix", server.prefix(), "--metrics-listen", metrics},
        &out);
    EXPECT_TRUE(Exited(status, 2)) << metrics << " was served: " << out;
    EXPECT_NE(out.find("--metrics-listen"), std::string::npos) << out;
  }
}

// In a private mount namespace, /etc/hosts names 127.0.0.1.attacker.example
// as 0.0.0.0 (every interface): a name that merely starts with "127.".
bool HostsSayingEveryInterface(const std::string& dir) {
  if (unshare(CLONE_NEWNS) != 0) return false;
  if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
    return false;
  }
  const std::string hosts = dir + "/hosts";
  {
    std::ofstream out(hosts);
    out << "0.0.0.0 127.0.0.1.attacker.example\n"
           "127.0.0.1 localhost\n";
  }
  return mount(hosts.c_str(), "/etc/hosts", nullptr, MS_BIND, nullptr) == 0;
}

TEST(ListenAddress, HostnameStartingWith127ThatResolvesElsewhereIsRefused) {
  TestServer server("hn");
  for (const std::vector<std::string>& flags :
       {std::vector<std::string>{"--listen",
                                 "tcp://127.0.0.1.attacker.example:0"},
        std::vector<std::string>{"--listen", server.address(),
                                 "--metrics-listen",
                                 "127.0.0.1.attacker.example:19414"}}) {
    std::vector<std::string> args = {"--data-root", server.dir(),
                                     "--shm-prefix", server.prefix()};
    args.insert(args.end(), flags.begin(), flags.end());
    std::string out;
    const int status = RunDaemon(args, &out, 10, [&] {
      return HostsSayingEveryInterface(server.dir());
    });
    if (Exited(status, 77)) {
      GTEST_SKIP() << "cannot make a private mount namespace here";
    }
    EXPECT_TRUE(Exited(status, 2)) << flags[1] << ": " << out;
    EXPECT_NE(out.find("resolves to 0.0.0.0"), std::string::npos) << out;
  }
}

// ------------------------------------------------------------ break 8


uint64_t ProcessKiB(pid_t pid, const char* field) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field, 0) == 0) {
      return strtoull(line.c_str() + strlen(field) + 1, nullptr, 10);
    }
  }
  return 0;
}

// A data tree under the daemon's --data-root with a link to a file outside
// it (a stand-in for /etc/shadow: a valid JPEG, so reading it would go
// unnoticed), a FIFO named .JPEG and a sparse 1 GiB .JPEG: the stream
// completes, each is a decode error, and the daemon never holds the GiB.
TEST(DataTree, HostileFilesAreDecodeErrorsAndTheStreamCompletes) {
  const int port = FreeLoopbackPort();
  TestServer server("tree");
  const std::string outside = testing::MakeTempDir();
  const std::string cls = server.dir() + "/inet/train/n01";
  ASSERT_EQ(mkdir((server.dir() + "/inet").c_str(), 0755), 0);
  ASSERT_EQ(mkdir((server.dir() + "/inet/train").c_str(), 0755), 0);
  ASSERT_EQ(mkdir(cls.c_str(), 0755), 0);
  auto jpeg = [](unsigned seed) {
    return testing_images::EncodeJpeg(testing_images::Picture(40, 30, 3, seed),
                                      40, 30, 3);
  };
  for (int i = 0; i < 5; ++i) {
    std::ofstream(cls + "/good" + std::to_string(i) + ".JPEG") << jpeg(i + 1);
  }
  std::ofstream(outside + "/shadow.JPEG") << jpeg(9);
  ASSERT_EQ(
      symlink((outside + "/shadow.JPEG").c_str(), (cls + "/link.JPEG").c_str()),
      0);
  ASSERT_EQ(mkfifo((cls + "/fifo.JPEG").c_str(), 0644), 0);
  {
    const int fd =
        open((cls + "/sparse.JPEG").c_str(), O_WRONLY | O_CREAT, 0644);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(ftruncate(fd, off_t(1) << 30), 0);
    close(fd);
  }
  ASSERT_TRUE(server.Start(
      {"--metrics-listen", "127.0.0.1:" + std::to_string(port)}, 1));
  LoaderOptions o;
  o.server = server.address();
  o.stream = "tree";
  o.workload = "imagenet";
  o.data = "inet";
  o.split = "train";
  o.global_batch_size = 8;  // the whole epoch in one batch
  o.world_size = 1;
  o.slots = 2;
  o.options = {{"image_size", "16"},
               {"resize_size", "16"},
               {"progress", "0"},
               {"on_decode_error", "substitute"}};
  o.timeout_seconds = 20;
  absl::StatusOr<std::unique_ptr<Loader>> l = Loader::Open(o);
  ASSERT_TRUE(l.ok()) << l.status();
  absl::StatusOr<Batch> b = (*l)->Next();
  ASSERT_TRUE(b.ok()) << b.status() << " (a worker blocked on the FIFO?)";
  const std::string metrics = testing::HttpGet(port, "/metrics");
  const std::string key =
      "batchd_decode_errors_total{stream=\"tree\",owner=\"" +
      std::to_string(getuid()) + "\"} ";
  const size_t at = metrics.find(key);
  ASSERT_NE(at, std::string::npos) << metrics;
  const uint64_t errors =
      strtoull(metrics.c_str() + at + key.size(), nullptr, 10);
  // link, FIFO and sparse file at least (a substitute may be one too).
  EXPECT_GE(errors, 3u) << "the link out of the root was decoded";
  EXPECT_LT(ProcessKiB(server.pid(), "VmHWM:"), 512u * 1024)
      << "the daemon read the sparse GiB";
}

}  // namespace
}  // namespace batchd

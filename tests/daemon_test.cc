// The daemon as an operator runs it: config file round trip, systemd
// readiness, Prometheus metrics, access control and limits, and one job's
// stopped rank never stalling another job.
#include <arpa/inet.h>
#include <dirent.h>
#include <elf.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_join.h"
#include "base/address.h"
#include "batchd/loader.h"
#include "ring/ring.h"
#include "tests/synthetic_stream.h"
#include "tests/test_server.h"

namespace batchd {
namespace {

using testing::TestServer;

// Runs the daemon with `args` to completion; returns exit status and output.
int RunDaemon(const std::string& args, std::string* out) {
  const std::string cmd = testing::DaemonPath() + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out->append(buf, n);
  return pclose(p);
}

LoaderOptions Options(const TestServer& s, const std::string& stream,
                      int world = 1, int rank = 0) {
  return testutil::SyntheticStream(s.address(), stream, 8, world, rank, 1000,
                                   1024);
}


TEST(DaemonTest, ConfigFileRoundTripsAndFlagsWin) {
  const std::string dir = testing::MakeTempDir();
  std::string printed;
  ASSERT_EQ(RunDaemon("--threads 3 --max-streams 7 --log-level warn "
                      "--listen unix://" + dir + "/x.sock --print-config",
                      &printed),
            0)
      << printed;
  EXPECT_NE(printed.find("threads = 3"), std::string::npos) << printed;
  std::ofstream(dir + "/batchd.toml") << printed;
  std::string again;
  ASSERT_EQ(RunDaemon("--config " + dir + "/batchd.toml --print-config",
                      &again),
            0);
  EXPECT_EQ(again, printed) << "the file did not reproduce the flags";
  std::string overridden;
  ASSERT_EQ(RunDaemon("--threads 5 --config " + dir +
                          "/batchd.toml --print-config",
                      &overridden),
            0);
  EXPECT_NE(overridden.find("threads = 5"), std::string::npos);
  EXPECT_NE(overridden.find("max-streams = 7"), std::string::npos);
  std::ofstream(dir + "/bad.toml") << "threads = 2\nthredas = 4\n";
  std::string bad;
  const int status = RunDaemon("--config " + dir + "/bad.toml", &bad);
  EXPECT_EQ(WEXITSTATUS(status), 2);
  EXPECT_NE(bad.find("line 2: unknown key 'thredas'"), std::string::npos)
      << bad;
}

// Found by fuzz/config_fuzz: --threads beyond an int was truncated, and
// --print-config then wrote a value TOML cannot hold; durations of 1e308 or
// nan seconds overflowed the core's nanosecond conversions.
TEST(DaemonTest, RefusesNumbersTheSettingCannotHold) {
  for (const char* flag :
       {"--threads 407370955615", "--threads 2147483648",
        "--max-streams 4294967296", "--max-stream-bytes 18446744073709551615",
        "--idle-stream-seconds 1e308", "--client-stale-seconds nan",
        "--throughput-log-seconds inf"}) {
    std::string out;
    const int status = RunDaemon(std::string(flag) + " --print-config", &out);
    EXPECT_EQ(WEXITSTATUS(status), 2) << flag << ": " << out;
    EXPECT_NE(out.find("wants"), std::string::npos) << flag << ": " << out;
  }
  std::string out;
  // --threads is bounded (threads that sizes it must be startable): its
  // largest value round-trips, as the largest of the others do.
  ASSERT_EQ(RunDaemon("--threads 1024 --max-stream-bytes "
                      "9223372036854775807 --idle-stream-seconds 1e9 "
                      "--print-config",
                      &out),
            0)
      << out;
  EXPECT_NE(out.find("threads = 1024"), std::string::npos) << out;
}

// Issue 27: a 100 KB config whose dotted key or table header nested 50,000
// levels overflowed toml++'s stack (SIGSEGV) before any error was written.
// Nesting is bounded before the parser sees the file, naming the line.
TEST(DaemonTest, ConfigNestingIsBoundedBeforeTheParser) {
  const std::string dir = testing::MakeTempDir();
  const int n = 50000;
  std::string dotted, header = "[", array = "x = ", table = "x = ";
  for (int i = 0; i < n; ++i) dotted += i > 0 ? ".a" : "a";
  header += dotted + "]";
  for (int i = 0; i < n; ++i) array += "[";
  for (int i = 0; i < n; ++i) array += "]";
  for (int i = 0; i < n; ++i) table += "{a=";
  table += "1";
  for (int i = 0; i < n; ++i) table += "}";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"dotted key", dotted + " = 1"},
      {"table header", header},
      {"array", array},
      {"inline table", table}};
  for (const auto& [what, line] : cases) {
    const std::string path = dir + "/deep.toml";
    // The file's second line; a string with dots and brackets first, which
    // is no nesting.
    std::ofstream(path) << "data-root = \"/a.b.c.d.e.f.g.h.i.j.k.l.m.n.o.p.q.r."
                           "s.t.u.v.w.x.y.z.A.B.C.D.E.F.G.H.[[[[{{{{\"\n"
                        << line << "\n";
    std::string out;
    const int status = RunDaemon("--config " + path + " --print-config", &out);
    ASSERT_TRUE(WIFEXITED(status)) << what;
    EXPECT_EQ(WEXITSTATUS(status), 2) << what << ": " << out.substr(0, 300);
    EXPECT_NE(out.find("config " + path + " line 2: "), std::string::npos)
        << what << ": " << out.substr(0, 300);
    EXPECT_NE(out.find("nested deeper than 32 levels"), std::string::npos)
        << what << ": " << out.substr(0, 300);
  }
  // Larger than any settings file: refused unread.
  const std::string big = dir + "/big.toml";
  std::ofstream(big) << "# " << std::string(2 << 20, 'x') << "\n";
  std::string out;
  const int status = RunDaemon("--config " + big + " --print-config", &out);
  EXPECT_EQ(WEXITSTATUS(status), 2) << out;
  EXPECT_NE(out.find("is larger than 1048576 bytes"), std::string::npos) << out;
}

// Issue 27: settings that started a daemon which then failed every stream
// (slots beyond what a ring holds, a prefix no segment name can hold), or
// that were cut or split where used (a NUL in listen or data-root, a
// newline in shm-prefix), are refused at start, naming the key.
TEST(DaemonTest, SettingsThatCannotWorkAreRefusedNamingTheKey) {
  const std::string dir = testing::MakeTempDir();
  const std::vector<std::pair<std::string, std::string>> files = {
      {"slots = 4294967295", "--slots wants an integer from 1 to 1024"},
      {"slots = 1025", "--slots wants an integer from 1 to 1024"},
      {"shm-prefix = \"" + std::string(300, 'p') + "\"", "--shm-prefix"},
      {"shm-prefix = \"a\\nb\"", "--shm-prefix 'a\\nb'"},
      {"shm-prefix = \"a.b\"", "--shm-prefix 'a.b'"},
      {"listen = \"unix://" + dir + "/x\\u0000y/sock\"",
       "--listen 'unix://" + dir + "/x\\x00y/sock' holds a control"},
      {"data-root = \"/tmp\\u0000/etc\"",
       "--data-root '/tmp\\x00/etc' holds a control"}};
  for (const auto& [line, want] : files) {
    const std::string path = dir + "/bad.toml";
    std::ofstream(path) << "threads = 2\n" << line << "\n";
    std::string out;
    const int status = RunDaemon("--config " + path + " --print-config", &out);
    EXPECT_EQ(WEXITSTATUS(status), 2) << line << ": " << out;
    EXPECT_NE(out.find("config " + path + " line 2: " + want),
              std::string::npos)
        << line << ": " << out;
    EXPECT_EQ(out.find('\r'), std::string::npos);
  }
  for (const std::string& flag : {std::string("--slots 4294967295"),
                                  "--shm-prefix " + std::string(129, 'p')}) {
    std::string out;
    const int status = RunDaemon(flag + " --print-config", &out);
    EXPECT_EQ(WEXITSTATUS(status), 2) << flag << ": " << out;
  }
  // The largest that work are taken.
  std::string out;
  EXPECT_EQ(RunDaemon("--slots 1024 --shm-prefix " + std::string(128, 'p') +
                          " --print-config",
                      &out),
            0)
      << out;
  // No stray directory was made for the NUL-cut listen path.
  EXPECT_NE(access((dir + "/x").c_str(), F_OK), 0);
}

// Issue 22: a flag that sizes threads beyond what a daemon can start was
// taken, and the thread that could not start aborted the daemon.
// Issue 22: under a pids limit (systemd's TasksMax; RLIMIT_NPROC here) a
// thread that could not start threw std::system_error, which nothing
// caught: std::terminate, exit 134. It is a start-up error, named.
TEST(DaemonTest, AThreadThatCannotStartIsAStartUpErrorNotAnAbort) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to become another user";
  if (system("command -v setpriv prlimit > /dev/null") != 0) {
    GTEST_SKIP() << "needs setpriv and prlimit (util-linux)";
  }
  const std::string dir = testing::MakeTempDir();
  ASSERT_EQ(chown(dir.c_str(), 65534, 65534), 0);
  // nobody may run one task: the daemon's main thread.
  const std::string cmd =
      "setpriv --reuid=65534 --regid=65534 --clear-groups "
      "prlimit --nproc=1:1 " +
      testing::DaemonPath() + " --listen unix://" + dir +
      "/s.sock --data-root " + dir + " --cache-dir '' --shm-prefix bdtnproc" +
      std::to_string(getpid()) + " --threads 4 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  const int status = pclose(p);
  ASSERT_TRUE(WIFEXITED(status)) << out;
  EXPECT_EQ(WEXITSTATUS(status), 1) << out;
  EXPECT_NE(out.find("cannot start worker thread 1 of --threads 4"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("TasksMax"), std::string::npos) << out;
}

TEST(DaemonTest, FlagsThatSizeThreadsAreBoundedAndNamed) {
  const std::pair<const char*, const char*> refused[] = {
      {"--threads 1025", "--threads wants an integer from 0 to 1024"},
      {"--threads 2147483647", "--threads wants an integer from 0 to 1024"},
      {"--readahead-threads 1025",
       "--readahead-threads wants an integer from 1 to 1024"},
      {"--max-connections 2000000",
       "--max-connections wants an integer from 0 to 1048576"},
      {"--max-connections-per-uid 0",
       "--max-connections-per-uid wants an integer from 1 to 1048576"},
  };
  for (const auto& [flag, why] : refused) {
    std::string out;
    const int status = RunDaemon(std::string(flag) + " --print-config", &out);
    EXPECT_EQ(WEXITSTATUS(status), 2) << flag << ": " << out;
    EXPECT_NE(out.find(why), std::string::npos) << flag << ": " << out;
  }
  std::string out;
  ASSERT_EQ(RunDaemon("--threads 1024 --readahead-threads 1024 "
                      "--read-stall-seconds 5 --max-connections 100 "
                      "--max-connections-per-uid 10 "
                      "--connection-idle-seconds 7 --print-config",
                      &out),
            0)
      << out;
  for (const char* line :
       {"readahead-threads = 1024", "read-stall-seconds = 5",
        "max-connections = 100", "max-connections-per-uid = 10",
        "connection-idle-seconds = 7"}) {
    EXPECT_NE(out.find(line), std::string::npos) << line << "\n" << out;
  }
}

TEST(DaemonTest, ReadyIsNotifiedOnlyOnceTheSocketAccepts) {
  const std::string dir = testing::MakeTempDir();
  const std::string notify = dir + "/notify";
  const int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", notify.c_str());
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  const std::string sock = dir + "/d.sock";
  const pid_t pid = fork();
  if (pid == 0) {
    setenv("NOTIFY_SOCKET", notify.c_str(), 1);
    execl(testing::DaemonPath().c_str(), testing::DaemonPath().c_str(),
          "--listen", ("unix://" + sock).c_str(), "--data-root", dir.c_str(),
          "--shm-prefix", ("bdready" + std::to_string(getppid())).c_str(),
          static_cast<char*>(nullptr));
    _exit(127);
  }
  timeval tv{20, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  char buf[256] = {0};
  const ssize_t n = recv(fd, buf, sizeof(buf) - 1, 0);
  ASSERT_GT(n, 0) << "no notification";
  EXPECT_NE(std::string(buf).find("READY=1"), std::string::npos) << buf;
  // The moment READY arrives, the socket already serves.
  EXPECT_TRUE(testing::UnixSocketAccepts(sock));
  kill(pid, SIGTERM);
  int status;
  waitpid(pid, &status, 0);
  EXPECT_EQ(WEXITSTATUS(status), 0);
  close(fd);
}

TEST(DaemonTest, EveryThreadButTheSignalWaiterBlocksSigtermAndSigint) {
  // SIGTERM is taken by sigwait in the main thread. A thread that leaves it
  // unblocked (gRPC's, started before the mask was set) may be the one the
  // kernel picks: the daemon then dies of the signal, -15, without closing
  // its streams or marking its rings exiting (the daemon-kill soak saw it
  // twice in 47 SIGTERMs).
  TestServer server("sigmask");
  ASSERT_TRUE(server.Start());
  const std::string tasks = "/proc/" + std::to_string(server.pid()) + "/task";
  DIR* dir = opendir(tasks.c_str());
  ASSERT_NE(dir, nullptr) << tasks;
  int checked = 0;
  std::vector<std::string> unblocked;
  while (dirent* e = readdir(dir)) {
    if (e->d_name[0] == '.' || atoi(e->d_name) == server.pid()) continue;
    std::ifstream status(tasks + "/" + e->d_name + "/status");
    std::ifstream comm(tasks + "/" + e->d_name + "/comm");
    std::string line, name;
    std::getline(comm, name);
    while (std::getline(status, line)) {
      if (line.rfind("SigBlk:", 0) != 0) continue;
      const unsigned long long blocked =
          std::stoull(line.substr(7), nullptr, 16);
      const unsigned long long stop =
          (1ull << (SIGTERM - 1)) | (1ull << (SIGINT - 1));
      if ((blocked & stop) != stop) unblocked.push_back(name);
      ++checked;
    }
  }
  closedir(dir);
  EXPECT_GT(checked, 2);
  EXPECT_TRUE(unblocked.empty())
      << "threads that SIGTERM may kill: " << absl::StrJoin(unblocked, ", ");
}

// glibc puts a program's static thread-local storage at the top of every
// thread's stack, also of threads with small stacks of a library's own
// (civetweb's, which serve /metrics, have 100 KiB): a large thread_local
// array there overflowed them. Large per-thread state goes on the heap.
TEST(DaemonTest, StaticThreadLocalStorageStaysSmall) {
  std::ifstream in(testing::DaemonPath(), std::ios::binary);
  ASSERT_TRUE(in) << testing::DaemonPath();
  Elf64_Ehdr eh;
  ASSERT_TRUE(in.read(reinterpret_cast<char*>(&eh), sizeof(eh)));
  ASSERT_EQ(eh.e_ident[EI_CLASS], ELFCLASS64);
  uint64_t tls = 0;
  for (int i = 0; i < eh.e_phnum; ++i) {
    Elf64_Phdr ph;
    in.seekg(std::streamoff(eh.e_phoff + uint64_t(i) * eh.e_phentsize));
    ASSERT_TRUE(in.read(reinterpret_cast<char*>(&ph), sizeof(ph)));
    if (ph.p_type == PT_TLS) tls = ph.p_memsz;
  }
  EXPECT_LT(tls, 16u * 1024) << "bytes of static TLS in every thread's stack";
}

TEST(DaemonTest, MetricsAreScrapedAndParse) {
  const int port = FreeLoopbackPort();
  TestServer server("metrics");
  ASSERT_TRUE(server.Start(
      {"--metrics-listen", "127.0.0.1:" + std::to_string(port)}));
  auto l = Loader::Open(Options(server, "scraped"));
  ASSERT_TRUE(l.ok()) << l.status();
  for (int i = 0; i < 5; ++i) ASSERT_TRUE((*l)->Next().ok());
  // Every line is a comment or `name{labels} value`.
  const std::regex sample(
      R"(^([a-z_]+)(\{([a-z_]+="[^"]*",?)*\})? (-?[0-9.eE+-]+|NaN)$)");
  double examples = -1, threads = -1;
  int samples = 0;
  // A batch is counted just after it is published: the rank may have
  // taken the fifth before its examples are counted. Scrape until they
  // are (or 60 s have passed).
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(60);
  for (;;) {
    const std::string resp = testing::HttpGet(port, "/metrics");
    ASSERT_NE(resp.find("200 OK"), std::string::npos) << resp;
    const std::string body = resp.substr(resp.find("\r\n\r\n") + 4);
    std::istringstream in(body);
    std::string line;
    examples = threads = -1;
    samples = 0;
    while (std::getline(in, line)) {
      if (line.empty() || line[0] == '#') continue;
      std::smatch m;
      ASSERT_TRUE(std::regex_match(line, m, sample)) << line;
      ++samples;
      if (line.rfind("batchd_examples_total{stream=\"scraped\",owner=\"" +
                         std::to_string(getuid()) + "\",rank=\"0\"}",
                     0) == 0) {
        examples = std::stod(m[4]);
      }
      if (m[1] == "batchd_threads") threads = std::stod(m[4]);
    }
    if (examples >= 5 * 8 || std::chrono::steady_clock::now() >= deadline) {
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_GT(samples, 10);
  EXPECT_GE(examples, 5 * 8);
  EXPECT_GT(threads, 2);
}

TEST(DaemonTest, RemoteBindNeedsTheFlagAndTls) {
  std::string out;
  int status = RunDaemon("--listen tcp://0.0.0.0:45555", &out);
  EXPECT_EQ(WEXITSTATUS(status), 2);
  EXPECT_NE(out.find("loopback only"), std::string::npos) << out;
  out.clear();
  status = RunDaemon("--listen tcp://0.0.0.0:45555 --allow-remote", &out);
  EXPECT_EQ(WEXITSTATUS(status), 2);
  EXPECT_NE(out.find("needs --tls-cert and --tls-key"), std::string::npos)
      << out;
  out.clear();
  status = RunDaemon("--metrics-listen 0.0.0.0:45556", &out);
  EXPECT_EQ(WEXITSTATUS(status), 2);
  EXPECT_NE(out.find("loopback only"), std::string::npos) << out;
}

TEST(DaemonTest, AnotherUserCannotOpenAPrivateRing) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to become another user";
  TestServer server("uid");
  ASSERT_TRUE(server.Start());
  auto l = Loader::Open(Options(server, "private"));
  ASSERT_TRUE(l.ok()) << l.status();
  const std::string segment = (*l)->info().segment;
  const pid_t child = fork();
  if (child == 0) {
    if (setgid(65534) != 0 || setuid(65534) != 0) _exit(3);
    auto r = RingReader::Attach(segment);
    _exit(r.ok() ? 1 : 0);
  }
  int status;
  waitpid(child, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "nobody opened a 0600 ring";
}

TEST(DaemonTest, LimitsAreEnforcedWithClearErrors) {
  TestServer server("limits");
  ASSERT_TRUE(server.Start({"--max-streams", "2", "--max-stream-bytes",
                            "100000", "--max-ring-bytes", "140000"}));
  // Stream a's rank ring: 2 slots of 12288 bytes + the header (12288) =
  // 36864.
  auto a = Loader::Open(Options(server, "a", 2, 0));
  ASSERT_TRUE(a.ok()) << a.status();
  LoaderOptions big = Options(server, "b");
  big.options["payload_bytes"] = "10000";  // 184320 bytes: over 100000
  auto b = Loader::Open(big);
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("--max-stream-bytes"),
            std::string::npos)
      << b.status();
  LoaderOptions total = Options(server, "c");
  total.options["payload_bytes"] = "4000";  // 86016 bytes: under 100000
  auto c = Loader::Open(total);
  ASSERT_TRUE(c.ok()) << c.status();
  // 36864 + 86016 in use; 36864 more would pass 140000.
  auto a1 = Loader::Open(Options(server, "a", 2, 1));
  ASSERT_FALSE(a1.ok());
  EXPECT_NE(a1.status().message().find("--max-ring-bytes"), std::string::npos)
      << a1.status();
  auto d = Loader::Open(Options(server, "d"));
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("--max-streams 2"), std::string::npos)
      << d.status();
  // Oversized or invalid fields.
  LoaderOptions o = Options(server, std::string(65, 'x'));
  EXPECT_NE(Loader::Open(o).status().message().find("stream name"),
            std::string::npos);
  o = Options(server, "e");
  o.options["payload_bytes"] = std::string(5000, '1');
  EXPECT_NE(Loader::Open(o).status().message().find("the limit is 4096"),
            std::string::npos);
  o = Options(server, "e");
  for (int i = 0; i < 70; ++i) o.options["k" + std::to_string(i)] = "1";
  EXPECT_NE(Loader::Open(o).status().message().find("the limit is 64"),
            std::string::npos);
  EXPECT_TRUE((*a)->Next().ok()) << "the daemon still serves";
}

TEST(DaemonTest, AStoppedRankOfOneJobNeverStallsAnother) {
  TestServer server("jobs");
  ASSERT_TRUE(server.Start({}, 2));
  // Job A: rank 1 attaches and never reads, so its ring stays full.
  auto a0 = Loader::Open(Options(server, "jobA", 2, 0));
  auto a1 = Loader::Open(Options(server, "jobA", 2, 1));
  ASSERT_TRUE(a0.ok() && a1.ok());
  auto b = Loader::Open(Options(server, "jobB"));
  ASSERT_TRUE(b.ok());
  // Job B and job A's live rank go on far past any ring's capacity.
  for (int i = 0; i < 2000; ++i) {
    absl::StatusOr<Batch> batch = (*b)->Next();
    ASSERT_TRUE(batch.ok()) << batch.status();
    ASSERT_EQ(batch->step(), uint64_t(i));
    if (i % 10 == 0) {
      ASSERT_TRUE((*a0)->Next().ok());
    }
  }
}

}  // namespace
}  // namespace batchd

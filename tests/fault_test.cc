// Faults with real processes: kill -9 a trainer, kill -9 the server, restart
// it. Nothing may hang, and nothing may be left behind.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "batchd/loader.h"
#include "tests/synthetic_stream.h"
#include "tests/test_server.h"
#include "tests/testutil.h"
#include "workloads/sampler.h"

namespace batchd {
namespace {

using testing::TestServer;

// A consumer process (tests/consumer_main.cc) whose stdout we read.
class Consumer {
 public:
  Consumer(const TestServer& server, const std::string& stream, int g, int w,
           int rank, int start, int steps, int sleep_ms)
      : child_({BATCHD_CONSUMER_PATH},
               {server.address(), stream, std::to_string(g), std::to_string(w),
                std::to_string(rank), std::to_string(start),
                std::to_string(steps), std::to_string(sleep_ms)}) {}
  // The next "step N ids ..." line, parsed; false at EOF (or when none
  // comes for 60 s).
  bool NextLine(uint64_t* step, std::vector<uint64_t>* ids) {
    const std::string line = child_.Line(60000);
    if (line.empty()) return false;
    std::istringstream in(line);
    std::string word;
    in >> word >> *step >> word;
    ids->clear();
    uint64_t v;
    while (in >> v) ids->push_back(v);
    return true;
  }
  void Kill9() { child_.Kill9(); }
  pid_t pid() const { return child_.pid(); }

 private:
  testutil::Child child_;
};

LoaderOptions Options(const TestServer& server, const std::string& stream,
                      int g, int w, int rank, uint64_t start = 0) {
  LoaderOptions o = testutil::SyntheticStream(server.address(), stream,
                                              uint64_t(g), w, rank, 1000, 40);
  o.start_step = start;
  o.seed = 1;
  return o;
}

std::vector<uint64_t> ExpectedIds(uint64_t step, int g, int w, int rank) {
  absl::StatusOr<Sampler> s = Sampler::Create(1000, g, w, 1, true);
  const RankSlice slice = s->Slice(step, rank);
  std::vector<uint64_t> ids;
  for (uint64_t i = 0; i < slice.count; ++i) {
    ids.push_back(s->ExampleId(slice.epoch, slice.first_position + i));
  }
  return ids;
}

using testutil::WaitFor;

TEST(FaultTest, KilledClientsRingIsFreedOthersGoOnRankReattaches) {
  TestServer server("killclient");
  ASSERT_TRUE(server.Start());
  const std::string seg0 = server.prefix() + "." + std::to_string(getuid()) +
                           ".job.0";
  Consumer rank0(server, "job", 8, 2, 0, 0, -1, 5);
  uint64_t step;
  std::vector<uint64_t> ids;
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(rank0.NextLine(&step, &ids));
    EXPECT_EQ(ids, ExpectedIds(step, 8, 2, 0));
  }
  auto rank1 = Loader::Open(Options(server, "job", 8, 2, 1));
  ASSERT_TRUE(rank1.ok()) << rank1.status();
  ASSERT_EQ(server.Segments().size(), 2u);

  rank0.Kill9();
  EXPECT_TRUE(WaitFor(
      [&] {
        for (const std::string& s : server.Segments()) {
          if (s == seg0) return false;
        }
        return true;
      },
      3.0))
      << "the dead rank's ring was not freed";

  // The other rank goes on, well past its ring's capacity.
  for (uint64_t s = 0; s < 20; ++s) {
    absl::StatusOr<Batch> b = (*rank1)->Next();
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_EQ(b->step(), s);
  }

  // The restarted rank asks for the step it had reached.
  Consumer again(server, "job", 8, 2, 0, 3, 2, 0);
  ASSERT_TRUE(again.NextLine(&step, &ids));
  EXPECT_EQ(step, 3u);
  EXPECT_EQ(ids, ExpectedIds(3, 8, 2, 0));
  ASSERT_TRUE(again.NextLine(&step, &ids));
  EXPECT_EQ(step, 4u);
}

TEST(FaultTest, KilledServerFailsTheWaitingClientNamingItsPid) {
  TestServer server("killserver");
  ASSERT_TRUE(server.Start());
  const pid_t pid = server.pid();
  LoaderOptions o = Options(server, "job", 8, 1, 0);
  o.reconnect_seconds = 0;  // no waiting for a daemon that follows
  auto loader = Loader::Open(o);
  ASSERT_TRUE(loader.ok()) << loader.status();
  ASSERT_TRUE((*loader)->Next().ok());

  absl::Status failure;
  double waited = 0;
  std::thread consumer([&] {
    for (;;) {
      const auto t0 = std::chrono::steady_clock::now();
      absl::StatusOr<Batch> b = (*loader)->Next();
      if (!b.ok()) {
        waited = std::chrono::duration<double>(
                     std::chrono::steady_clock::now() - t0)
                     .count();
        failure = b.status();
        return;
      }
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const std::vector<std::string> left = server.Segments();
  server.Kill9();
  consumer.join();
  EXPECT_TRUE(absl::IsUnavailable(failure)) << failure;
  EXPECT_NE(failure.message().find("batchd (pid " + std::to_string(pid) +
                                   ") stopped"),
            std::string::npos)
      << failure;
  EXPECT_LT(waited, 20.0) << "must fail well within the client's timeout";

  // kill -9 left the segment; a restarted server removes it.
  ASSERT_EQ(left.size(), 1u);
  EXPECT_EQ(server.Segments(), left);
  ASSERT_TRUE(server.Start());
  EXPECT_TRUE(server.Segments().empty());
  // And serves again.
  auto fresh = Loader::Open(Options(server, "job", 8, 1, 0));
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  EXPECT_TRUE((*fresh)->Next().ok());
}

}  // namespace
}  // namespace batchd

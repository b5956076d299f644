// batchctl bench: its arguments, what a rank reads of a tensor, and the
// figures and reports of a run from the ranks' messages.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <fstream>

#include "tests/batchctl_test_argv.h"
#include "tests/testutil.h"
#include "tools/batchctl/bench.h"

namespace batchd::batchctl {
namespace {

using ::testing::HasSubstr;

class BenchArgsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    unsetenv("BATCHD_SERVER");
    unsetenv("BATCHD_TLS_CA");
  }
  static absl::StatusOr<BenchConfig> Parse(Argv args) {
    return ParseBenchArgs(args.argc(), args.argv());
  }
};

TEST_F(BenchArgsTest, HasTheDocumentedDefaults) {
  absl::StatusOr<BenchConfig> c = Parse({"bench", "--global-batch-size", "8"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->loader.stream, absl::StrCat("bench-", getpid()));
  EXPECT_EQ(c->loader.workload, "synthetic");
  EXPECT_EQ(c->loader.split, "train");
  EXPECT_EQ(c->loader.world_size, 1);
  EXPECT_EQ(c->loader.server, kDefaultServerAddress);
  EXPECT_EQ(c->steps, 100u);
  EXPECT_EQ(c->warmup_steps, -1);
  EXPECT_EQ(c->touch, Touch::kPage);
  EXPECT_EQ(c->timeout, 60);
  EXPECT_FALSE(c->json);
}

TEST_F(BenchArgsTest, TakesTheSpecAndTheRun) {
  absl::StatusOr<BenchConfig> c = Parse({"bench",
                                         "--global-batch-size",
                                         "8",
                                         "--world-size",
                                         "2",
                                         "--steps",
                                         "5",
                                         "--warmup-steps",
                                         "0",
                                         "--touch",
                                         "all",
                                         "--option",
                                         "examples=100",
                                         "--option",
                                         "payload_bytes=64",
                                         "--start-step",
                                         "3",
                                         "--slots",
                                         "2",
                                         "--seed",
                                         "9",
                                         "--stream",
                                         "b",
                                         "--timeout",
                                         "7",
                                         "--server",
                                         "unix:///tmp/x.sock",
                                         "--json"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->loader.global_batch_size, 8u);
  EXPECT_EQ(c->loader.world_size, 2);
  EXPECT_EQ(c->loader.start_step, 3u);
  EXPECT_EQ(c->loader.slots, 2u);
  EXPECT_EQ(c->loader.seed, 9u);
  EXPECT_EQ(c->loader.stream, "b");
  EXPECT_EQ(c->loader.server, "unix:///tmp/x.sock");
  EXPECT_EQ(c->loader.options,
            (std::map<std::string, std::string>{{"examples", "100"},
                                                {"payload_bytes", "64"}}));
  EXPECT_EQ(c->steps, 5u);
  EXPECT_EQ(c->warmup_steps, 0);
  EXPECT_EQ(c->touch, Touch::kAll);
  EXPECT_EQ(c->timeout, 7);
  EXPECT_TRUE(c->json);
}

TEST_F(BenchArgsTest, RefusesBadRunsBeforeForkingAnything) {
  ExpectRefusals(
      Parse, {{{"bench"}, "--global-batch-size G is required"},
              {{"bench", "--global-batch-size", "8", "--world-size", "1025"},
               "--world-size must be 1..1024"},
              {{"bench", "--global-batch-size", "9", "--world-size", "2"},
               "not divisible"},
              {{"bench", "--global-batch-size", "8", "--steps", "0"},
               "--steps must be >= 1"},
              {{"bench", "--global-batch-size", "8", "--touch", "some"},
               "--touch wants page or all, not 'some'"},
              {{"bench", "--global-batch-size", "8", "--warmup-steps", "-1"},
               "--warmup-steps wants a number"}});
}

TEST_F(BenchArgsTest, JobsTakeOneWorldSizeForAllOrOneEach) {
  absl::StatusOr<BenchConfig> c =
      Parse({"bench", "--global-batch-size", "8", "--jobs", "4", "--world-size",
             "2,2,2,1", "--stream", "s"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(JobCount(*c), 4u);
  EXPECT_EQ(c->job_world_sizes, (std::vector<int>{2, 2, 2, 1}));
  const BenchConfig job = JobConfig(*c, 3);
  EXPECT_EQ(job.loader.stream, "s-3");
  EXPECT_EQ(job.loader.world_size, 1);
  c = Parse({"bench", "--global-batch-size", "8", "--jobs", "3", "--world-size",
             "2"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->job_world_sizes, (std::vector<int>{2, 2, 2}));
  // Without --jobs: one job, the stream itself.
  c = Parse({"bench", "--global-batch-size", "8", "--stream", "s"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(JobCount(*c), 1u);
  EXPECT_EQ(JobConfig(*c, 0).loader.stream, "s");

  ExpectRefusals(Parse,
                 {{{"bench", "--global-batch-size", "8", "--jobs", "3",
                    "--world-size", "2,1"},
                   "names 2 world sizes for --jobs 3"},
                  {{"bench", "--global-batch-size", "8", "--world-size", "2,1"},
                   "give --jobs too"},
                  {{"bench", "--global-batch-size", "8", "--jobs", "2",
                    "--world-size", "2,3"},
                   "not divisible by job 1's world size 3"},
                  {{"bench", "--global-batch-size", "1024", "--jobs", "2",
                    "--world-size", "1024"},
                   "2048 ranks in all; the limit is 1024"}});
}

TEST_F(BenchArgsTest, RefusesTls) {
  testutil::TempDir dir("batchctl-bench");
  const std::string ca = dir.Path("ca.pem");
  testutil::WriteFile(ca, "-----BEGIN CERTIFICATE-----\n");
  EXPECT_THAT(Parse({"bench", "--global-batch-size", "8", "--server",
                     "tcp://127.0.0.1:7070", "--tls-ca", ca})
                  .status()
                  .message(),
              HasSubstr("bench's ranks connect without TLS"));
}

TEST(TouchTensor, ReadsOneBytePerPageOrEveryByte) {
  std::vector<uint8_t> data(3 * 4096 + 10, 0);
  data[0] = 1;
  data[4096] = 2;
  data[8192] = 4;
  data[8193] = 100;  // not on a page start
  data.back() = 8;
  Tensor t;
  t.data = data.data();
  t.nbytes = data.size();
  EXPECT_EQ(TouchTensor(t, Touch::kPage), 1u + 2 + 4 + 8);
  // Every byte: summed as 8-byte little-endian words plus the tail.
  std::vector<uint8_t> small = {1, 0, 0, 0, 0, 0, 0, 0, 5};
  t.data = small.data();
  t.nbytes = small.size();
  EXPECT_EQ(TouchTensor(t, Touch::kAll), 1u + 5);
  t.nbytes = 0;
  EXPECT_EQ(TouchTensor(t, Touch::kAll), 0u);
}

RankMessage Report(uint32_t rank, uint64_t start_ns, uint64_t end_ns,
                   uint64_t steps, double wait) {
  RankMessage m;
  m.kind = RankMessage::kReport;
  m.rank = rank;
  m.slots = 4;
  m.slot_bytes = 1 << 20;
  m.start_ns = start_ns;
  m.end_ns = end_ns;
  m.steps = steps;
  m.examples = steps * 4;
  m.bytes = steps * 4096;
  m.wait_seconds = wait;
  return m;
}

TEST(SumReports, SpansFirstStartToLastEndAndAveragesWaitFractions) {
  const std::vector<RankMessage> reports = {
      Report(0, 1'000'000'000, 3'000'000'000, 10, 1.0),   // 2 s, waited 50%
      Report(1, 1'500'000'000, 5'000'000'000, 10, 0.0)};  // 3.5 s, 0%
  BenchResult r;
  SumReports(reports, &r);
  EXPECT_DOUBLE_EQ(r.seconds, 4.0);
  EXPECT_EQ(r.rank_batches, 20u);
  EXPECT_EQ(r.examples, 80u);
  EXPECT_EQ(r.bytes, 20u * 4096);
  EXPECT_DOUBLE_EQ(r.wait_fraction, 0.25);
  EXPECT_FALSE(r.ended_early);

  std::vector<RankMessage> ended = reports;
  ended[1].ended = 1;
  BenchResult e;
  SumReports(ended, &e);
  EXPECT_TRUE(e.ended_early);
}

TEST(BenchReports, CountGlobalAndRankBatches) {
  BenchConfig cfg;
  cfg.loader.stream = "b";
  cfg.loader.global_batch_size = 8;
  cfg.loader.world_size = 2;
  cfg.loader.options = {{"examples", "100"}};
  cfg.steps = 10;
  const std::vector<RankMessage> reports = {
      Report(0, 0, 2'000'000'000, 10, 0.5), Report(1, 0, 2'000'000'000, 10, 0)};
  BenchResult r;
  SumReports(reports, &r);
  r.server_pid = 42;
  r.server_threads = 9;

  const Json j = BenchToJson(cfg, reports, r);
  EXPECT_EQ(j["per_rank_batch"], 4);
  EXPECT_EQ(j["examples"], 80);
  EXPECT_DOUBLE_EQ(j["examples_per_s"].get<double>(), 40.0);
  EXPECT_DOUBLE_EQ(j["batches_per_s"].get<double>(), 5.0);  // global
  EXPECT_DOUBLE_EQ(j["rank_batches_per_s"].get<double>(), 10.0);
  EXPECT_EQ(j["touch"], "page");
  EXPECT_EQ(j["ranks"].size(), 2u);
  EXPECT_DOUBLE_EQ(j["ranks"][0]["wait_fraction"].get<double>(), 0.25);
  EXPECT_EQ(j["server_pid"], 42);

  const std::string text = FormatBench(cfg, reports, r);
  EXPECT_THAT(text, ::testing::StartsWith(
                        "stream b  workload synthetic  split train  global "
                        "batch 8  world 2  slots 4 x 1.0 MiB  options "
                        "examples=100\n"));
  EXPECT_THAT(text, HasSubstr("     0     10        40  40.0 KiB    2.000"
                              "        20.0   0.500  25.0%\n"));
  EXPECT_THAT(text, HasSubstr("\n40.0 examples/s  0.000 GB/s  5.00 batches/s "
                              "(10.00 rank batches/s)  wait fraction 0.125  "
                              "over 2.000 s\n"));
  EXPECT_THAT(text, HasSubstr("server: pid 42  threads 9 (0 workers)"));
}

TEST(BenchReports, ASweepGivesEachJobsRateAndFillsAndTheServersCpu) {
  BenchConfig cfg;
  cfg.loader.workload = "imagenet";
  cfg.loader.global_batch_size = 8;
  cfg.steps = 10;
  cfg.jobs = 2;
  cfg.job_world_sizes = {2, 1};
  std::vector<JobResult> jobs(2);
  jobs[0].stream = "s-0";
  jobs[0].world_size = 2;
  SumReports(
      {Report(0, 0, 2'000'000'000, 10, 0), Report(1, 0, 2'000'000'000, 10, 0)},
      &jobs[0].figures);
  jobs[0].fills_made = 80;
  jobs[1].stream = "s-1";
  jobs[1].world_size = 1;
  SumReports({Report(0, 0, 4'000'000'000, 10, 0)}, &jobs[1].figures);
  jobs[1].fills_shared = 40;
  BenchResult all;
  SumReports(
      {Report(0, 0, 2'000'000'000, 10, 0), Report(1, 0, 2'000'000'000, 10, 0),
       Report(0, 0, 4'000'000'000, 10, 0)},
      &all);
  all.server_cpu_seconds = 2.0;

  const Json j = SweepToJson(cfg, jobs, all);
  ASSERT_EQ(j["jobs"].size(), 2u);
  EXPECT_DOUBLE_EQ(j["jobs"][0]["examples_per_s"].get<double>(), 40.0);
  EXPECT_DOUBLE_EQ(j["jobs"][1]["examples_per_s"].get<double>(), 10.0);
  EXPECT_EQ(j["jobs"][1]["steps"], 10);
  EXPECT_EQ(j["jobs"][1]["fills_shared"], 40);
  EXPECT_DOUBLE_EQ(j["server_cpu_seconds"].get<double>(), 2.0);
  EXPECT_DOUBLE_EQ(j["examples_per_cpu_second"].get<double>(), 60.0);

  const std::string text = FormatSweep(cfg, jobs, all);
  EXPECT_THAT(text, ::testing::StartsWith(
                        "2 jobs  workload imagenet  split train  global "
                        "batch 8  seed 0\n"));
  EXPECT_THAT(text, HasSubstr("s-1"));
  EXPECT_THAT(text, HasSubstr("cpu 2.00 s (0.50 cores)"));
  EXPECT_THAT(text, HasSubstr("60.0 examples per server cpu-second"));
}

TEST(ProcessCpuSeconds, ReadsThisProcessAndNotAMissingOne) {
  volatile uint64_t spin = 0;
  for (int i = 0; i < 50'000'000; ++i) spin = spin + i;
  EXPECT_GT(ProcessCpuSeconds(uint32_t(getpid())), 0.0);
  EXPECT_EQ(ProcessCpuSeconds(0), -1);
}

}  // namespace
}  // namespace batchd::batchctl

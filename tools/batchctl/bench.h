// batchctl bench: W consumer processes, each with the real batchd::Loader,
// and the figures of one timed run. The parent forks its ranks before it
// creates any gRPC channel: gRPC's threads and locks do not survive fork().
#ifndef BATCHD_TOOLS_BATCHCTL_BENCH_H_
#define BATCHD_TOOLS_BATCHCTL_BENCH_H_

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "batchd/loader.h"
#include "tools/batchctl/cli.h"
#include "tools/batchctl/output.h"

namespace batchd::batchctl {

enum class Touch { kPage, kAll };

struct BenchConfig {
  Connection connection;
  LoaderOptions loader;  // the spec; rank is set in each child
  uint64_t steps = 100;
  int64_t warmup_steps = -1;  // -1: twice the ring's slots
  Touch touch = Touch::kPage;
  double timeout = 60;
  bool json = false;
  // --jobs N: N jobs of the spec side by side (a sweep), job j with its own
  // stream <stream>-<j> and world size job_world_sizes[j]. 0: one job, the
  // stream itself.
  uint32_t jobs = 0;
  std::vector<int> job_world_sizes;
};
// argv[0] is "bench"; the stream defaults to bench-<pid of this process>.
absl::StatusOr<BenchConfig> ParseBenchArgs(int argc, char** argv);
// The jobs `cfg` runs (at least 1), and job j's own config: its stream and
// world size (cfg itself for a run without --jobs).
uint32_t JobCount(const BenchConfig& cfg);
BenchConfig JobConfig(const BenchConfig& cfg, uint32_t job);
// Sets cfg->job_world_sizes from cfg->jobs and --world-size's values
// (`world_sizes`: one for every job, or one a job); checks each (1..1024,
// dividing the global batch) and that all jobs' ranks are at most 1024.
absl::Status ParseJobs(const std::vector<std::string>& world_sizes,
                       BenchConfig* cfg);

// What a rank sends its parent: first kReady (or kError), then kReport (or
// kError). Plain bytes through a pipe.
struct RankMessage {
  enum Kind : uint32_t { kReady = 1, kReport = 2, kError = 3 };
  uint32_t kind = 0;
  uint32_t rank = 0;
  uint32_t slots = 0;
  uint32_t ended = 0;  // the stream ended before `steps` batches
  uint64_t slot_bytes = 0;
  uint64_t steps = 0;
  uint64_t examples = 0;
  uint64_t bytes = 0;
  uint64_t start_ns = 0;
  uint64_t end_ns = 0;
  double wait_seconds = 0;
  uint64_t checksum = 0;
  char error[512] = {0};
};

// Reads what a consumer is given: one byte per page (the mapping is there
// and delivers), or every 8-byte word (what a host-to-device copy reads).
// Returns a sum so that the reads cannot be optimised away.
uint64_t TouchTensor(const Tensor& t, Touch touch);

// One rank's consumer process (bench_rank.cc): opens the stream, warms up,
// sends kReady on `out_fd`, waits for a byte on `go_fd`, times cfg.steps
// batches and sends kReport. Never returns.
[[noreturn]] void RunRank(const BenchConfig& cfg, uint32_t rank, int out_fd,
                          int go_fd);

// The figures of one run.
struct BenchResult {
  double seconds = 0;
  uint64_t examples = 0, bytes = 0, rank_batches = 0;
  double wait_fraction = 0;
  uint32_t server_threads = 0, server_worker_threads = 0;
  uint64_t server_rss_bytes = 0, server_ring_bytes = 0;
  uint32_t server_pid = 0;
  // CPU seconds the daemon spent from the start to the last report (-1:
  // unknown: its /proc entry is not readable from here).
  double server_cpu_seconds = -1;
  bool ended_early = false;
};

// User and system CPU seconds of process `pid` so far; -1 when its /proc
// entry cannot be read (gone, another pid namespace).
double ProcessCpuSeconds(uint32_t pid);
// The daemon's line of bench's and a sweep's text: "server: pid P  threads
// T (W workers)  rss ...  rings ...", then "  cpu S s (C cores)" when known.
std::string ServerLine(const BenchResult& r);
// The daemon's figures of `r` as "server_pid", "server_threads", ...,
// "server_cpu_seconds" (null when unknown) in `out`.
void AddServerJson(const BenchResult& r, Json* out);

// A sweep's job: its stream, world size, the figures of its ranks' reports
// (SumReports) and its fills as the daemon counted them at the end.
struct JobResult {
  std::string stream;
  int world_size = 1;
  BenchResult figures;
  uint64_t fills_made = 0, fills_shared = 0;
};
// The figures of a run with --jobs: every job's, and the run's (`all`:
// the span over every rank, the sums, the server's fields).
Json SweepToJson(const BenchConfig& cfg, const std::vector<JobResult>& jobs,
                 const BenchResult& all);
std::string FormatSweep(const BenchConfig& cfg,
                        const std::vector<JobResult>& jobs,
                        const BenchResult& all);

// The run's figures from every rank's report (ranks in order): the span
// from the first start to the last end, sums, the mean wait fraction. The
// server's fields are left as they are.
void SumReports(const std::vector<RankMessage>& reports, BenchResult* r);

Json BenchToJson(const BenchConfig& cfg,
                 const std::vector<RankMessage>& reports, const BenchResult& r);
std::string FormatBench(const BenchConfig& cfg,
                        const std::vector<RankMessage>& reports,
                        const BenchResult& r);

}  // namespace batchd::batchctl

#endif  // BATCHD_TOOLS_BATCHCTL_BENCH_H_

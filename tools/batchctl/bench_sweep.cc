// batchctl bench --jobs: several jobs of one spec side by side, as a user
// checks a sweep on one node (jobs of one spec and seed share the daemon's
// fills): each job's rate and fills, and the daemon's CPU for all of them.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "tools/batchctl/bench.h"

namespace batchd::batchctl {

uint32_t JobCount(const BenchConfig& cfg) {
  return std::max<uint32_t>(1, cfg.jobs);
}

BenchConfig JobConfig(const BenchConfig& cfg, uint32_t job) {
  BenchConfig out = cfg;
  if (cfg.jobs > 0) {
    out.loader.stream = absl::StrCat(cfg.loader.stream, "-", job);
    out.loader.world_size = cfg.job_world_sizes.at(job);
  }
  return out;
}

absl::Status ParseJobs(const std::vector<std::string>& world_sizes,
                       BenchConfig* cfg) {
  cfg->job_world_sizes.clear();
  if (cfg->jobs == 0) {
    if (world_sizes.size() > 1) {
      return absl::InvalidArgumentError(
          "--world-size names one world size a job: give --jobs too");
    }
    return absl::OkStatus();
  }
  if (cfg->jobs > 1024) {
    return absl::InvalidArgumentError("--jobs must be 1..1024");
  }
  if (world_sizes.size() > 1 && world_sizes.size() != cfg->jobs) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--world-size names ", world_sizes.size(), " world sizes for --jobs ",
        cfg->jobs, ": give one, or one a job"));
  }
  uint64_t ranks = 0;
  for (uint32_t j = 0; j < cfg->jobs; ++j) {
    int64_t w = cfg->loader.world_size;
    if (world_sizes.size() > 1 &&
        (!absl::SimpleAtoi(world_sizes[j], &w) || w < 1 || w > 1024)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--world-size wants numbers 1..1024, not '", world_sizes[j], "'"));
    }
    if (cfg->loader.global_batch_size % uint64_t(w) != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--global-batch-size ", cfg->loader.global_batch_size,
                       " is not divisible by job ", j, "'s world size ", w));
    }
    ranks += uint64_t(w);
    cfg->job_world_sizes.push_back(int(w));
  }
  if (ranks > 1024) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the jobs have ", ranks, " ranks in all; the limit is 1024"));
  }
  return absl::OkStatus();
}

double ProcessCpuSeconds(uint32_t pid) {
  std::ifstream f(absl::StrCat("/proc/", pid, "/stat"));
  std::string line;
  if (pid == 0 || !std::getline(f, line)) return -1;
  // The command name may hold spaces and parentheses: fields follow its
  // last ')'. utime and stime are fields 14 and 15 (1-based), 12 and 13
  // after the name.
  const size_t close = line.rfind(')');
  if (close == std::string::npos) return -1;
  std::istringstream rest(line.substr(close + 1));
  std::string field;
  uint64_t utime = 0, stime = 0;
  for (int i = 1; i <= 13 && rest >> field; ++i) {
    if (i == 12 && !absl::SimpleAtoi(field, &utime)) return -1;
    if (i == 13 && !absl::SimpleAtoi(field, &stime)) return -1;
  }
  const long tick = sysconf(_SC_CLK_TCK);
  return tick > 0 ? double(utime + stime) / double(tick) : -1;
}

namespace {

// "  cpu 12.30 s (1.98 cores)" over r.seconds; "" when unknown.
std::string ServerCpuText(const BenchResult& r) {
  if (r.server_cpu_seconds < 0) return "";
  return absl::StrFormat(
      "  cpu %.2f s (%.2f cores)", r.server_cpu_seconds,
      r.seconds > 0 ? r.server_cpu_seconds / r.seconds : 0.0);
}

double Rate(uint64_t n, double seconds) {
  return seconds > 0 ? double(n) / seconds : 0.0;
}

}  // namespace

std::string ServerLine(const BenchResult& r) {
  return absl::StrFormat(
      "server: pid %u  threads %u (%u workers)  rss %s  rings %s%s\n",
      r.server_pid, r.server_threads, r.server_worker_threads,
      HumanBytes(double(r.server_rss_bytes)),
      HumanBytes(double(r.server_ring_bytes)), ServerCpuText(r));
}

void AddServerJson(const BenchResult& r, Json* out) {
  Json& o = *out;
  o["server_pid"] = uint64_t(r.server_pid);
  o["server_threads"] = uint64_t(r.server_threads);
  o["server_worker_threads"] = uint64_t(r.server_worker_threads);
  o["server_rss_bytes"] = r.server_rss_bytes;
  o["server_ring_bytes"] = r.server_ring_bytes;
  o["server_cpu_seconds"] =
      r.server_cpu_seconds >= 0 ? Json(r.server_cpu_seconds) : Json(nullptr);
}

Json SweepToJson(const BenchConfig& cfg, const std::vector<JobResult>& jobs,
                 const BenchResult& all) {
  const LoaderOptions& o = cfg.loader;
  Json out;
  out["workload"] = o.workload;
  out["split"] = o.split;
  out["global_batch_size"] = o.global_batch_size;
  out["seed"] = o.seed;
  out["steps"] = cfg.steps;
  out["touch"] = cfg.touch == Touch::kPage ? "page" : "all";
  out["ended_early"] = all.ended_early;
  out["seconds"] = all.seconds;
  out["examples"] = all.examples;
  out["examples_per_s"] = Rate(all.examples, all.seconds);
  AddServerJson(all, &out);
  out["examples_per_cpu_second"] =
      all.server_cpu_seconds > 0
          ? Json(double(all.examples) / all.server_cpu_seconds)
          : Json(nullptr);
  Json list = Json::array();
  for (size_t j = 0; j < jobs.size(); ++j) {
    const JobResult& job = jobs[j];
    const BenchResult& f = job.figures;
    Json row;
    row["job"] = uint64_t(j);
    row["stream"] = job.stream;
    row["world_size"] = uint64_t(job.world_size);
    row["steps"] = f.rank_batches / uint64_t(std::max(1, job.world_size));
    row["examples"] = f.examples;
    row["seconds"] = f.seconds;
    row["examples_per_s"] = Rate(f.examples, f.seconds);
    row["wait_fraction"] = f.wait_fraction;
    row["ended_early"] = f.ended_early;
    row["fills_made"] = job.fills_made;
    row["fills_shared"] = job.fills_shared;
    list.push_back(std::move(row));
  }
  out["jobs"] = std::move(list);
  return out;
}

std::string FormatSweep(const BenchConfig& cfg,
                        const std::vector<JobResult>& jobs,
                        const BenchResult& all) {
  const LoaderOptions& o = cfg.loader;
  const std::string options = OptionsSuffix(o.options);
  std::string out = absl::StrFormat(
      "%u jobs  workload %s  split %s  global batch %u  seed %u%s%s\n",
      jobs.size(), Printable(o.workload), Printable(o.split),
      o.global_batch_size, o.seed, options.empty() ? "" : "  options", options);
  Table t({"JOB", "STREAM", "WORLD", "STEPS", "EXAMPLES", "SECONDS",
           "EXAMPLES/S", "WAIT", "FILLS_MADE", "FILLS_SHARED"});
  t.AlignRight({0, 2, 3, 4, 5, 6, 7, 8, 9});
  for (size_t j = 0; j < jobs.size(); ++j) {
    const JobResult& job = jobs[j];
    const BenchResult& f = job.figures;
    t.Add({absl::StrCat(j), Printable(job.stream), absl::StrCat(job.world_size),
           absl::StrCat(f.rank_batches / uint64_t(std::max(1, job.world_size))),
           absl::StrCat(f.examples), absl::StrFormat("%.3f", f.seconds),
           absl::StrFormat("%.1f", Rate(f.examples, f.seconds)),
           absl::StrFormat("%.1f%%", 100 * f.wait_fraction),
           absl::StrCat(job.fills_made), absl::StrCat(job.fills_shared)});
  }
  out += t.Render("  ");
  absl::StrAppendFormat(&out, "\nall jobs: %.1f examples/s over %.3f s%s\n",
                        Rate(all.examples, all.seconds), all.seconds,
                        all.ended_early ? "  (a stream ended early)" : "");
  out += ServerLine(all);
  if (all.server_cpu_seconds > 0) {
    absl::StrAppendFormat(&out, "%.1f examples per server cpu-second\n",
                          double(all.examples) / all.server_cpu_seconds);
  }
  return out;
}

}  // namespace batchd::batchctl

// batchctl bench: forks W ranks (bench_rank.cc), starts them together, times
// them, samples the daemon's threads and memory meanwhile, and reports.
#include "tools/batchctl/bench.h"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "base/clock.h"
#include "base/process.h"
#include "tools/batchctl/commands.h"
#include "tools/batchctl/control.h"
#include "tools/batchctl/interrupt.h"

namespace batchd::batchctl {
namespace {

constexpr char kSummary[] =
    "measure delivery with W consumer processes (batchd::Loader)";

constexpr char kHelp[] =
    R"(Usage: batchctl bench [--server ADDR] --global-batch-size G [flags]

Opens a stream and forks W consumer processes, one per rank, each with the
real batchd::Loader. Each rank first takes --warmup-steps batches (this
maps every slot of its ring), waits until all ranks are ready, takes the
batches its ring filled with meanwhile, then times --steps batches and
touches each tensor while it holds it (one byte per 4 KiB page, or every
word with --touch all). Evaluation splits (one pass) skip both by default
and time the pass from its start, up to --steps batches. The stream is
closed at the end: do not name a stream a job uses.

Stream spec (names mirror StreamSpec):
  --workload NAME           default: synthetic
  --data PATH               relative to the server's --data-root (default "")
  --split NAME              default: train
  --global-batch-size G     required; divisible by --world-size
  --world-size W            consumer processes (default 1); with --jobs,
                            one for all jobs or one a job (2,2,2,1)
  --seed S                  default 0
  --start-step S            default 0
  --slots K                 ring slots per rank (default 0: server default)
  --option KEY=VALUE        workload option, repeatable; synthetic knows
                            examples and payload_bytes
  --stream NAME             default: bench-<pid of batchctl>

Run:
  --jobs N                  N jobs of the spec side by side, as a sweep
                            runs them: job j is stream <stream>-<j> with
                            its own ranks, all started together. Prints
                            each job's rate and fills (made by its own
                            workers, shared from another job's), and the
                            daemon's CPU for all of them
  --steps S                 timed batches per rank (default 100)
  --warmup-steps N          untimed batches per rank first (default:
                            twice the ring's slots; 0 for eval splits)
  --touch page|all          what a rank reads of each tensor (default page)
  --timeout S               longest wait for one batch or for OpenStream,
                            seconds (default 60)
  --server ADDR             unix:///path or tcp://host:port
                            (default: $BATCHD_SERVER, else
                            unix:///run/batchd/batchd.sock)
  --json                    print one JSON object

Figures: examples/s, bytes/s and batches/s over the span from the first
rank's start to the last rank's end (batches/s counts global batches,
rank_batches/s each rank's slice); wait fraction is the mean over ranks of
the time Next() waited divided by that rank's wall time; server threads and
RSS (without the rings) are the largest GetStatus reported during the run;
server cpu is the daemon's user and system CPU from the start to the last
rank's report (from /proc: run bench on the daemon's node). With --jobs, a
job's rate spans its own ranks' first start to last end.

Exit codes: 0 ok, 1 the server failed, could not be reached or a rank
failed, 2 usage error.
)";

struct Child {
  uint32_t job = 0;
  pid_t pid = -1;
  int out_fd = -1;  // rank → parent
  int go_fd = -1;   // parent → rank
  bool ready = false;
  bool reported = false;
  RankMessage report;
};

void KillAll(std::vector<Child>* children) {
  for (Child& c : *children) {
    if (c.pid > 0) kill(c.pid, SIGTERM);
  }
  for (Child& c : *children) {
    if (c.pid > 0) waitpid(c.pid, nullptr, 0);
    c.pid = -1;
  }
}

// Waits for one message from every child in `children` whose `done` says
// it has not sent it yet; `tick` runs about every 200 ms meanwhile. Fails
// with the first error a rank reports, or when one dies or the deadline
// passes.
template <typename Done, typename Tick>
absl::Status Gather(std::vector<Child>& children, Done done, uint64_t deadline,
                    Tick tick) {
  for (;;) {
    std::vector<pollfd> fds;
    std::vector<size_t> who;
    for (size_t i = 0; i < children.size(); ++i) {
      if (!done(children[i])) {
        fds.push_back({children[i].out_fd, POLLIN, 0});
        who.push_back(i);
      }
    }
    if (fds.empty()) return absl::OkStatus();
    if (Interrupted()) return absl::CancelledError("interrupted");
    if (MonotonicNanos() > deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat(fds.size(), " rank(s) did not finish in time"));
    }
    const int n = poll(fds.data(), fds.size(), 200);
    if (n < 0 && errno != EINTR) {
      return absl::InternalError(absl::StrCat("poll: ", strerror(errno)));
    }
    for (size_t k = 0; n > 0 && k < fds.size(); ++k) {
      if (fds[k].revents == 0) continue;
      Child& c = children[who[k]];
      RankMessage m;
      if (!ReadAll(c.out_fd, &m, sizeof(m))) {
        if (Interrupted()) return absl::CancelledError("interrupted");
        return absl::InternalError(absl::StrCat(
            "rank ", who[k], " (pid ", c.pid, ") exited without a report"));
      }
      if (m.kind == RankMessage::kError) {
        return absl::UnavailableError(m.error);
      }
      if (m.kind == RankMessage::kReady) {
        c.ready = true;
        c.report = m;
      } else if (m.kind == RankMessage::kReport) {
        c.reported = true;
        c.report = m;
      }
    }
    tick();
  }
}

// Forks one process per rank of every job; each runs RunRank. Nothing of
// gRPC may exist in this process yet.
absl::Status ForkRanks(const BenchConfig& cfg, std::vector<Child>* children) {
  children->clear();
  for (uint32_t j = 0; j < JobCount(cfg); ++j) {
    const BenchConfig job = JobConfig(cfg, j);
    for (uint32_t r = 0; r < uint32_t(job.loader.world_size); ++r) {
      int out[2], go[2];
      if (pipe(out) != 0 || pipe(go) != 0) {
        return absl::InternalError(absl::StrCat("pipe: ", strerror(errno)));
      }
      const pid_t pid = fork();
      if (pid < 0) {
        return absl::InternalError(absl::StrCat("fork: ", strerror(errno)));
      }
      if (pid == 0) {
        signal(SIGINT, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        close(out[0]);
        close(go[1]);
        for (const Child& c : *children) {
          close(c.out_fd);
          close(c.go_fd);
        }
        RunRank(job, r, out[1], go[0]);
      }
      close(out[1]);
      close(go[0]);
      Child c;
      c.job = j;
      c.pid = pid;
      c.out_fd = out[0];
      c.go_fd = go[1];
      children->push_back(c);
    }
  }
  return absl::OkStatus();
}

int RunBench(int argc, char** argv) {
  absl::StatusOr<BenchConfig> parsed = ParseBenchArgs(argc, argv);
  if (!parsed.ok()) {
    return UsageError("bench", std::string(parsed.status().message()));
  }
  const BenchConfig& cfg = *parsed;

  // A rank that dies must not kill us through a pipe write; an interrupt
  // ends the run but still closes the stream.
  signal(SIGPIPE, SIG_IGN);
  CatchInterrupts();
  fflush(nullptr);
  // Fork every rank before this process touches gRPC.
  std::vector<Child> children;
  if (absl::Status s = ForkRanks(cfg, &children); !s.ok()) {
    KillAll(&children);
    return ServerError("bench", s);
  }

  // Only now: gRPC in this process.
  Connection status_connection = cfg.connection;
  status_connection.timeout = 10;
  Control control(status_connection);
  BenchResult result;
  auto sample = [&](const v1::GetStatusResponse& st) {
    result.server_pid = st.pid();
    result.server_threads = std::max(result.server_threads, st.threads());
    result.server_worker_threads = st.worker_threads();
    result.server_rss_bytes = std::max(result.server_rss_bytes, st.rss_bytes());
    result.server_ring_bytes =
        std::max(result.server_ring_bytes, st.ring_bytes());
  };
  auto finish = [&](int code, const absl::Status& why) {
    KillAll(&children);
    for (Child& c : children) {
      close(c.out_fd);
      close(c.go_fd);
    }
    // Best effort: a stream may not exist when OpenStream failed.
    absl::Status closed;
    for (uint32_t j = 0; j < JobCount(cfg); ++j) {
      absl::Status c = control.CloseStream(JobConfig(cfg, j).loader.stream);
      if (closed.ok()) closed = c;
    }
    if (!why.ok()) return ServerError("bench", why);
    if (!closed.ok()) return ServerError("bench", closed);
    return code;
  };

  // Ready: every rank opened the stream and warmed up.
  const uint64_t ready_deadline =
      MonotonicNanos() + uint64_t((2 * cfg.timeout + 30) * 1e9);
  absl::Status s = Gather(
      children, [](const Child& c) { return c.ready; }, ready_deadline, [] {});
  if (!s.ok()) return finish(kExitServer, s);
  // The daemon's CPU from the start: it fills every job's ring.
  absl::StatusOr<v1::GetStatusResponse> before = control.GetStatus();
  if (!before.ok()) return finish(kExitServer, before.status());
  const double cpu0 = ProcessCpuSeconds(before->pid());
  for (Child& c : children) {
    if (!WriteAll(c.go_fd, "g", 1)) {
      return finish(kExitServer,
                    absl::InternalError(absl::StrCat(
                        "rank ", c.report.rank, " exited before the start")));
    }
  }

  // Timed run; GetStatus every ~200 ms catches the server's largest thread
  // count and RSS while every rank is attached.
  uint64_t last_sample = 0;
  auto tick = [&] {
    const uint64_t now = MonotonicNanos();
    if (now - last_sample < 200'000'000) return;
    last_sample = now;
    absl::StatusOr<v1::GetStatusResponse> st = control.GetStatus();
    if (st.ok()) sample(*st);
  };
  tick();
  // A rank may wait cfg.timeout for each batch; allow for slow runs.
  const uint64_t run_deadline =
      MonotonicNanos() +
      uint64_t(
          std::min(1e18, (cfg.timeout * double(cfg.steps + 2) + 60) * 1e9));
  s = Gather(
      children, [](const Child& c) { return c.reported; }, run_deadline, tick);
  if (!s.ok()) return finish(kExitServer, s);
  const double cpu1 = ProcessCpuSeconds(before->pid());
  absl::StatusOr<v1::GetStatusResponse> st = control.GetStatus();
  if (!st.ok()) return finish(kExitServer, st.status());
  sample(*st);
  if (cpu0 >= 0 && cpu1 >= cpu0 && st->pid() == before->pid()) {
    result.server_cpu_seconds = cpu1 - cpu0;
  }
  std::vector<RankMessage> reports;
  std::vector<JobResult> jobs(JobCount(cfg));
  std::vector<std::vector<RankMessage>> job_reports(jobs.size());
  for (Child& c : children) {
    waitpid(c.pid, nullptr, 0);
    c.pid = -1;
    reports.push_back(c.report);
    job_reports[c.job].push_back(c.report);
  }
  SumReports(reports, &result);
  if (cfg.jobs > 0) {
    for (uint32_t j = 0; j < jobs.size(); ++j) {
      const BenchConfig job = JobConfig(cfg, j);
      jobs[j].stream = job.loader.stream;
      jobs[j].world_size = job.loader.world_size;
      SumReports(job_reports[j], &jobs[j].figures);
      for (const v1::StreamStatus& ss : st->streams()) {
        if (ss.spec().name() == job.loader.stream &&
            (!ss.owner_known() || ss.owner_uid() == getuid())) {
          jobs[j].fills_made = ss.fills_made();
          jobs[j].fills_shared = ss.fills_shared();
        }
      }
    }
    if (cfg.json) {
      printf("%s\n", DumpJson(SweepToJson(cfg, jobs, result)).c_str());
    } else {
      fputs(FormatSweep(cfg, jobs, result).c_str(), stdout);
    }
  } else if (cfg.json) {
    printf("%s\n", DumpJson(BenchToJson(cfg, reports, result)).c_str());
  } else {
    fputs(FormatBench(cfg, reports, result).c_str(), stdout);
  }
  return finish(kExitOk, absl::OkStatus());
}

// A rank's wall time in seconds.
double RankSeconds(const RankMessage& m) {
  return double(m.end_ns - m.start_ns) / 1e9;
}

}  // namespace

Command BenchCommand() { return {"bench", kSummary, kHelp, RunBench}; }

absl::StatusOr<BenchConfig> ParseBenchArgs(int argc, char** argv) {
  std::unique_ptr<CLI::App> app = NewApp("bench");
  ConnectionFlags connection(*app, 60);
  BenchConfig cfg;
  LoaderOptions& o = cfg.loader;
  o.stream = absl::StrCat("bench-", getpid());
  o.world_size = 1;
  o.rank = 0;
  std::string global_s, world_s, seed_s, start_s, slots_s, steps_s, warmup_s;
  std::string jobs_s;
  std::string touch = "page";
  std::vector<std::string> options;
  AddString(*app, "--stream", &o.stream);
  AddString(*app, "--workload", &o.workload);
  AddString(*app, "--data", &o.data);
  AddString(*app, "--split", &o.split);
  CLI::Option* global_f = AddString(*app, "--global-batch-size", &global_s);
  CLI::Option* world_f = AddString(*app, "--world-size", &world_s);
  CLI::Option* seed_f = AddString(*app, "--seed", &seed_s);
  CLI::Option* start_f = AddString(*app, "--start-step", &start_s);
  CLI::Option* slots_f = AddString(*app, "--slots", &slots_s);
  CLI::Option* steps_f = AddString(*app, "--steps", &steps_s);
  CLI::Option* warmup_f = AddString(*app, "--warmup-steps", &warmup_s);
  CLI::Option* jobs_f = AddString(*app, "--jobs", &jobs_s);
  AddString(*app, "--touch", &touch);
  app->add_option("--option", options)->allow_extra_args(false);
  app->add_flag("--json", cfg.json);
  absl::StatusOr<Connection> c = ParseConnection(*app, argc, argv, connection);
  if (!c.ok()) return c.status();
  cfg.connection = *std::move(c);
  if (cfg.connection.credentials != nullptr) {
    return absl::InvalidArgumentError(
        "bench's ranks connect without TLS: run it on the daemon's node, "
        "against its unix socket");
  }
  o.server = cfg.connection.address;
  int64_t world = 1;
  // With --jobs, --world-size may name one world size a job.
  const std::vector<std::string> worlds =
      absl::StrSplit(world_s, ',', absl::SkipEmpty());
  if (worlds.size() > 1) world_s = worlds[0];
  for (absl::Status s : {
           ParseNumberFlag(global_f, "--global-batch-size", global_s,
                           &o.global_batch_size),
           ParseNumberFlag(world_f, "--world-size", world_s, &world),
           ParseNumberFlag(jobs_f, "--jobs", jobs_s, &cfg.jobs),
           ParseNumberFlag(seed_f, "--seed", seed_s, &o.seed),
           ParseNumberFlag(start_f, "--start-step", start_s, &o.start_step),
           ParseNumberFlag(slots_f, "--slots", slots_s, &o.slots),
           ParseNumberFlag(steps_f, "--steps", steps_s, &cfg.steps),
           ParseNumberFlag(warmup_f, "--warmup-steps", warmup_s,
                           &cfg.warmup_steps),
       }) {
    if (!s.ok()) return s;
  }
  if (!Given(global_f) || o.global_batch_size == 0) {
    return absl::InvalidArgumentError("--global-batch-size G is required");
  }
  if (world < 1 || world > 1024) {
    return absl::InvalidArgumentError("--world-size must be 1..1024");
  }
  o.world_size = int(world);
  if (o.global_batch_size % uint64_t(world) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--global-batch-size ", o.global_batch_size,
                     " is not divisible by --world-size ", world));
  }
  if (cfg.steps == 0) return absl::InvalidArgumentError("--steps must be >= 1");
  if (absl::Status s = ParseJobs(worlds, &cfg); !s.ok()) return s;
  absl::StatusOr<std::map<std::string, std::string>> kv =
      ParseKeyValues(options);
  if (!kv.ok()) return kv.status();
  o.options = *std::move(kv);
  if (touch == "page") {
    cfg.touch = Touch::kPage;
  } else if (touch == "all") {
    cfg.touch = Touch::kAll;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("--touch wants page or all, not '", touch, "'"));
  }
  cfg.timeout = cfg.connection.timeout;
  return cfg;
}

void SumReports(const std::vector<RankMessage>& reports, BenchResult* r) {
  uint64_t start = UINT64_MAX, end = 0;
  double wait_sum = 0;
  for (const RankMessage& m : reports) {
    start = std::min(start, m.start_ns);
    end = std::max(end, m.end_ns);
    r->examples += m.examples;
    r->bytes += m.bytes;
    r->rank_batches += m.steps;
    r->ended_early = r->ended_early || m.ended != 0;
    const double secs = RankSeconds(m);
    wait_sum += secs > 0 ? m.wait_seconds / secs : 0;
  }
  r->seconds = reports.empty() ? 0 : double(end - start) / 1e9;
  r->wait_fraction = reports.empty() ? 0 : wait_sum / double(reports.size());
}

Json BenchToJson(const BenchConfig& cfg,
                 const std::vector<RankMessage>& reports,
                 const BenchResult& r) {
  const LoaderOptions& o = cfg.loader;
  const RankMessage& first = reports.at(0);
  const double span = r.seconds > 0 ? r.seconds : 1e-9;
  Json out;
  out["stream"] = o.stream;
  out["workload"] = o.workload;
  out["split"] = o.split;
  out["world_size"] = uint64_t(o.world_size);
  out["global_batch_size"] = o.global_batch_size;
  out["per_rank_batch"] = o.global_batch_size / uint64_t(o.world_size);
  out["slots"] = uint64_t(first.slots);
  out["slot_bytes"] = first.slot_bytes;
  out["steps"] = cfg.steps;
  out["touch"] = cfg.touch == Touch::kPage ? "page" : "all";
  out["ended_early"] = r.ended_early;
  out["seconds"] = r.seconds;
  out["examples"] = r.examples;
  out["bytes"] = r.bytes;
  out["examples_per_s"] = double(r.examples) / span;
  out["bytes_per_s"] = double(r.bytes) / span;
  out["batches_per_s"] = double(r.rank_batches) / double(o.world_size) / span;
  out["rank_batches_per_s"] = double(r.rank_batches) / span;
  out["wait_fraction"] = r.wait_fraction;
  AddServerJson(r, &out);
  Json ranks = Json::array();
  for (const RankMessage& m : reports) {
    const double s = RankSeconds(m);
    Json rank;
    rank["rank"] = uint64_t(m.rank);
    rank["steps"] = m.steps;
    rank["examples"] = m.examples;
    rank["bytes"] = m.bytes;
    rank["seconds"] = s;
    rank["wait_seconds"] = m.wait_seconds;
    rank["wait_fraction"] = s > 0 ? m.wait_seconds / s : 0.0;
    rank["examples_per_s"] = s > 0 ? double(m.examples) / s : 0.0;
    ranks.push_back(std::move(rank));
  }
  out["ranks"] = std::move(ranks);
  return out;
}

std::string FormatBench(const BenchConfig& cfg,
                        const std::vector<RankMessage>& reports,
                        const BenchResult& r) {
  const LoaderOptions& o = cfg.loader;
  const RankMessage& first = reports.at(0);
  const double span = r.seconds > 0 ? r.seconds : 1e-9;
  const std::string options = OptionsSuffix(o.options);
  std::string out = absl::StrFormat(
      "stream %s  workload %s  split %s  global batch %u  world %d  "
      "slots %u x %s%s%s\n",
      Printable(o.stream), Printable(o.workload), Printable(o.split),
      o.global_batch_size, o.world_size, first.slots,
      HumanBytes(double(first.slot_bytes)), options.empty() ? "" : "  options",
      options);
  Table t({"RANK", "STEPS", "EXAMPLES", "BYTES", "SECONDS", "EXAMPLES/S",
           "WAIT_S", "WAIT"});
  t.AlignRight({0, 1, 2, 3, 4, 5, 6, 7});
  for (const RankMessage& m : reports) {
    const double s = RankSeconds(m);
    t.Add({absl::StrCat(m.rank), absl::StrCat(m.steps),
           absl::StrCat(m.examples), HumanBytes(double(m.bytes)),
           absl::StrFormat("%.3f", s),
           absl::StrFormat("%.1f", s > 0 ? double(m.examples) / s : 0.0),
           absl::StrFormat("%.3f", m.wait_seconds),
           absl::StrFormat("%.1f%%", s > 0 ? 100 * m.wait_seconds / s : 0.0)});
  }
  out += t.Render("  ");
  absl::StrAppendFormat(
      &out,
      "\n%.1f examples/s  %.3f GB/s  %.2f batches/s (%.2f rank batches/s)  "
      "wait fraction %.3f  over %.3f s%s\n",
      double(r.examples) / span, double(r.bytes) / span / 1e9,
      double(r.rank_batches) / double(o.world_size) / span,
      double(r.rank_batches) / span, r.wait_fraction, r.seconds,
      r.ended_early ? "  (the stream ended early)" : "");
  out += ServerLine(r);
  return out;
}

}  // namespace batchd::batchctl

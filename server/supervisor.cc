// The supervisor thread; see supervisor.h.
#include "server/supervisor.h"

#include <chrono>
#include <optional>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "base/clock.h"
#include "base/log.h"
#include "server/core_options.h"

namespace batchd {

namespace {

constexpr double kIndexingLogSeconds = 5;

// "indexing wmt lengths 1200/5900 pairs (20%), 300/s, ETA 16 s".
std::string IndexingText(const IndexProgress& p) {
  std::string text = absl::StrCat("indexing ", p.what, " ", p.done, "/",
                                  p.total, " ", p.unit);
  if (p.total > 0) {
    absl::StrAppend(&text, " (", p.done * 100 / p.total, "%)");
  }
  if (p.rate > 0) {
    absl::StrAppend(&text, ", ", uint64_t(p.rate), "/s, ETA ",
                    uint64_t(p.eta_seconds + 0.5), " s");
  }
  return text;
}

}  // namespace

Supervisor::Supervisor(const CoreOptions& options, StreamRegistry& registry,
                       const StatusReporter& status)
    : options_(options),
      registry_(registry),
      status_(status),
      last_throughput_ns_(MonotonicNanos()) {}

absl::Status Supervisor::Start() {
  absl::StatusOr<Thread> t =
      StartThread("the supervisor thread", "", [this] { Loop(); });
  if (!t.ok()) return t.status();
  thread_ = *std::move(t);
  return absl::OkStatus();
}

Supervisor::~Supervisor() { Stop(); }

void Supervisor::Stop() {
  stop_.store(true);
  thread_.Join();
}

void Supervisor::Loop() {
  while (!stop_.load()) {
    for (const std::string& seg : registry_.ReapDeadClients()) {
      Log(LogLevel::kInfo, "client_gone",
          {{"segment", seg}, {"msg", "ring freed; the rank may re-attach"}});
    }
    const uint64_t now = MonotonicNanos();
    if (options_.throughput_log_seconds > 0 &&
        now - last_throughput_ns_ >=
            uint64_t(options_.throughput_log_seconds * 1e9)) {
      LogThroughput(now);
    }
    ReportIndexing(now);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

void Supervisor::ReportIndexing(uint64_t now) {
  const bool log_now =
      now - last_indexing_log_ns_ >= uint64_t(kIndexingLogSeconds * 1e9);
  bool logged = false;
  registry_.ForEachStream([&](const StreamKey& key, const Stream& stream) {
    const std::optional<IndexProgress> p = stream.setup->workload->progress();
    const std::string text = p.has_value() ? IndexingText(*p) : "";
    for (const auto& [rank, rs] : stream.ranks) {
      if (rs.producer != nullptr) rs.producer->ring().SetWaitReason(text);
    }
    if (p.has_value() && log_now) {
      Log(LogLevel::kInfo, "indexing",
          {{"stream", key.second},
           {"owner", DescribeOwner(key.first)},
           {"what", p->what},
           {"done", std::to_string(p->done)},
           {"total", std::to_string(p->total)},
           {"unit", p->unit},
           {"rate", absl::StrCat(uint64_t(p->rate))},
           {"eta_s", absl::StrCat(uint64_t(p->eta_seconds + 0.5))}});
      logged = true;
    }
  });
  if (logged) last_indexing_log_ns_ = now;
}

void Supervisor::LogThroughput(uint64_t now) {
  const double span = double(now - last_throughput_ns_) / 1e9;
  last_throughput_ns_ = now;
  std::map<StreamKey, std::pair<uint64_t, uint64_t>> totals;
  const v1::GetStatusResponse status = status_.Status();
  for (const v1::StreamStatus& st : status.streams()) {
    uint64_t examples = 0, bytes = 0;
    int attached = 0;
    for (const v1::RankStatus& r : st.ranks()) {
      examples += r.examples();
      bytes += r.bytes();
      attached += r.attached();
    }
    const StreamKey key{st.owner_uid(), st.spec().name()};
    totals[key] = {examples, bytes};
    const auto last = last_totals_.find(key);
    const uint64_t de = last == last_totals_.end()
                            ? examples
                            : examples - last->second.first;
    const uint64_t db =
        last == last_totals_.end() ? bytes : bytes - last->second.second;
    Log(LogLevel::kInfo, "throughput",
        {{"stream", st.spec().name()},
         {"owner", DescribeOwner(st.owner_uid())},
         {"attached_ranks", std::to_string(attached)},
         {"examples_per_s", absl::StrCat(int64_t(double(de) / span))},
         {"bytes_per_s", absl::StrCat(int64_t(double(db) / span))},
         {"decode_errors", std::to_string(st.decode_errors())},
         {"skipped", std::to_string(st.skipped_examples())}});
  }
  last_totals_ = std::move(totals);
}

}  // namespace batchd

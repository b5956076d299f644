// batchctl status: one GetStatus as tables or JSON, or --watch: a frame every
// few seconds with the rates between consecutive answers.
#include "tools/batchctl/status.h"

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <ctime>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/preparing.h"
#include "tools/batchctl/commands.h"
#include "tools/batchctl/control.h"
#include "tools/batchctl/interrupt.h"

namespace batchd::batchctl {
namespace {

constexpr char kSummary[] =
    "print the streams, ranks and the server's threads and memory\n"
    "(--watch: redraw every few seconds with the current rates)";

constexpr char kHelp[] =
    R"(Usage: batchctl status [--server ADDR] [--json] [--timeout S]
                       [--watch [SECONDS]]

Prints the daemon's pid, version, uptime, threads (all, and workers),
resident memory (without the rings), ring bytes, the read-ahead budget
and its I/O threads, and whether it is draining, then for every stream its
spec, examples/s and bytes/s (averages since the stream opened), for a
stream read ahead a line of its read-ahead (depth in examples, bytes in
flight and buffered against the stream's share of the budget, hits, reads
workers had to make themselves, failed reads, seconds workers waited for
I/O, steps ahead of decoding: waits and sync reads mean storage is the
limit, a full buffer without them means the CPU is), and a row per rank:
attached, client pid,
produced and consumed step, ring fill of slots, examples and bytes
delivered, seconds the client waited for data and the server waited for
the client (ring full), re-attaches.

  --server ADDR      unix:///path or tcp://host:port
                     (default: $BATCHD_SERVER, else
                     unix:///run/batchd/batchd.sock)
  --json             print the GetStatus response as one JSON object
                     (proto field names; 64-bit numbers as numbers)
  --timeout S        deadline of each call in seconds (default 10)
  --watch [SECONDS]  ask again every SECONDS (default 2) until Ctrl-C and
                     redraw (the screen is cleared when the output is a
                     terminal). Rates are then the current ones: the change
                     of the examples and bytes counters between two
                     consecutive answers over the daemon's time between
                     them, per stream and per rank. A failed call is shown
                     and retried. With --json: one JSON object per line,
                     {"time", "interval_seconds", "status", "rates"}.

Exit codes: 0 ok (with --watch: stopped by Ctrl-C or SIGTERM), 1 the
server failed or could not be reached (with --watch: at the first call),
2 usage error.
)";

// One --watch frame as a JSON line.
Json WatchFrameJson(const absl::StatusOr<v1::GetStatusResponse>& st,
                    const std::optional<Rates>& rates) {
  Json frame;
  frame["time"] = double(time(nullptr));
  frame["interval_seconds"] =
      rates.has_value() ? Json(rates->interval_seconds) : Json(nullptr);
  frame["status"] = st.ok() ? ProtoToJson(*st) : Json(nullptr);
  if (!st.ok()) frame["error"] = std::string(st.status().message());
  frame["rates"] = rates.has_value() ? RatesToJson(*rates) : Json::array();
  return frame;
}

// `status --watch`: one frame every `interval` seconds until interrupted.
int WatchStatus(const StatusArgs& args) {
  const bool tty = isatty(STDOUT_FILENO) != 0;
  Control control(args.connection);
  CatchInterrupts();
  std::optional<v1::GetStatusResponse> prev;
  for (int frame = 0; !Interrupted(); ++frame) {
    absl::StatusOr<v1::GetStatusResponse> st = control.GetStatus();
    // A daemon that is not there at all is an error; one that goes away
    // while watched (a restart) is shown until it answers again.
    if (!st.ok() && frame == 0) return ServerError("status", st.status());
    if (Interrupted()) break;
    std::optional<Rates> rates;
    if (st.ok() && prev.has_value()) rates = CurrentRates(*prev, *st);
    if (args.json) {
      printf("%s\n", DumpJson(WatchFrameJson(st, rates)).c_str());
    } else {
      std::string out = tty ? "\033[H\033[2J" : (frame > 0 ? "\n" : "");
      absl::StrAppendFormat(&out, "Every %.1f s: batchd at %s  %s\n\n",
                            args.interval_seconds,
                            Printable(args.connection.address), UtcNow());
      if (st.ok()) {
        out += FormatStatus(*st, rates.has_value() ? &*rates : nullptr);
        if (!rates.has_value()) {
          out += "\n(current rates from the next frame on)\n";
        }
      } else {
        absl::StrAppend(&out, "error: ", Printable(st.status().message()),
                        "\n");
      }
      fputs(out.c_str(), stdout);
    }
    fflush(stdout);
    if (st.ok()) {
      prev = *std::move(st);
    } else {
      prev.reset();
    }
    if (!SleepUnlessInterrupted(args.interval_seconds)) break;
  }
  return kExitOk;
}

int RunStatus(int argc, char** argv) {
  absl::StatusOr<StatusArgs> args = ParseStatusArgs(argc, argv);
  if (!args.ok()) {
    return UsageError("status", std::string(args.status().message()));
  }
  if (args->watch) return WatchStatus(*args);
  Control control(args->connection);
  absl::StatusOr<v1::GetStatusResponse> st = control.GetStatus();
  if (!st.ok()) return ServerError("status", st.status());
  if (args->json) {
    printf("%s\n", DumpJson(ProtoToJson(*st)).c_str());
  } else {
    fputs(FormatStatus(*st).c_str(), stdout);
  }
  return kExitOk;
}

}  // namespace

Command StatusCommand() { return {"status", kSummary, kHelp, RunStatus}; }

absl::StatusOr<StatusArgs> ParseStatusArgs(int argc, char** argv) {
  std::unique_ptr<CLI::App> app = NewApp("status");
  ConnectionFlags connection(*app, 10);
  StatusArgs args;
  std::string watch;
  app->add_flag("--json", args.json);
  // --watch alone means every 2 s; its value is optional.
  CLI::Option* watch_flag = app->add_option("--watch", watch)->expected(0, 1);
  absl::StatusOr<Connection> c = ParseConnection(*app, argc, argv, connection);
  if (!c.ok()) return c.status();
  args.connection = *std::move(c);
  args.watch = Given(watch_flag);
  if (args.watch && !watch.empty()) {
    double interval;
    if (!absl::SimpleAtod(watch, &interval) || !(interval > 0) ||
        interval > 86400) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--watch wants seconds between 0 and 86400, not '", watch, "'"));
    }
    // Below ~0.1 s the daemon's uptime resolution and gRPC make rates noise.
    args.interval_seconds = std::max(interval, 0.1);
  }
  return args;
}

std::optional<Rates> CurrentRates(const v1::GetStatusResponse& prev,
                                  const v1::GetStatusResponse& cur) {
  const double dt = cur.uptime_seconds() - prev.uptime_seconds();
  if (prev.pid() != cur.pid() || !(dt > 0)) return std::nullopt;
  Rates rates;
  rates.interval_seconds = dt;
  std::map<StreamId, const v1::StreamStatus*> before;
  for (const v1::StreamStatus& s : prev.streams()) before[IdOf(s)] = &s;
  for (const v1::StreamStatus& s : cur.streams()) {
    auto it = before.find(IdOf(s));
    if (it == before.end()) continue;
    std::map<uint32_t, const v1::RankStatus*> ranks_before;
    for (const v1::RankStatus& r : it->second->ranks()) {
      ranks_before[r.rank()] = &r;
    }
    StreamRates sr;
    uint64_t examples = 0, bytes = 0;
    bool went_back = false;
    for (const v1::RankStatus& r : s.ranks()) {
      auto rb = ranks_before.find(r.rank());
      const uint64_t e0 = rb == ranks_before.end() ? 0 : rb->second->examples();
      const uint64_t b0 = rb == ranks_before.end() ? 0 : rb->second->bytes();
      if (r.examples() < e0 || r.bytes() < b0) {
        went_back = true;
        break;
      }
      examples += r.examples() - e0;
      bytes += r.bytes() - b0;
      sr.ranks[r.rank()] = {double(r.examples() - e0) / dt,
                            double(r.bytes() - b0) / dt};
    }
    if (went_back) continue;
    sr.stream = {double(examples) / dt, double(bytes) / dt};
    rates.streams[IdOf(s)] = std::move(sr);
  }
  return rates;
}

std::string FormatReadAhead(const v1::ReadAheadStatus& ra) {
  // Where the time goes: a worker that waited for bytes (io wait) or read
  // them itself (sync reads) says storage is the limit; a full buffer with
  // no waits says decoding is.
  return absl::StrFormat(
      "  read-ahead  depth %u examples  in flight %s  buffered %s of %s  "
      "hits %u  sync reads %u  failed %u  io wait %.2f s  steps ahead "
      "%u-%u\n",
      ra.depth_examples(), HumanBytes(double(ra.bytes_in_flight())),
      HumanBytes(double(ra.bytes_buffered())),
      HumanBytes(double(ra.budget_bytes())), ra.hits(), ra.sync_reads(),
      ra.failed_reads(), ra.io_wait_seconds(), ra.min_steps_ahead(),
      ra.max_steps_ahead());
}

StreamId IdOf(const v1::StreamStatus& s) {
  return {s.owner_uid(), s.spec().name()};
}

std::string OwnerName(uint32_t uid, bool known) {
  return known ? absl::StrCat(uid) : std::string("tcp");
}

std::string FormatOwners(const v1::GetStatusResponse& st) {
  if (st.uids().empty()) return "";
  // A quota as a text; 0 is no limit.
  auto limit = [](uint64_t q, const std::string& text) {
    return q == 0 ? std::string("no limit") : text;
  };
  const std::string streams =
      limit(st.max_streams_per_uid(), absl::StrCat(st.max_streams_per_uid()));
  const std::string rings =
      limit(st.max_ring_bytes_per_uid(),
            HumanBytes(double(st.max_ring_bytes_per_uid())));
  const std::string models =
      limit(st.max_model_bytes_per_uid(),
            HumanBytes(double(st.max_model_bytes_per_uid())));
  std::string out = absl::StrFormat(
      "\nowners (quotas per uid: streams %s, rings %s, models %s; "
      "administrators exempt)\n",
      streams, rings, models);
  // "3/16" against a quota; the use alone without one or when exempt.
  auto of = [](const std::string& use, uint64_t q, bool exempt,
               const std::string& quota) {
    return exempt || q == 0 ? use : absl::StrCat(use, "/", quota);
  };
  Table t({"UID", "STREAMS", "RINGS", "MODELS", ""});
  t.AlignRight({1, 2, 3});
  for (const v1::UidUsage& u : st.uids()) {
    t.Add({OwnerName(u.uid(), u.known()),
           of(absl::StrCat(u.streams()), st.max_streams_per_uid(), u.exempt(),
              streams),
           of(HumanBytes(double(u.ring_bytes())), st.max_ring_bytes_per_uid(),
              u.exempt(), rings),
           of(HumanBytes(double(u.model_bytes())), st.max_model_bytes_per_uid(),
              u.exempt(), models),
           u.exempt() ? "exempt (administrator)" : ""});
  }
  return out + t.Render("  ");
}

namespace {

// One stream's part of FormatStatus: its line (with its owner), its rates,
// indexing and read-ahead, and a row per rank.
std::string FormatStream(const v1::GetStatusResponse& st,
                         const v1::StreamStatus& s, const Rates* rates) {
  std::string out;
  const v1::StreamSpec& spec = s.spec();
  const std::string options =
      OptionsSuffix({spec.options().begin(), spec.options().end()});
  absl::StrAppendFormat(
      &out,
      "\nstream %s  owner %s  workload %s  data '%s'  split %s  global "
      "batch %u  world %u  seed %u  start step %u  steps/epoch %u%s%s\n",
      Printable(spec.name()), OwnerName(s.owner_uid(), s.owner_known()),
      Printable(spec.workload()), Printable(spec.data()),
      Printable(spec.split()), spec.global_batch_size(), spec.world_size(),
      spec.seed(), spec.start_step(), s.steps_per_epoch(),
      options.empty() ? "" : "  options", options);
  const StreamRates* sr = nullptr;
  if (rates != nullptr) {
    auto it = rates->streams.find(IdOf(s));
    if (it != rates->streams.end()) sr = &it->second;
  }
  if (sr != nullptr) {
    absl::StrAppendFormat(
        &out,
        "  %.1f examples/s  %s/s over the last %.1f s  (since open: %.1f "
        "examples/s)  decode errors %u  skipped %u\n",
        sr->stream.examples_per_second, HumanBytes(sr->stream.bytes_per_second),
        rates->interval_seconds, s.examples_per_second(), s.decode_errors(),
        s.skipped_examples());
  } else {
    absl::StrAppendFormat(&out,
                          "  %.1f examples/s  %s/s%s  decode errors %u  "
                          "skipped %u\n",
                          s.examples_per_second(),
                          HumanBytes(s.bytes_per_second()),
                          rates != nullptr ? " since open" : "",
                          s.decode_errors(), s.skipped_examples());
  }
  if (s.has_indexing()) {
    // "  indexing wmt lengths 1200/5900 pairs (20%) 300/s ETA 16 s"
    const v1::IndexingStatus& ix = s.indexing();
    absl::StrAppendFormat(&out, "  indexing %s %u/%u %s", Printable(ix.what()),
                          ix.done(), ix.total(), Printable(ix.unit()));
    if (ix.total() > 0) {
      absl::StrAppendFormat(&out, " (%u%%)", ix.done() * 100 / ix.total());
    }
    if (ix.rate() > 0) {
      absl::StrAppendFormat(&out, " %.0f/s ETA %.0f s", ix.rate(),
                            ix.eta_seconds());
    }
    out += "\n";
  }
  if (s.has_readahead()) out += FormatReadAhead(s.readahead());
  out += FormatSharing(st, s);
  std::vector<std::string> header = {
      "RANK",          "ATTACHED",      "PID",       "PRODUCED",
      "CONSUMED",      "RING",          "EXAMPLES",  "BYTES",
      "CLIENT_WAIT_S", "SERVER_WAIT_S", "REATTACHES"};
  if (rates != nullptr) header.push_back("EXAMPLES/S");
  Table t(header);
  t.AlignRight({0, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11});
  for (const v1::RankStatus& r : s.ranks()) {
    std::vector<std::string> row = {
        absl::StrCat(r.rank()),
        r.attached() ? "yes" : "no",
        r.client_pid() != 0 ? absl::StrCat(r.client_pid()) : "-",
        absl::StrCat(r.produced_step()),
        absl::StrCat(r.consumed_step()),
        absl::StrCat(r.ring_fill(), "/", r.ring_slots(),
                     r.client_counters_invalid() ? "!" : ""),
        absl::StrCat(r.examples()),
        HumanBytes(double(r.bytes())),
        absl::StrFormat("%.2f", r.client_wait_seconds()),
        absl::StrFormat("%.2f", r.server_wait_seconds()),
        absl::StrCat(r.reattaches())};
    if (rates != nullptr) {
      const Rate* rank_rate = nullptr;
      if (sr != nullptr) {
        auto it = sr->ranks.find(r.rank());
        if (it != sr->ranks.end()) rank_rate = &it->second;
      }
      row.push_back(
          rank_rate != nullptr
              ? absl::StrFormat("%.1f", rank_rate->examples_per_second)
              : "-");
    }
    t.Add(std::move(row));
  }
  out += t.Render("  ");
  if (s.ranks_not_listed() > 0) {
    absl::StrAppendFormat(&out,
                          "  ... %u more ranks not listed (%u attached in "
                          "all; %u examples written in all)\n",
                          s.ranks_not_listed(), s.attached_ranks(),
                          s.examples());
  }
  for (const v1::RankStatus& r : s.ranks()) {
    if (!r.client_counters_invalid()) continue;
    absl::StrAppendFormat(&out,
                          "  ! rank %u: its client wrote impossible counters "
                          "in its ring (shown clamped)\n",
                          r.rank());
  }
  return out;
}

}  // namespace

std::string FormatSharing(const v1::GetStatusResponse& st,
                          const v1::StreamStatus& s) {
  if (s.share_group() == 0) return "";
  // Streams of two owners are never in one group.
  constexpr int kNamed = 8;
  std::vector<std::string> others;
  for (const v1::StreamStatus& o : st.streams()) {
    if (&o == &s || o.share_group() != s.share_group() || IdOf(o) == IdOf(s) ||
        o.attached_ranks() == 0) {
      continue;
    }
    others.push_back(Printable(o.spec().name()));
  }
  const uint64_t all = s.fills_made() + s.fills_shared();
  std::string out = absl::StrFormat(
      "  fills  made %u  shared %u (%.0f%%)", s.fills_made(), s.fills_shared(),
      all > 0 ? 100.0 * double(s.fills_shared()) / double(all) : 0.0);
  if (others.empty()) {
    out += "  no other stream of the same content now\n";
    return out;
  }
  out += "  sharing with ";
  for (size_t i = 0; i < others.size() && i < kNamed; ++i) {
    absl::StrAppend(&out, i > 0 ? ", " : "", others[i]);
  }
  if (others.size() > kNamed) {
    absl::StrAppend(&out, " and ", others.size() - kNamed, " more");
  }
  out += "\n";
  return out;
}

std::string FormatStatus(const v1::GetStatusResponse& st, const Rates* rates) {
  std::string out = absl::StrFormat(
      "batchd %s  pid %u  up %s  threads %u (%u workers)  rss %s  rings %s  "
      "streams %d%s%s%s\n",
      Printable(st.version()), st.pid(), FormatSeconds(st.uptime_seconds()),
      st.threads(), st.worker_threads(), HumanBytes(double(st.rss_bytes())),
      HumanBytes(double(st.ring_bytes())), st.streams_size(),
      st.readahead_bytes() == 0
          ? ""
          : absl::StrFormat("  read-ahead %s (%u I/O threads)",
                            HumanBytes(double(st.readahead_bytes())),
                            st.readahead_threads()),
      st.share_window_bytes() == 0
          ? ""
          : absl::StrFormat("  share window %s of %s (%u groups sharing)",
                            HumanBytes(double(st.share_held_bytes())),
                            HumanBytes(double(st.share_window_bytes())),
                            st.share_groups()),
      st.draining() ? "  DRAINING (no new streams; exits when no rank is "
                      "attached)"
                    : "");
  out += FormatOwners(st);
  for (const v1::Preparing& p : st.preparations()) {
    out += absl::StrFormat("  preparing stream '%s' of uid %u: %s\n",
                           Printable(p.stream()), p.owner_uid(),
                           Printable(DescribePreparing(p)));
  }
  for (const v1::StreamStatus& s : st.streams()) {
    out += FormatStream(st, s, rates);
  }
  return out;
}

Json RatesToJson(const Rates& rates) {
  Json out = Json::array();
  for (const auto& [id, sr] : rates.streams) {
    Json stream;
    stream["stream"] = id.second;
    stream["owner_uid"] = uint64_t(id.first);
    stream["examples_per_second"] = sr.stream.examples_per_second;
    stream["bytes_per_second"] = sr.stream.bytes_per_second;
    Json ranks = Json::array();
    for (const auto& [rank, r] : sr.ranks) {
      Json rank_json;
      rank_json["rank"] = uint64_t(rank);
      rank_json["examples_per_second"] = r.examples_per_second;
      rank_json["bytes_per_second"] = r.bytes_per_second;
      ranks.push_back(std::move(rank_json));
    }
    stream["ranks"] = std::move(ranks);
    out.push_back(std::move(stream));
  }
  return out;
}

}  // namespace batchd::batchctl

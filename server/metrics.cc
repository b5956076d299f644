// Prometheus exposition and its HTTP endpoint; see metrics.h.
#include "server/metrics.h"

#include <civetweb.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "server/readahead.h"

namespace batchd {

namespace {

// Label values escape backslash, quote and newline.
std::string Label(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out += '\\';
    out += c == '\n' ? 'n' : c;
  }
  return out;
}

// A stream's labels: streams are keyed by owner and name, so both.
std::string StreamLabels(const v1::StreamStatus& st) {
  return absl::StrCat("stream=\"", Label(st.spec().name()), "\",owner=\"",
                      st.owner_known() ? absl::StrCat(st.owner_uid()) : "tcp",
                      "\"");
}

struct Family {
  const char* name;
  const char* type;
  const char* help;
};

void AppendFamily(std::string* out, const Family& f) {
  absl::StrAppend(out, "# HELP ", f.name, " ", f.help, "\n# TYPE ", f.name,
                  " ", f.type, "\n");
}

void AppendSample(std::string* out, const char* name,
                  const std::string& labels, double value) {
  absl::StrAppend(out, name, labels.empty() ? "" : "{", labels,
                  labels.empty() ? "" : "}", " ",
                  absl::StrFormat("%.17g", value), "\n");
}

// Per stream: is storage (io wait, depth at the budget) or the CPU the
// limit? `streams_ra` holds the figures of s.streams(), in order.
void AppendReadAhead(const v1::GetStatusResponse& s,
                     const std::vector<ReadAheadStats>& streams_ra,
                     std::string* out) {
  const Family readahead[] = {
      {"batchd_readahead_depth_examples", "gauge",
       "Examples read ahead of decoding (buffered or in flight)."},
      {"batchd_readahead_in_flight_bytes", "gauge",
       "Bytes of reads ahead under way (estimated)."},
      {"batchd_readahead_buffered_bytes", "gauge",
       "Bytes read ahead, not yet decoded."},
      {"batchd_readahead_reads_total", "counter", "Reads issued ahead."},
      {"batchd_readahead_hits_total", "counter",
       "Examples decoded from bytes read ahead."},
      {"batchd_readahead_sync_reads_total", "counter",
       "Examples the workers read themselves."},
      {"batchd_io_wait_seconds_total", "counter",
       "Time workers waited for stored bytes."},
      {"batchd_readahead_on_demand_examples", "gauge",
       "Examples the workers asked for that were not read ahead (in flight "
       "or kept for their batch)."},
      {"batchd_readahead_oldest_read_seconds", "gauge",
       "Age of the stream's oldest read in flight (a stalled mount grows "
       "it until --read-stall-seconds fails the stream)."},
      {"batchd_readahead_inline_reads_total", "counter",
       "Examples the workers read inline, while the stream's reads returned "
       "at once (nothing read ahead)."},
      {"batchd_readahead_copies_total", "counter",
       "Reads ahead served from a file's bytes already buffered (an epoch "
       "that fits the budget), not read again."},
  };
  for (size_t k = 0; k < sizeof(readahead) / sizeof(readahead[0]); ++k) {
    AppendFamily(out, readahead[k]);
    for (int i = 0; i < s.streams_size(); ++i) {
      const v1::StreamStatus& st = s.streams(i);
      const ReadAheadStats ra = size_t(i) < streams_ra.size()
                                    ? streams_ra[size_t(i)]
                                    : ReadAheadStats();
      const double values[] = {double(ra.depth_examples),
                               double(ra.bytes_in_flight),
                               double(ra.bytes_buffered),
                               double(ra.reads_issued),
                               double(ra.hits),
                               double(ra.sync_reads),
                               double(ra.io_wait_ns) / 1e9,
                               double(ra.on_demand_examples),
                               ra.oldest_read_seconds,
                               double(ra.inline_reads),
                               double(ra.copies)};
      AppendSample(out, readahead[k].name, StreamLabels(st), values[k]);
    }
  }
}

}  // namespace

std::string PrometheusText(const v1::GetStatusResponse& s,
                           const std::vector<ReadAheadStats>& streams_ra) {
  std::string out;
  auto family = [&](const Family& f) { AppendFamily(&out, f); };
  auto sample = [&](const char* name, const std::string& labels,
                    double value) { AppendSample(&out, name, labels, value); };
  family({"batchd_threads", "gauge", "Threads of the server process."});
  sample("batchd_threads", "", s.threads());
  family({"batchd_worker_threads", "gauge", "Worker pool size."});
  sample("batchd_worker_threads", "", s.worker_threads());
  family({"batchd_rss_bytes", "gauge",
          "Resident bytes of the server, without the rings."});
  sample("batchd_rss_bytes", "", double(s.rss_bytes()));
  family({"batchd_ring_bytes", "gauge", "Bytes of all attached rings."});
  sample("batchd_ring_bytes", "", double(s.ring_bytes()));
  family({"batchd_streams", "gauge", "Streams served."});
  sample("batchd_streams", "", double(s.streams_size()));
  family({"batchd_uptime_seconds", "gauge", "Seconds since start."});
  sample("batchd_uptime_seconds", "", s.uptime_seconds());
  family({"batchd_client_counters_invalid_total", "counter",
          "Rings whose client wrote an impossible counter (shown "
          "clamped)."});
  sample("batchd_client_counters_invalid_total", "",
         double(s.client_counters_invalid()));

  const Family per_rank[] = {
      {"batchd_examples_total", "counter", "Examples written to the ring."},
      {"batchd_bytes_total", "counter", "Batch bytes written to the ring."},
      {"batchd_ring_fill", "gauge", "Published slots not yet released."},
      {"batchd_ring_slots", "gauge", "Slots of the ring."},
      {"batchd_produced_step", "gauge", "Next step to publish."},
      {"batchd_consumed_step", "gauge", "Steps released by the rank."},
      {"batchd_data_wait_seconds_total", "counter",
       "Time the rank waited for data."},
      {"batchd_server_wait_seconds_total", "counter",
       "Time the server waited on a full ring."},
      {"batchd_rank_attached", "gauge", "1 while a client is attached."},
  };
  // Rank samples for at most kMaxRankRows ranks of the status's rows (each
  // stream's attached ranks come first), so that the body follows what is
  // attached and stays bounded whatever world sizes callers asked for.
  uint64_t ranks_not_exported = 0;
  {
    uint64_t rows = 0;
    for (const v1::StreamStatus& st : s.streams()) {
      const uint64_t all = uint64_t(st.ranks_size()) + st.ranks_not_listed();
      const uint64_t kept = std::min<uint64_t>(
          st.ranks_size(), rows < kMaxRankRows ? kMaxRankRows - rows : 0);
      rows += kept;
      ranks_not_exported += all - kept;
    }
  }
  for (size_t k = 0; k < sizeof(per_rank) / sizeof(per_rank[0]); ++k) {
    family(per_rank[k]);
    uint64_t rows = 0;
    for (const v1::StreamStatus& st : s.streams()) {
      for (const v1::RankStatus& r : st.ranks()) {
        if (rows++ >= kMaxRankRows) break;
        const std::string labels =
            absl::StrCat(StreamLabels(st), ",rank=\"", r.rank(), "\"");
        const double values[] = {double(r.examples()),
                                 double(r.bytes()),
                                 double(r.ring_fill()),
                                 double(r.ring_slots()),
                                 double(r.produced_step()),
                                 double(r.consumed_step()),
                                 r.client_wait_seconds(),
                                 r.server_wait_seconds(),
                                 r.attached() ? 1.0 : 0.0};
        sample(per_rank[k].name, labels, values[k]);
      }
    }
  }
  family({"batchd_ranks_not_exported", "gauge",
          "Ranks whose samples this scrape leaves out (beyond the rows "
          "it exports); their streams' totals count them."});
  sample("batchd_ranks_not_exported", "", double(ranks_not_exported));
  const Family per_stream[] = {
      {"batchd_stream_attached_ranks", "gauge",
       "Ranks of the stream attached now."},
      {"batchd_stream_examples_total", "counter",
       "Examples written to the stream's rings, every rank's."},
      {"batchd_decode_errors_total", "counter",
       "Examples that failed to decode (substituted or failed)."},
      {"batchd_skipped_examples_total", "counter",
       "Examples skipped (e.g. too long)."},
      {"batchd_fills_made_total", "counter",
       "Items the stream's workers filled (decoded) themselves."},
      {"batchd_fills_shared_total", "counter",
       "Items taken over from the fill another stream made of them "
       "(streams of the same content share fills)."},
  };
  for (size_t k = 0; k < sizeof(per_stream) / sizeof(per_stream[0]); ++k) {
    family(per_stream[k]);
    for (const v1::StreamStatus& st : s.streams()) {
      const double values[] = {
          double(st.attached_ranks()), double(st.examples()),
          double(st.decode_errors()),  double(st.skipped_examples()),
          double(st.fills_made()),     double(st.fills_shared())};
      sample(per_stream[k].name, StreamLabels(st), values[k]);
    }
  }
  family({"batchd_share_window_bytes", "gauge",
          "Bytes of fills kept for streams that share them (at most the "
          "window)."});
  sample("batchd_share_window_bytes", "", double(s.share_held_bytes()));
  family({"batchd_share_window_budget_bytes", "gauge",
          "The window's bound (--share-window-bytes; 0: no sharing)."});
  sample("batchd_share_window_budget_bytes", "",
         double(s.share_window_bytes()));
  family({"batchd_share_groups", "gauge",
          "Groups of two streams or more sharing fills now."});
  sample("batchd_share_groups", "", double(s.share_groups()));
  family({"batchd_readahead_budget_bytes", "gauge",
          "Bytes the read-ahead may hold over all streams (0: off)."});
  sample("batchd_readahead_budget_bytes", "", double(s.readahead_bytes()));
  AppendReadAhead(s, streams_ra, &out);
  return out;
}

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(
    const std::string& listen, const ControlPlane& core) {
  mg_init_library(0);
  std::unique_ptr<MetricsServer> server(new MetricsServer(core));
  // Each connection holds a civetweb thread until its request is read and
  // answered: enough threads that a few peers who send slowly (or not at
  // all) leave the others free, and a bound on how long one may take.
  const std::string threads = std::to_string(kThreads);
  const std::string timeout = std::to_string(kRequestTimeoutMs);
  const char* options[] = {"listening_ports",    listen.c_str(),
                           "num_threads",        threads.c_str(),
                           "request_timeout_ms", timeout.c_str(),
                           "linger_timeout_ms",  "0",
                           "enable_keep_alive",  "no",
                           nullptr};
  mg_callbacks callbacks{};
  server->ctx_ = mg_start(&callbacks, server.get(), options);
  if (server->ctx_ == nullptr) {
    return absl::UnavailableError(absl::StrCat(
        "cannot serve metrics on ", listen, " (in use, or a bad address)"));
  }
  mg_set_request_handler(server->ctx_, "/metrics", &MetricsServer::Handle,
                         server.get());
  return server;
}

MetricsServer::~MetricsServer() {
  if (ctx_ != nullptr) mg_stop(ctx_);
}

int MetricsServer::Handle(mg_connection* conn, void* self) {
  MetricsServer& server = *static_cast<MetricsServer*>(self);
  // Scrapes building at once are bounded: each holds a status snapshot and
  // its text, and a crowd of scrapers must not multiply that.
  if (server.scrapes_.fetch_add(1) >= kMaxScrapes) {
    server.scrapes_.fetch_sub(1);
    static const char kBusy[] =
        "batchd is answering other scrapes; try again\n";
    mg_printf(conn,
              "HTTP/1.1 503 Service Unavailable\r\n"
              "Content-Type: text/plain; charset=utf-8\r\nRetry-After: 1\r\n"
              "Content-Length: %zu\r\nConnection: close\r\n\r\n",
              sizeof(kBusy) - 1);
    mg_write(conn, kBusy, sizeof(kBusy) - 1);
    return 503;
  }
  std::string body;
  {
    std::vector<ReadAheadStats> readahead;
    const v1::GetStatusResponse status = server.core_.GetStatus(&readahead);
    body = PrometheusText(status, readahead);
  }
  mg_printf(conn,
            "HTTP/1.1 200 OK\r\n"
            "Content-Type: text/plain; version=0.0.4; charset=utf-8\r\n"
            "Content-Length: %zu\r\nConnection: close\r\n\r\n",
            body.size());
  mg_write(conn, body.data(), body.size());
  server.scrapes_.fetch_sub(1);
  return 200;
}

}  // namespace batchd

// Opening a rank's stream; see stream_open.h.
#include "client/stream_open.h"

#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <optional>
#include <thread>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/address.h"
#include "base/clock.h"
#include "batchd/v1/batchd.grpc.pb.h"
#include "batchd/version.h"
#include "client/daemon_peer.h"
#include "client/preparing.h"

namespace batchd {
namespace {

double Seconds(uint64_t ns) { return double(ns) / 1e9; }

// The spec of `o` with its start (start_step, start_cursor).
void FillSpec(const LoaderOptions& o, v1::StreamSpec* spec) {
  spec->set_name(o.stream);
  spec->set_workload(o.workload);
  spec->set_data(o.data);
  spec->set_split(o.split);
  spec->set_global_batch_size(o.global_batch_size);
  spec->set_world_size(uint32_t(o.world_size));
  spec->set_seed(o.seed);
  spec->set_start_step(o.start_step);
  if (o.has_start_cursor) {
    v1::Cursor* c = spec->mutable_start_cursor();
    c->set_epoch(o.start_cursor[0]);
    c->set_window(o.start_cursor[1]);
    c->set_row(o.start_cursor[2]);
    if (o.has_start_cursor_step) c->set_step(o.start_cursor_step);
  }
  spec->set_slots(o.slots);
  for (const auto& [k, v] : o.options) (*spec->mutable_options())[k] = v;
}

// The channel of one OpenStream call. A daemon that restarts drops the
// connection or refuses it for a moment, and gRPC waits its reconnect
// backoff (1 s, then 1.6 s, ...) before it tries again: with 100 ms at
// first and 1 s at most, a rank reaches a restarted daemon within a tenth
// of a second of its socket accepting. Its own subchannel pool: the
// process-wide one would hand a new channel a connection of an earlier one
// that is still waiting out its backoff.
std::shared_ptr<grpc::Channel> OpenStreamChannel(const std::string& server) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  return grpc::CreateCustomChannel(ParseAddress(server).grpc_target,
                                   grpc::InsecureChannelCredentials(), args);
}

// OpenStream for rank o.rank, beginning at `resume` when given. The channel
// lives only for this call: trainers fork (DataLoader workers, launchers)
// and gRPC's threads must not be running then.
absl::StatusOr<v1::OpenStreamResponse> CallOpenStream(const LoaderOptions& o,
                                                      const Position* resume,
                                                      double deadline_seconds) {
  v1::OpenStreamRequest req;
  FillSpec(o, req.mutable_spec());
  req.set_rank(uint32_t(o.rank));
  if (o.owner_uid >= 0) req.set_owner_uid(uint32_t(o.owner_uid));
  req.set_protocol_version(kProtocolVersion);
  req.set_client_version(kBatchdVersion);
  if (resume != nullptr) {
    v1::Resume* r = req.mutable_resume();
    r->set_step(resume->step);
    if (resume->has_cursor) {
      v1::Cursor* c = r->mutable_cursor();
      c->set_epoch(resume->cursor[0]);
      c->set_window(resume->cursor[1]);
      c->set_row(resume->cursor[2]);
      c->set_step(resume->cursor_step);
    }
  }
  auto stub = v1::Batchd::NewStub(OpenStreamChannel(o.server));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() +
                   std::chrono::milliseconds(int64_t(deadline_seconds * 1000)));
  ctx.set_wait_for_ready(true);
  v1::OpenStreamResponse resp;
  grpc::Status s = stub->OpenStream(&ctx, req, &resp);
  if (s.error_code() == grpc::StatusCode::CANCELLED) {
    // This call is never cancelled here: the daemon cancelled it, as one
    // does with the calls it has not answered when it stops (SIGTERM, a
    // restart). Unavailable, so that the rank waits for the next daemon.
    return absl::UnavailableError(absl::StrCat(
        "OpenStream ", o.stream, " rank ", o.rank, ": batchd at ", o.server,
        " cancelled the call (it is stopping?): ", s.error_message()));
  }
  if (!s.ok()) {
    // "Still preparing": its progress comes back as the status's payload.
    const auto& trailers = ctx.GetServerTrailingMetadata();
    if (auto it = trailers.find(kPreparingMetadata);
        it != trailers.end() &&
        s.error_code() == grpc::StatusCode::UNAVAILABLE) {
      v1::Preparing p;
      if (p.ParseFromArray(it->second.data(), int(it->second.size()))) {
        absl::Status still = absl::UnavailableError(
            absl::StrCat("OpenStream ", o.stream, " rank ", o.rank, ": ",
                         s.error_message()));
        still.SetPayload(kPreparingPayload, absl::Cord(p.SerializeAsString()));
        return still;
      }
    }
    const std::string where =
        s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED ||
                s.error_code() == grpc::StatusCode::UNAVAILABLE
            ? absl::StrCat(" (is batchd running at ", o.server, "?)")
            : "";
    return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                        absl::StrCat("OpenStream ", o.stream, " rank ", o.rank,
                                     ": ", s.error_message(), where));
  }
  // A server that checks the request's protocol has refused a mismatch
  // above; one too old to check is caught here (0 there is protocol 1).
  const uint32_t server_protocol =
      resp.protocol_version() == 0 ? 1 : resp.protocol_version();
  if (server_protocol != kProtocolVersion) {
    return absl::FailedPreconditionError(absl::StrCat(
        "incompatible batchd protocol: this client (batchd ", kBatchdVersion,
        ") speaks protocol ", kProtocolVersion, " but the server at ", o.server,
        " (",
        resp.server_version().empty() ? "an older release"
                                      : "batchd " + resp.server_version(),
        ", pid ", resp.server_pid(), ") speaks protocol ", server_protocol,
        "; install the client of the server's release"));
  }
  return resp;
}

// The uids a ring of the daemon at o.server may belong to: the one pinned
// by an earlier attach of this Loader (a daemon that restarts is the same
// uid, and one that is not, e.g. another user's batchd on a TCP port freed
// by a crash, is refused); else the daemon's uid as the kernel names it on
// a unix socket; else (TCP: no peer to ask) root, this process's uid and
// server_uid.
RingReader::Options RingOwners(const LoaderOptions& o, int64_t daemon_uid,
                               int64_t pinned_uid) {
  RingReader::Options ro;
  ro.server_stale_seconds = o.server_stale_seconds;
  if (pinned_uid >= 0) {
    ro.owner_uid = pinned_uid;
  } else if (daemon_uid >= 0) {
    ro.owner_uid = daemon_uid;
  } else {
    ro.owner_uids = {0, uint32_t(geteuid())};
    if (o.server_uid >= 0) ro.owner_uids.push_back(uint32_t(o.server_uid));
  }
  return ro;
}

// The ring is the one asked for: its header names this stream, rank and
// world size (a daemon that answers with another ring's name, even one of
// an owner this client trusts, is refused).
absl::Status CheckRingIsOurs(const LoaderOptions& o, const std::string& name,
                             const RingReader& r) {
  const shm::RingHeader* h = r.header();
  const std::string stream(h->stream_name,
                           strnlen(h->stream_name, sizeof(h->stream_name)));
  const std::string want = o.stream.substr(0, sizeof(h->stream_name) - 1);
  if (stream != want || h->rank != uint32_t(o.rank) ||
      h->world_size != uint32_t(o.world_size)) {
    return absl::PermissionDeniedError(
        absl::StrCat("ring ", name, " is rank ", h->rank, " of ", h->world_size,
                     " of stream '", stream, "', not rank ", o.rank, " of ",
                     o.world_size, " of stream '", o.stream,
                     "' that this Loader asked for: refused (the daemon at ",
                     o.server, " answered with another ring)"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status PreparingWatch::Update(const absl::Status& answer) {
  const std::optional<v1::Preparing> p = PreparingOf(answer);
  if (!p.has_value()) return answer;
  const uint64_t now = MonotonicNanos();
  const bool moved = !seen_ || p->steps() != last_.steps() ||
                     p->done() != last_.done() || p->what() != last_.what() ||
                     p->queued() != last_.queued();
  if (moved) progress_ns_ = now;
  const double still = Seconds(now - progress_ns_);
  if (o_.stall_timeout_seconds >= 0 && still >= o_.stall_timeout_seconds) {
    return absl::DeadlineExceededError(absl::StrFormat(
        "OpenStream %s rank %d: batchd at %s is preparing the stream (%s), "
        "but that made no progress for %.0f s (stall_timeout)",
        o_.stream, o_.rank, o_.server, DescribePreparing(*p), still));
  }
  // The first answer, then one line every kLogSeconds.
  constexpr double kLogSeconds = 10;
  if (!seen_ || Seconds(now - logged_ns_) >= kLogSeconds) {
    fprintf(stderr, "batchd: stream %s rank %d: batchd is preparing it: %s\n",
            o_.stream.c_str(), o_.rank, DescribePreparing(*p).c_str());
    logged_ns_ = now;
  }
  seen_ = true;
  last_ = *p;
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<RingReader>> OpenRing(
    const LoaderOptions& o, const Position* resume, double deadline_seconds,
    v1::OpenStreamResponse* resp, int64_t* pinned_uid) {
  absl::StatusOr<int64_t> uid = TrustedDaemonUid(o.server, o.server_uid);
  if (!uid.ok()) return uid.status();
  if (*pinned_uid >= 0 && *uid >= 0 && *uid != *pinned_uid) {
    return absl::PermissionDeniedError(absl::StrCat(
        "the daemon at ", o.server, " now runs as uid ", *uid, ", not as uid ",
        *pinned_uid, " that served stream ", o.stream,
        " until it stopped: refused (another user's daemon may have taken "
        "its place)"));
  }
  absl::StatusOr<v1::OpenStreamResponse> r =
      CallOpenStream(o, resume, deadline_seconds);
  if (!r.ok()) return r.status();
  *resp = *std::move(r);
  const RingReader::Options ro = RingOwners(o, *uid, *pinned_uid);
  absl::StatusOr<std::unique_ptr<RingReader>> reader =
      RingReader::Attach(resp->segment(), ro);
  if (absl::IsNotFound(reader.status())) {
    // The daemon that answered stopped before the ring was mapped (an
    // exiting daemon unlinks its rings, a restarted one removes a dead
    // one's): the daemon that follows opens it again.
    return absl::UnavailableError(absl::StrCat(
        "the ring batchd (pid ", resp->server_pid(),
        ") opened is gone before it was mapped (the daemon stopped?): ",
        reader.status().message()));
  }
  if (!reader.ok()) return reader;
  if (absl::Status s = CheckRingIsOurs(o, resp->segment(), **reader); !s.ok()) {
    return s;
  }
  if (*pinned_uid < 0) *pinned_uid = (*reader)->segment_uid();
  return reader;
}

bool MayReconnect(const absl::Status& s) {
  return absl::IsUnavailable(s) || absl::IsDeadlineExceeded(s);
}

// 50 ms for the first 2 s (a restart takes a fraction of a second, and a
// refused connect to a unix socket costs microseconds), then doubling to
// 1 s for one that stays away.
double NextBackoff(double backoff, double elapsed_seconds) {
  return elapsed_seconds < 2.0 ? 0.05 : std::min(1.0, backoff * 2);
}

absl::StatusOr<std::unique_ptr<RingReader>> OpenRingWithin(
    const LoaderOptions& o, double seconds, v1::OpenStreamResponse* resp,
    int64_t* pinned_uid) {
  // Since the daemon last answered "still preparing" (or the first try).
  uint64_t start = MonotonicNanos();
  uint32_t tries = 0;
  PreparingWatch preparing(o);
  for (double backoff = 0.05;;
       backoff = NextBackoff(backoff, Seconds(MonotonicNanos() - start))) {
    ++tries;
    const double left = seconds - Seconds(MonotonicNanos() - start);
    absl::StatusOr<std::unique_ptr<RingReader>> reader =
        OpenRing(o, nullptr, std::max(left, 0.001), resp, pinned_uid);
    if (reader.ok()) return reader;
    if (PreparingOf(reader.status()).has_value()) {
      // The daemon held the call while it prepared: ask again at once,
      // which keeps the preparation wanted.
      if (absl::Status s = preparing.Update(reader.status()); !s.ok()) {
        return s;
      }
      start = MonotonicNanos();
      tries = 0;
      backoff = 0.05;
      continue;
    }
    if (!MayReconnect(reader.status())) return reader;
    const double spent = Seconds(MonotonicNanos() - start);
    if (spent + backoff >= seconds) {
      return absl::Status(
          reader.status().code(),
          absl::StrFormat("%s; tried %u times over %.1f s (connect_timeout)%s",
                          reader.status().message(), tries, spent,
                          preparing.seen() ? " after the daemon answered "
                                             "that it prepared the stream"
                                           : ""));
    }
    std::this_thread::sleep_for(
        std::chrono::milliseconds(int64_t(backoff * 1000)));
  }
}

}  // namespace batchd

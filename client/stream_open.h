// Opening a rank's stream: OpenStream over gRPC, then its ring, checked.
// Tried again while the daemon may be restarting, and waited for while the
// daemon prepares the stream (lists, indexes or counts its data for the
// first time: client/preparing.h) and that preparation progresses.
//
// Thread safety: functions of their arguments; a PreparingWatch is one
// open's own.
#ifndef BATCHD_CLIENT_STREAM_OPEN_H_
#define BATCHD_CLIENT_STREAM_OPEN_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "batchd/loader.h"
#include "batchd/v1/batchd.pb.h"
#include "ring/ring.h"

namespace batchd {

// Where a rank's ring begins: the next step and, for row-packing streams,
// the cursor of a batch at or before it.
struct Position {
  uint64_t step = 0;
  bool has_cursor = false;
  uint64_t cursor[3] = {0, 0, 0};
  uint64_t cursor_step = 0;
};

// The "still preparing" answers (client/preparing.h) of one open of a
// stream: whether to ask again, and what the client is told meanwhile.
class PreparingWatch {
 public:
  explicit PreparingWatch(const LoaderOptions& o) : o_(o) {}

  // For an answer of OpenStream that is not a stream: OK when it says the
  // stream is still being prepared and the preparation progressed (its
  // steps, what or done changed) within o.stall_timeout_seconds, so that
  // the caller asks again; logs its progress to stderr now and then.
  // DEADLINE_EXCEEDED once it made no progress for that long; `answer`
  // itself when it is not a "still preparing" answer.
  absl::Status Update(const absl::Status& answer);
  // Whether an answer was "still preparing".
  bool seen() const { return seen_; }

 private:
  const LoaderOptions& o_;
  bool seen_ = false;
  v1::Preparing last_;
  uint64_t progress_ns_ = 0;  // MonotonicNanos of its last progress
  uint64_t logged_ns_ = 0;    // of the last line on stderr
};

// The daemon behind o.server, checked, then OpenStream (one call, of
// `deadline_seconds`), then its ring, checked. `resume` (may be null):
// where the rank begins instead of the spec's start. `pinned_uid`: the
// ring owner this Loader found first (-1: none yet); set by the first
// attach. A "still preparing" answer is UNAVAILABLE with its v1::Preparing
// as a payload (PreparingOf).
absl::StatusOr<std::unique_ptr<RingReader>> OpenRing(
    const LoaderOptions& o, const Position* resume, double deadline_seconds,
    v1::OpenStreamResponse* resp, int64_t* pinned_uid);

// Errors a restarted daemon may clear: it is gone, not yet back, exiting
// or draining. Anything else (a refused spec, an impostor) is final.
bool MayReconnect(const absl::Status& s);

// The pause before the next try to reach a daemon that may be restarting.
double NextBackoff(double backoff, double elapsed_seconds);

// OpenRing, tried again while the daemon may be restarting (not there yet,
// exiting, gone during the call) until `seconds` have passed since it last
// answered, and asked again at once while it prepares the stream and the
// preparation progresses (PreparingWatch): a first open whose data takes
// minutes to index succeeds.
absl::StatusOr<std::unique_ptr<RingReader>> OpenRingWithin(
    const LoaderOptions& o, double seconds, v1::OpenStreamResponse* resp,
    int64_t* pinned_uid);

}  // namespace batchd

#endif  // BATCHD_CLIENT_STREAM_OPEN_H_

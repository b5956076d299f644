// What the read-ahead's parts share (server/readahead.h): how an example is
// keyed, a lane's order, a source made of functions, and the figures a
// stream reports.
#ifndef BATCHD_SERVER_READAHEAD_TYPES_H_
#define BATCHD_SERVER_READAHEAD_TYPES_H_

#include <cstdint>
#include <functional>
#include <string>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "workloads/fill_context.h"

namespace batchd {

class ReadAheadStream;

// One example of a lane's order.
using ReadAheadKey = ExampleKey;

// An ExampleKey as the read-ahead orders its entries.
using ReadAheadEntryKey = std::tuple<uint64_t, uint64_t, uint64_t, int>;
inline ReadAheadEntryKey EntryKeyOf(const ExampleKey& k) {
  return {k.epoch, k.position, k.id, int(k.kind)};
}
inline ExampleKey ExampleKeyOf(const ReadAheadEntryKey& k) {
  return {std::get<0>(k), std::get<1>(k), std::get<2>(k),
          ExampleKey::Kind(std::get<3>(k))};
}

// The examples of `step` of one lane, in decode order; false when the lane
// has no such step now (a finite stream ended, or the step is not located
// yet): the lane then asks again after its next Decoding.
using LaneOrderFn =
    std::function<bool(uint64_t step, std::vector<ReadAheadKey>* keys)>;

// A source as functions (tests and tools): example `id`'s bytes and label;
// what its file is, for messages.
using ExampleReadFn = std::function<absl::Status(
    uint64_t id, std::string* bytes, int64_t* label)>;
using ExampleDescribeFn = std::function<std::string(uint64_t id)>;

// Figures of one stream; all counters since the stream began.
struct ReadAheadStats {
  uint64_t depth_examples = 0;      // read ahead (not on demand), buffered or
                                    // in flight, now
  uint64_t on_demand_examples = 0;  // asked for by the workers and not read
                                    // ahead: in flight or kept for their
                                    // item, now (outside the budget)
  uint64_t bytes_in_flight = 0;     // estimated, now
  uint64_t bytes_buffered = 0;      // now
  uint64_t budget_bytes = 0;        // this stream's share, now
  uint64_t max_held_bytes = 0;      // high-water mark of one lane's bytes
  uint64_t max_lane_share = 0;      // the largest share a lane was given
  uint64_t reads_issued = 0;        // reads ahead started
  uint64_t min_steps_ahead = 0;     // of every read issued (0: none issued)
  uint64_t max_steps_ahead = 0;
  uint64_t hits = 0;            // examples decoded from read-ahead bytes
  uint64_t waits = 0;           // ... of which a worker waited for
  uint64_t sync_reads = 0;      // examples not read ahead (read on demand or
                                // inline)
  uint64_t inline_reads = 0;    // ... of which a worker read itself
  uint64_t unlocked_reads = 0;  // ... of which without the read-ahead's lock
                                // (server/readahead_inline.h)
  uint64_t copies = 0;          // reads ahead served from bytes buffered under
                                // another key (the same file), not read again
  uint64_t failed_reads = 0;    // reads that failed (then read again)
  uint64_t io_wait_ns = 0;      // time items waited for bytes
  double oldest_read_seconds = 0;  // age of the oldest read in flight, now
};

}  // namespace batchd

#endif  // BATCHD_SERVER_READAHEAD_TYPES_H_

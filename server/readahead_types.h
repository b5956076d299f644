// What the read-ahead keeps (server/readahead.h): the figures it reports,
// a lane's order, and the entries, streams and lanes with the bytes each
// holds against the budget. The ReadAhead's alone, under its lock.
#ifndef BATCHD_SERVER_READAHEAD_STATE_H_
#define BATCHD_SERVER_READAHEAD_STATE_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "server/readahead_item.h"
#include "workloads/fill_context.h"

namespace batchd {

class ReadAheadStream;

// One example of a lane's order.
using ReadAheadKey = ExampleKey;

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
  uint64_t hits = 0;          // examples decoded from read-ahead bytes
  uint64_t waits = 0;         // ... of which a worker waited for
  uint64_t sync_reads = 0;    // examples not read ahead (read on demand or
                              // inline)
  uint64_t inline_reads = 0;  // ... of which a worker read itself
  uint64_t copies = 0;        // reads ahead served from bytes buffered under
                              // another key (the same file), not read again
  uint64_t failed_reads = 0;  // reads that failed (then read again)
  uint64_t io_wait_ns = 0;    // time items waited for bytes
  double oldest_read_seconds = 0;  // age of the oldest read in flight, now
};

namespace readahead_internal {

using Key = ReadAheadEntryKey;
using LaneId = uint64_t;

struct Entry {
  LaneId lane = 0;
  uint64_t serial = 0;   // which read fills it (a retry is another)
  uint64_t step = 0;     // the step it was read for
  bool demand = false;   // read on demand, not ahead
  bool started = false;  // its read is under way (or done)
  bool done = false;
  bool retried = false;  // failed once and is read again
  bool taken = false;    // held by an item until it completes
  bool counted = false;  // counted as a hit
  uint64_t start_ns = 0;
  absl::Status status;
  std::string bytes;
  int64_t label = 0;
  uint64_t held = 0;                          // bytes counted against the lane
  std::shared_ptr<ReadAheadItem::Wait> wait;  // items waiting for it
};

struct StreamState {
  ReadAheadStream* handle = nullptr;
  std::shared_ptr<const ExampleSource> source;
  std::map<Key, Entry> entries;
  // (id, kind) -> the entries of that file: a read ahead copies a twin's
  // bytes instead of reading them again.
  std::multimap<std::pair<uint64_t, int>, Key> by_file;
  std::deque<Key> demand;  // entries read on demand, not started yet
  std::vector<LaneId> lanes;
  uint64_t bytes_read = 0, reads_done = 0;  // for the mean size
  int in_flight = 0;                        // reads calling the source now
  std::multiset<uint64_t> read_starts;      // when each of them began
  std::multiset<uint64_t> inline_starts;    // inline reads in flight
  // How much the stream's reads have returned at once (ReadAhead::
  // NoteReadTime): up one a read made ahead (or inline) that did, down
  // kSlowReadCost a read that did not; workers read inline from when it
  // reaches kFastReadsForInline until it falls below kLeaveInlineScore.
  uint64_t fast_reads = 0;
  bool reads_inline = false;
  bool removed = false;  // its handle went; reads in flight remain
  ReadAheadStats stats;
};

struct Lane {
  StreamState* stream = nullptr;
  LaneOrderFn order;
  uint64_t decoding = 0;  // latest step handed to workers
  bool any_decoding = false;
  uint64_t first_step = 0;  // where the lane began
  uint64_t next_step = 0;   // the step being issued
  size_t next_index = 0;    // within keys
  std::vector<ReadAheadKey> keys;
  bool have_keys = false;
  bool at_end = false;  // order said false; cleared by Decoding
  uint64_t held = 0;    // bytes buffered + estimated in flight
};

// A read picked to issue.
struct Pick {
  StreamState* stream = nullptr;
  Key key;
  LaneId lane = 0;
  uint64_t step = 0;
  bool demand = false;
};

}  // namespace readahead_internal
}  // namespace batchd

#endif  // BATCHD_SERVER_READAHEAD_STATE_H_

// The read-ahead stage: the sampler is pure arithmetic, so the server knows
// which examples every future batch of every rank needs. ReadAhead issues
// their reads ahead of decoding, on a fixed pool of I/O threads that block in
// the source's own read function (simple, and it works on FUSE and NFS, where
// io_uring would hand the blocking to kernel workers anyway), so storage
// latency hides behind decode work.
//
// Shape:
//   - one ReadAhead per server: the I/O threads and the byte budget;
//   - one ReadAheadStream per stream: the buffer of examples read ahead, keyed
//     by (epoch, position) - unique within a stream - and the stream's read
//     function; it is the ExamplePrefetch the workload's FillItem reads
//     through;
//   - one lane per (stream, rank) producer: the order of that rank's
//     examples (step by step) and the step its workers decode now.
//
// Reads are issued only for steps after the latest step the engine handed to
// the workers of a lane (a claimed step is read by its workers, taking what
// was read ahead and reading the rest themselves), so every buffered example
// is taken exactly once by the worker that decodes it, or dropped with its
// lane. A failed read ahead is never delivered: the worker reads again, so
// errors, counts and substitutes are exactly those of a synchronous read.
//
// Memory: the bytes buffered and in flight are bounded by the budget, split
// evenly between streams and, within a stream, between its lanes (a lane may
// always hold one example while the budget has room, so a file larger than
// its share still goes ahead). An in-flight read is counted at the stream's
// mean example size until it lands, so the bound is exact once the mean is
// known and overshoots by the error of that estimate otherwise.
//
// Threads: the I/O pool's size is fixed at construction. A stream keeps at
// most its even share of the I/O threads busy, so a stream whose storage
// stalls cannot starve another's reads ahead (its workers then read
// synchronously, as without read-ahead).
//
// Thread safety: every public method is thread-safe.
#ifndef BATCHD_SERVER_READAHEAD_H_
#define BATCHD_SERVER_READAHEAD_H_

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "workloads/workload.h"

namespace batchd {

class ReadAhead;

// One example of a lane's order.
using ReadAheadKey = ExampleKey;

// The examples of `step` of one lane, in decode order; false when the lane
// has no such step now (a finite stream ended, or the step is not located
// yet): the lane then asks again after its next Decoding.
using LaneOrderFn =
    std::function<bool(uint64_t step, std::vector<ReadAheadKey>* keys)>;

// Figures of one stream; all counters since the stream began.
struct ReadAheadStats {
  uint64_t depth_examples = 0;   // read ahead, buffered or in flight, now
  uint64_t bytes_in_flight = 0;  // estimated, now
  uint64_t bytes_buffered = 0;   // now
  uint64_t budget_bytes = 0;     // this stream's share, now
  uint64_t max_held_bytes = 0;   // high-water mark of one lane's bytes
  uint64_t max_lane_share = 0;   // the largest share a lane was given
  uint64_t reads_issued = 0;     // reads ahead started
  uint64_t min_steps_ahead = 0;  // of every read issued (0: none issued)
  uint64_t max_steps_ahead = 0;
  uint64_t hits = 0;          // examples decoded from read-ahead bytes
  uint64_t waits = 0;         // ... of which a worker waited for
  uint64_t sync_reads = 0;    // examples workers read themselves
  uint64_t failed_reads = 0;  // reads ahead that failed (then re-read)
  uint64_t io_wait_ns = 0;    // time workers waited for bytes
};

class ReadAheadStream : public ExamplePrefetch {
 public:
  ~ReadAheadStream() override;
  absl::Status Read(uint64_t epoch, uint64_t position, uint64_t id,
                    std::string* bytes, int64_t* label) override;
  ReadAheadStats stats() const;

 private:
  friend class ReadAhead;
  ReadAheadStream(ReadAhead* owner, std::string name, ExampleReadFn read)
      : owner_(owner), name_(std::move(name)), read_(std::move(read)) {}

  ReadAhead* const owner_;
  const std::string name_;
  const ExampleReadFn read_;
};

class ReadAhead {
 public:
  struct Options {
    // Bytes read ahead (buffered and in flight) over all streams; 0 turns
    // read-ahead off. Default: 256 MiB.
    uint64_t budget_bytes = uint64_t(256) << 20;
    // I/O threads; blocking reads in flight at most. Default: 32.
    int io_threads = 32;
  };
  explicit ReadAhead(const Options& options);
  ~ReadAhead();  // stops the I/O threads; streams must be gone by then

  bool enabled() const { return options_.budget_bytes > 0; }
  const Options& options() const { return options_; }
  int io_threads() const { return int(threads_.size()); }

  // A stream's read-ahead over `read`, or null when read-ahead is off or the
  // workload is not read ahead (`read` empty). The ReadAheadStream must
  // outlive its lanes and the workers' Reads.
  std::shared_ptr<ReadAheadStream> AddStream(const std::string& name,
                                             ExampleReadFn read);

  using LaneId = uint64_t;
  // A rank's order; reads start after `first_step` - 1 (the engine reports
  // the steps its workers take with Decoding). Returns 0 for a null stream.
  LaneId AddLane(const std::shared_ptr<ReadAheadStream>& stream,
                 LaneOrderFn order, uint64_t first_step);
  // Drops what the lane read ahead; reads in flight finish and are dropped.
  void RemoveLane(LaneId lane);
  // The lane's workers decode `step` from now on: read ahead after it.
  void Decoding(LaneId lane, uint64_t step);

  // The most bytes all lanes held at once (buffered and in flight): at most
  // the budget.
  uint64_t max_total_held_bytes() const;

  // Test hook: waits until no read is in flight and none can be issued
  // (every lane is full or at its end).
  void WaitIdleForTest();

 private:
  friend class ReadAheadStream;
  struct Entry {
    LaneId lane = 0;
    uint64_t id = 0;
    bool done = false;
    absl::Status status;
    std::string bytes;
    int64_t label = 0;
    uint64_t held = 0;  // bytes counted against the lane
  };
  struct StreamState {
    ReadAheadStream* handle = nullptr;
    std::map<std::pair<uint64_t, uint64_t>, Entry> entries;
    std::vector<LaneId> lanes;
    uint64_t bytes_read = 0, reads_done = 0;  // for the mean size
    int in_flight = 0;  // reads calling handle's function now
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
    uint64_t held = 0;  // bytes buffered + estimated in flight
  };

  void IoLoop();
  // Picks the next read to issue, round-robin over lanes; requires mu_.
  bool NextRead(LaneId* lane_id, ReadAheadKey* key, uint64_t* step);
  uint64_t LaneShare(const Lane& lane) const;      // requires mu_
  uint64_t MeanBytes(const StreamState& s) const;  // requires mu_
  void Release(Lane* lane, Entry* e);              // requires mu_
  void NoteTotal();                                // requires mu_
  void RemoveStream(ReadAheadStream* handle);

  const Options options_;
  mutable std::mutex mu_;
  std::condition_variable work_cv_;  // I/O threads: a read may be issued
  std::condition_variable done_cv_;  // workers: a read landed
  bool stop_ = false;                // guarded by mu_
  std::map<ReadAheadStream*, std::unique_ptr<StreamState>> streams_;  // mu_
  std::map<LaneId, Lane> lanes_;  // guarded by mu_
  LaneId next_lane_ = 1;          // guarded by mu_
  LaneId round_robin_ = 0;        // guarded by mu_
  int in_flight_ = 0;             // guarded by mu_
  uint64_t max_total_held_ = 0;   // guarded by mu_
  std::vector<std::thread> threads_;
};

}  // namespace batchd

#endif  // BATCHD_SERVER_READAHEAD_H_

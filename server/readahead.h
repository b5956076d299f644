// The read-ahead stage: the sampler is pure arithmetic, so the server knows
// which examples every future batch of every rank needs. ReadAhead issues
// their reads ahead of decoding, on a pool of I/O threads that block in the
// source's own read function (simple, and it works on FUSE and NFS, where
// io_uring would hand the blocking to kernel workers anyway), so storage
// latency hides behind decode work.
//
// Shape:
//   - one ReadAhead per server: the I/O threads and the byte budget;
//   - one ReadAheadStream per stream: the buffer of examples read ahead, keyed
//     by (epoch, position, id) - unique within a stream - and the stream's
//     read function; it is the ExamplePrefetch the workload's FillItem reads
//     through;
//   - one lane per (stream, rank) producer: the order of that rank's
//     examples (step by step) and the step its workers decode now.
//
// Reads ahead are issued only for steps after the latest step the engine
// handed to the workers of a lane. What a worker needs and finds neither
// buffered nor in flight (the step it decodes, a substitute for a corrupt
// file, a read ahead that failed) is read on demand, by the same I/O
// threads, before any read ahead of that stream.
//
// Workers never wait for storage. The engine runs each item in a
// ReadAheadItem scope; a Read in that scope whose bytes are not there yet
// asks for them and returns ReadPendingError() at once, the engine puts the
// item back (ReadAheadItem::pending) and serves other work until the bytes
// land, then runs the item again: every read it made before stays with the
// item until it completes (FinishItem), so the next attempt finds them. A
// read that stays pending longer than the engine's deadline fails the
// stream with StallReason. Outside a scope (tests, tools) Read waits, and
// reads synchronously what was not read ahead.
//
// Every read is delivered to the worker as the source reported it: a failed
// read ahead is read once more, on demand, and that result stands, so
// errors, counts and substitutes are exactly those of a synchronous read.
//
// Memory: the bytes buffered and in flight are bounded by the budget, split
// evenly between streams and, within a stream, between its lanes (a lane may
// always hold one example while the budget has room, so a file larger than
// its share still goes ahead). An in-flight read is counted at the stream's
// mean example size until it lands, so the bound is exact once the mean is
// known and overshoots by the error of that estimate otherwise. Reads on
// demand are outside the budget, as a worker's own read would be (a worker
// needs them now): they are bounded by the items in progress, one read
// pending per item, and go when their item completes.
//
// Threads: I/O threads are started when reads are waiting and every thread
// is busy, up to Options::io_threads, and end after kIdleExitSeconds without
// work, so an idle daemon holds none. A stream keeps at most its even share
// of io_threads busy, so a stream whose storage stalls cannot take another
// stream's reads. A read stuck in the kernel keeps its thread; when its
// stream goes, or is over its share since other streams came, another
// thread may take its place (at most io_threads such threads), and Stop
// does not wait for it past its deadline.
//
// Thread safety: every public method is thread-safe.
#ifndef BATCHD_SERVER_READAHEAD_H_
#define BATCHD_SERVER_READAHEAD_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "workloads/workload.h"

namespace batchd {

class ReadAhead;
class ReadAheadStream;

// One example of a lane's order.
using ReadAheadKey = ExampleKey;

// The examples of `step` of one lane, in decode order; false when the lane
// has no such step now (a finite stream ended, or the step is not located
// yet): the lane then asks again after its next Decoding.
using LaneOrderFn =
    std::function<bool(uint64_t step, std::vector<ReadAheadKey>* keys)>;

// What a file of example `id` is, for messages ("/data/train/n01/x.JPEG").
using ExampleDescribeFn = std::function<std::string(uint64_t id)>;

// Figures of one stream; all counters since the stream began.
struct ReadAheadStats {
  uint64_t depth_examples = 0;   // read ahead (not on demand), buffered or
                                 // in flight, now
  uint64_t on_demand_examples = 0;  // asked for by the workers and not read
                                    // ahead: in flight or kept for their
                                    // item, now (outside the budget)
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
  uint64_t sync_reads = 0;    // examples not read ahead (read on demand)
  uint64_t failed_reads = 0;  // reads that failed (then read again)
  uint64_t io_wait_ns = 0;    // time items waited for bytes
  double oldest_read_seconds = 0;  // age of the oldest read in flight, now
};

// One item a worker fills, across the attempts it takes: the reads it made
// (kept until FinishItem) and what it waits for. Owned by the engine, used
// by one thread at a time; not thread-safe.
class ReadAheadItem {
 public:
  // `stream` (null: none) must outlive the item's scopes; `lane` is the
  // rank's lane (demand reads count against it), `step` the step decoded.
  ReadAheadItem(ReadAheadStream* stream, uint64_t lane, uint64_t step)
      : stream_(stream), lane_(lane), step_(step) {}
  ReadAheadItem(const ReadAheadItem&) = delete;
  ReadAheadItem& operator=(const ReadAheadItem&) = delete;

  // Reads of `stream_` on this thread belong to the item while it lives.
  class Scope {
   public:
    explicit Scope(ReadAheadItem* item);
    ~Scope();

   private:
    ReadAheadItem* const previous_;
  };

  // A read of the last attempt found no bytes yet: run the item again
  // once landed() is true.
  bool pending() const { return wait_ != nullptr; }
  // The bytes waited for are there (or will never be: their lane or stream
  // went). True when nothing is pending.
  bool landed() const;
  // When the item began to wait (MonotonicNanos); 0 when not pending.
  uint64_t pending_since_ns() const { return pending_since_ns_; }

 private:
  friend class ReadAhead;
  friend class ReadAheadStream;
  struct Wait {
    std::atomic<bool> landed{false};
  };
  using Key = std::tuple<uint64_t, uint64_t, uint64_t>;

  ReadAheadStream* const stream_;
  const uint64_t lane_;
  const uint64_t step_;
  std::vector<Key> taken_;       // entries this item holds
  Key waiting_for_{};            // the entry of wait_
  std::shared_ptr<Wait> wait_;   // null: nothing pending
  uint64_t pending_since_ns_ = 0;
  uint64_t waited_ns_ = 0;       // over the earlier attempts
};

class ReadAheadStream : public ExamplePrefetch {
 public:
  ~ReadAheadStream() override;
  absl::Status Read(uint64_t epoch, uint64_t position, uint64_t id,
                    std::string* bytes, int64_t* label) override;
  ReadAheadStats stats() const;
  // Why `item` has waited since pending_since_ns(): the read it waits for
  // (or, when that one has not started, the stream's oldest read in
  // flight), the file, and for how long it has not returned.
  std::string StallReason(const ReadAheadItem& item, uint64_t now_ns) const;

 private:
  friend class ReadAhead;
  ReadAheadStream(ReadAhead* owner, std::string name)
      : owner_(owner), name_(std::move(name)) {}
  // Outside an item's scope: waits for a read in flight, reads
  // synchronously what was not read ahead.
  absl::Status ReadBlocking(uint64_t epoch, uint64_t position, uint64_t id,
                            std::string* bytes, int64_t* label);

  ReadAhead* const owner_;
  const std::string name_;
};

class ReadAhead {
 public:
  struct Options {
    // Bytes read ahead (buffered and in flight) over all streams; 0 turns
    // read-ahead off. Default: 256 MiB.
    uint64_t budget_bytes = uint64_t(256) << 20;
    // I/O threads; blocking reads in flight at most (besides the reads
    // stuck in streams that went). Default: 32.
    int io_threads = 32;
  };
  // An idle I/O thread ends after this long without work.
  static constexpr double kIdleExitSeconds = 2.0;
  // A stream that goes waits for its reads in flight, except those that
  // have not returned this long after they began (a stalled mount).
  static constexpr double kRemoveWaitSeconds = 1.0;

  explicit ReadAhead(const Options& options);
  // Stop(), waiting as long as it takes; streams must be gone by then.
  ~ReadAhead();

  bool enabled() const { return options_.budget_bytes > 0; }
  const Options& options() const { return options_; }
  // The most I/O threads (0: off).
  int io_threads() const { return enabled() ? options_.io_threads : 0; }
  // I/O threads running now.
  int live_threads() const;

  // A stream's read-ahead over `read`, or null when read-ahead is off or the
  // workload is not read ahead (`read` empty). When the ReadAheadStream
  // goes it waits for the reads in flight, except those that began more
  // than kRemoveWaitSeconds before (a stalled mount): `read` is kept until
  // their return, so whatever it uses must live as long (hold it in the
  // function). `describe` names example files in StallReason. The
  // ReadAheadStream must outlive its lanes and the workers' Reads.
  std::shared_ptr<ReadAheadStream> AddStream(
      const std::string& name, ExampleReadFn read,
      ExampleDescribeFn describe = nullptr);
  // Starts an I/O thread if none runs; ResourceExhausted (naming the
  // error) when none can be started, so that a stream is refused rather
  // than left without reads.
  absl::Status EnsureThread();

  using LaneId = uint64_t;
  // A rank's order; reads start after `first_step` - 1 (the engine reports
  // the steps its workers take with Decoding). Returns 0 for a null stream.
  LaneId AddLane(const std::shared_ptr<ReadAheadStream>& stream,
                 LaneOrderFn order, uint64_t first_step);
  // Drops what the lane read ahead; reads in flight finish and are dropped.
  void RemoveLane(LaneId lane);
  // The lane's workers decode `step` from now on: read ahead after it.
  void Decoding(LaneId lane, uint64_t step);

  // The item is done (filled, or failed for good): what it read is freed.
  void FinishItem(ReadAheadItem* item);
  // Called, without any lock of the read-ahead held, after a read that an
  // item waits for lands (the engine wakes a worker). Set once, before
  // any item waits; null: none.
  void SetOnLanded(std::function<void()> on_landed);

  // Stops the I/O threads: waits until `deadline_ns` (MonotonicNanos; 0:
  // as long as it takes) for them to end. False when some are still in a
  // read then (stuck in the kernel): the ReadAhead must then never be
  // destroyed, since they will use it when their read returns.
  bool Stop(uint64_t deadline_ns = 0);

  // The most bytes all lanes held at once (buffered and in flight): at most
  // the budget.
  uint64_t max_total_held_bytes() const;

  // Test hook: waits until no read is in flight and none can be issued
  // (every lane is full or at its end, no read on demand waits).
  void WaitIdleForTest();

 private:
  friend class ReadAheadStream;
  using Key = ReadAheadItem::Key;
  struct Entry {
    LaneId lane = 0;
    uint64_t id = 0;
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
    uint64_t held = 0;  // bytes counted against the lane
    std::shared_ptr<ReadAheadItem::Wait> wait;  // items waiting for it
  };
  struct StreamState {
    ReadAheadStream* handle = nullptr;
    ExampleReadFn read;
    ExampleDescribeFn describe;
    std::map<Key, Entry> entries;
    std::deque<Key> demand;  // entries read on demand, not started yet
    std::vector<LaneId> lanes;
    uint64_t bytes_read = 0, reads_done = 0;  // for the mean size
    int in_flight = 0;  // reads calling `read` now
    std::multiset<uint64_t> read_starts;  // when each of them began
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
    uint64_t held = 0;  // bytes buffered + estimated in flight
  };
  // A read picked by NextRead.
  struct Pick {
    StreamState* stream = nullptr;
    Key key;
    LaneId lane = 0;
    uint64_t step = 0;
    bool demand = false;
  };

  void IoLoop(uint64_t thread_id) ABSL_LOCKS_EXCLUDED(mu_);
  // Runs one picked read (mu_ is released while reading).
  void RunRead(const Pick& pick, std::string* bytes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Picks the next read to issue: on demand first, then ahead, round-robin
  // over lanes.
  bool NextRead(Pick* pick) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool NextDemandRead(Pick* pick) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool NextLaneRead(Pick* pick) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  int PerStreamThreads() const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  uint64_t LaneShare(const Lane& lane) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  uint64_t MeanBytes(const StreamState& s) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  void Release(Lane* lane, Entry* e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drops an entry (its bytes, its share, its waiters).
  std::map<Key, Entry>::iterator Erase(StreamState* s,
                                       std::map<Key, Entry>::iterator it)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The entry's waiters may run again; true if there were any.
  bool Land(Entry* e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void NoteTotal() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Wakes one idle I/O thread (all of them with `all`), or starts one when
  // every thread is busy. False when no thread runs.
  bool Wake(bool all) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool StartThread() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CallOnLanded() ABSL_LOCKS_EXCLUDED(mu_, landed_mu_);
  void RemoveStream(ReadAheadStream* handle) ABSL_LOCKS_EXCLUDED(mu_);
  StreamState* StateOf(const ReadAheadStream* handle) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);

  const Options options_;
  mutable absl::Mutex mu_;
  absl::CondVar work_cv_;  // I/O threads: a read may be issued
  absl::CondVar done_cv_;  // waiters: a read landed, a thread ended
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::map<const ReadAheadStream*, std::unique_ptr<StreamState>> streams_
      ABSL_GUARDED_BY(mu_);
  // Removed streams whose reads are still in flight.
  std::vector<std::unique_ptr<StreamState>> removed_ ABSL_GUARDED_BY(mu_);
  std::map<LaneId, Lane> lanes_ ABSL_GUARDED_BY(mu_);
  LaneId next_lane_ ABSL_GUARDED_BY(mu_) = 1;
  LaneId round_robin_ ABSL_GUARDED_BY(mu_) = 0;
  size_t demand_round_robin_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t next_serial_ ABSL_GUARDED_BY(mu_) = 1;
  int in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  int orphaned_ ABSL_GUARDED_BY(mu_) = 0;  // reads in flight of removed streams
  int live_ ABSL_GUARDED_BY(mu_) = 0;      // I/O threads running
  int idle_ ABSL_GUARDED_BY(mu_) = 0;      // ... of which waiting for work
  uint64_t next_thread_id_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<uint64_t, std::thread> threads_ ABSL_GUARDED_BY(mu_);
  std::vector<uint64_t> finished_ ABSL_GUARDED_BY(mu_);  // ended, to join
  uint64_t max_total_held_ ABSL_GUARDED_BY(mu_) = 0;
  std::string thread_error_ ABSL_GUARDED_BY(mu_);  // why the last failed
  absl::Mutex landed_mu_;  // held while on_landed_ runs
  std::function<void()> on_landed_ ABSL_GUARDED_BY(landed_mu_);
};

}  // namespace batchd

#endif  // BATCHD_SERVER_READAHEAD_H_

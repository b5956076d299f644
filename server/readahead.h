// The read-ahead stage: the sampler is pure arithmetic, so the server knows
// which examples every future batch of every rank needs. ReadAhead issues
// their reads ahead of decoding, on a pool of I/O threads that block in the
// source's own read function (simple, and it works on FUSE and NFS, where
// io_uring would hand the blocking to kernel workers anyway), so storage
// latency hides behind decode work.
//
// Shape (one file per job):
//   - readahead.h/.cc: one ReadAhead per server: the streams, their lanes,
//     the I/O threads (started and ended as reads wait, via base/threads.h);
//   - readahead_item.h: one ReadAheadItem per item a worker fills, across
//     its attempts: the reads it holds, what it waits for; it is the
//     ExampleReader behind the item's FillContext (workloads/fill_context.h);
//   - readahead_state.h, readahead_order.cc: lanes and their order, the
//     byte budget and its shares;
//   - readahead_reader.cc: the reads themselves (ahead, on demand, inline),
//     the pending rule, stall reasons and stats.
// One ReadAheadStream per stream: the buffer of examples read ahead, keyed
// by ExampleKey (unique within a stream), and the stream's ExampleSource;
// one lane per (stream, rank) producer: the order of that rank's examples
// (step by step) and the step its workers decode now.
//
// Reads ahead are issued only for steps after the latest step the engine
// handed to the workers of a lane. What a worker needs and finds neither
// buffered nor in flight (the step it decodes, a substitute for a corrupt
// file, a read ahead that failed) is read on demand, by the same I/O
// threads, before any read ahead of that stream.
//
// Workers never wait for slow storage. A Read for an item whose bytes are
// not there yet asks for them and returns ReadPendingError() at once, the
// engine puts the item back (ReadAheadItem::pending) and serves other work
// until the bytes land, then runs the item again: every read it made before
// stays with the item until it completes (FinishItem), so the next attempt
// finds them. A read that stays pending longer than the engine's deadline
// fails the stream with StallReason. Outside an item (tests, tools) Read
// waits, and reads synchronously what was not read ahead.
//
// Read-ahead costs nothing where it buys nothing. While a stream's reads
// return at once (the last kFastReadsForInline reads made ahead each
// either never waited - the reading thread did not give up the CPU, as in a
// read of the page cache, however long a busy machine kept it from running
// - or waited at most Options::inline_read_ns, a brief lock; and no
// reads since waited longer, more than a few), nothing is read ahead for it and a worker reads what it needs
// itself, inline, without the hop to an I/O thread and back; slow reads
// (six close together, or one in four for a while; any inline read in
// flight kInlineStallFactor times inline_read_ns) turn reading ahead back
// on. A stream whose storage answered at once and then
// stalls may thus hold the workers that were in a read at that moment, one
// read each, as it would without read-ahead; the next reads go ahead.
//
// A stream whose epoch fits its budget many times reads each file once: a
// read ahead of an example whose bytes are buffered under another key (the
// same file, an epoch later) copies them instead of reading again.
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
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "base/threads.h"
#include "server/readahead_item.h"
#include "server/readahead_state.h"
#include "workloads/fill_context.h"

namespace batchd {

// A stream's read-ahead. As an ExampleReader (outside any item: tests,
// tools) Read waits for a read in flight and reads synchronously what was
// not read ahead.
class ReadAheadStream : public ExampleReader {
 public:
  ~ReadAheadStream();
  // For `item` (null: outside any item): the bytes of `key` read ahead, or
  // read inline when the stream's reads return at once, or
  // ReadPendingError() once the read is asked for (the pending rule).
  absl::Status Read(ReadAheadItem* item, const ExampleKey& key,
                    std::string* bytes, int64_t* label);
  absl::Status Read(const ExampleKey& key, std::string* bytes,
                    int64_t* label) override {
    return Read(nullptr, key, bytes, label);
  }
  absl::Status Read(uint64_t epoch, uint64_t position, uint64_t id,
                    std::string* bytes, int64_t* label) {
    return Read(nullptr, ExampleKey{epoch, position, id}, bytes, label);
  }
  ReadAheadStats stats() const;
  // An item that would have read `key` got its bytes elsewhere (another
  // stream's fill of it, server/fill_share.h): what was read ahead for it
  // goes now, rather than hold its lane's share until the lane goes.
  void Forgo(const ExampleKey& key);
  // Why `item` has waited since pending_since_ns(): the read it waits for
  // (or, when that one has not started, the stream's oldest read in
  // flight), the file, and for how long it has not returned.
  std::string StallReason(const ReadAheadItem& item, uint64_t now_ns) const;

 private:
  friend class ReadAhead;
  ReadAheadStream(ReadAhead* owner, std::string name)
      : owner_(owner), name_(std::move(name)) {}
  absl::Status ReadBlocking(const ExampleKey& key, std::string* bytes,
                            int64_t* label);

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
    // A read that returns within this long returns "at once": while a
    // stream's reads do, workers read inline and nothing is read ahead for
    // it. 0 (the default here): always read ahead. The daemon sets
    // kDefaultInlineReadNs.
    uint64_t inline_read_ns = 0;
  };
  // The daemon's inline_read_ns: a read of the page cache never waits (or
  // waits for a lock, briefly); a FUSE or network mount's round trip, and
  // a disk's seek, take longer and are better hidden behind decoding.
  static constexpr uint64_t kDefaultInlineReadNs = 50 * 1000;
  // Reads ahead in a row that return at once before workers read inline;
  // what a read that does not costs; below which workers read ahead again:
  // six slow reads close together, or more than one read in four slow for
  // a while (a few, on a busy machine, are noise: a thread that waited for
  // a lock and then for a CPU).
  static constexpr uint64_t kFastReadsForInline = 32;
  static constexpr uint64_t kSlowReadCost = 3;
  static constexpr uint64_t kLeaveInlineScore = 16;
  // An inline read in flight this many times inline_read_ns: the next
  // reads go ahead.
  static constexpr uint64_t kInlineStallFactor = 20;
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

  // A stream's read-ahead over `source`, or null when read-ahead is off or
  // the workload reads nothing (`source` null). When the ReadAheadStream
  // goes it waits for the reads in flight, except those that began more
  // than kRemoveWaitSeconds before (a stalled mount): `source` is kept until
  // their return, so whatever it uses must live as long (hold it in the
  // pointer's owner, e.g. an aliasing shared_ptr of the workload). The
  // ReadAheadStream must outlive its lanes and the workers' Reads.
  std::shared_ptr<ReadAheadStream> AddStream(
      const std::string& name, std::shared_ptr<const ExampleSource> source);
  // The same over functions (tests, tools); `describe` names example files
  // in StallReason.
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
  friend class ReadAheadItem;
  using Key = readahead_internal::Key;
  using Entry = readahead_internal::Entry;
  using StreamState = readahead_internal::StreamState;
  using Lane = readahead_internal::Lane;
  using Pick = readahead_internal::Pick;

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
  // Keeps a buffer that is no longer needed for a later read, or drops it.
  void KeepSpare(std::string* buffer) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void NoteTotal() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Wakes one idle I/O thread (all of them with `all`), or starts one when
  // every thread is busy. False when no thread runs.
  bool Wake(bool all) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool StartIoThread() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether `s`'s reads return at once now (workers read inline).
  bool ReadsInline(const StreamState& s, uint64_t now_ns) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Notes how a read of `s` went: one that waited (its thread gave up the
  // CPU during it: `waited`) longer than inline_read_ns turns reading
  // ahead on; one that did not wait, or not long, returned at once. Only
  // reads made ahead (`ahead`) count towards reading inline, so that a
  // stream reads ahead before it stops.
  void NoteReadTime(StreamState* s, uint64_t ns, bool waited, bool ahead)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Adds an entry (indexed by its file).
  Entry& Insert(StreamState* s, const Key& key)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A buffered twin of `key` (the same file under another key), or null;
  // `*in_flight` (may be null) says whether a twin is being read.
  const Entry* Twin(const StreamState& s, const Key& key,
                    bool* in_flight = nullptr) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
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
  std::map<uint64_t, Thread> threads_ ABSL_GUARDED_BY(mu_);
  std::vector<uint64_t> finished_ ABSL_GUARDED_BY(mu_);  // ended, to join
  uint64_t max_total_held_ ABSL_GUARDED_BY(mu_) = 0;
  // Buffers of entries that went, for the next reads: a read into a buffer
  // of the right size neither allocates, nor faults pages in, nor zeroes
  // them (a volume's slice can be 2.3 MB). At most kSpareBuffers, each at
  // most kMaxSpareBytes.
  std::vector<std::string> spare_ ABSL_GUARDED_BY(mu_);
  std::string thread_error_ ABSL_GUARDED_BY(mu_);  // why the last failed
  absl::Mutex landed_mu_;  // held while on_landed_ runs
  std::function<void()> on_landed_ ABSL_GUARDED_BY(landed_mu_);
};

}  // namespace batchd

#endif  // BATCHD_SERVER_READAHEAD_H_

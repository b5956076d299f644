// The read-ahead stage: the sampler is pure arithmetic, so the server knows
// which examples every future batch of every rank needs. ReadAhead issues
// their reads ahead of decoding, on a pool of I/O threads that block in the
// source's own read function (simple, and it works on FUSE and NFS, where
// io_uring would hand the blocking to kernel workers anyway), so storage
// latency hides behind decode work.
//
// ReadAhead composes three parts, one job each, and reads for them:
//   - ReadAheadLanes (readahead_lanes.h): one lane per (stream, rank)
//     producer, the order of that rank's examples (step by step) and the
//     step its workers decode now; which read ahead comes next; the byte
//     budget and each lane's share;
//   - ReadAheadReader (readahead_reader.h): each stream's entries (read
//     ahead, on demand, in flight), what a worker's read gets (bytes,
//     pending, or a read of its own, inline), when reads return at once,
//     the figures and stall reasons;
//   - ReadAheadIoPool (readahead_pool.h): the I/O threads, started as
//     reads wait and ended when idle, on base/threads.h's ThreadGroup.
// ReadAheadItem (readahead_item.h) is one item a worker fills, across its
// attempts; ReadAheadStream (here) one stream's handle. ReadAhead holds the
// lock that guards the lanes and the reader, and calls the sources without
// it: on an I/O thread, or on the worker (inline).
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
// waits, and reads synchronously what was not read ahead. Once an item was
// handed its bytes (ReadAheadItem::ReadInto), it runs to its end: a
// substitute it then reads is read by the worker (see readahead_item.h).
//
// Read-ahead costs nothing where it buys nothing. While a stream's reads
// return at once (the last kFastReadsForInline reads made ahead each were
// blocked at most Options::inline_read_ns: a read of the page cache runs on
// a CPU, or waits for one on a busy machine, however long; a brief lock;
// readahead_clock.h tells them apart; and no reads since were blocked
// longer, more than a few), nothing is read ahead for it and a worker reads
// what it needs itself, inline, without the hop to an I/O thread and back;
// slow reads (six close together, or one in four for a while; a worker's
// read blocked kInlineStallFactor times inline_read_ns while in flight)
// turn reading ahead back on. A stream whose storage answered at once and
// then stalls may thus hold the workers that were in a read at that moment,
// one read each, as it would without read-ahead; the next reads go ahead.
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

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "server/readahead_item.h"
#include "server/readahead_lanes.h"
#include "server/readahead_pool.h"
#include "server/readahead_reader.h"
#include "server/readahead_types.h"
#include "workloads/fill_context.h"

namespace batchd {

class ReadAhead;

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
  friend class ReadAheadItem;
  ReadAheadStream(ReadAhead* owner, std::string name)
      : owner_(owner), name_(std::move(name)) {}

  ReadAhead* const owner_;
  const std::string name_;
  // Set when added, for the reads without the owner's lock.
  ReadAheadInline* inline_ = nullptr;
  const ExampleSource* source_ = nullptr;
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
    // A read blocked at most this long returns "at once": while a
    // stream's reads do, workers read inline and nothing is read ahead for
    // it. 0 (the default here): always read ahead. The daemon sets
    // kDefaultInlineReadNs.
    uint64_t inline_read_ns = 0;
  };
  // The daemon's inline_read_ns: a read of the page cache is not blocked,
  // or is briefly: for a lock whose holder a busy node keeps from its CPU,
  // or the file system's journal under heavy writes (reads blocked 0.05 to
  // 0.4 ms are common then, and reading them ahead costs more than it
  // hides); a FUSE or network mount's round trip, and a disk's seek, take
  // longer and are better hidden behind decoding.
  static constexpr uint64_t kDefaultInlineReadNs = 500 * 1000;
  // See ReadAheadReader: reads in a row that return at once before workers
  // read inline; the cost of a slow read; the score below which workers
  // read ahead again; a worker's read blocked this many times
  // inline_read_ns while in flight sends the next reads ahead.
  static constexpr uint64_t kFastReadsForInline =
      ReadAheadReader::kFastReadsForInline;
  static constexpr uint64_t kSlowReadCost = ReadAheadReader::kSlowReadCost;
  static constexpr uint64_t kLeaveInlineScore =
      ReadAheadReader::kLeaveInlineScore;
  static constexpr uint64_t kInlineStallFactor =
      ReadAheadReader::kInlineStallFactor;
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
  int live_threads() const { return pool_.live(); }

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

  using LaneId = ReadAheadLanes::LaneId;
  // A rank's order; reads start after `first_step` - 1 (the engine reports
  // the steps its workers take with Decoding). Returns 0 for a null stream.
  LaneId AddLane(const std::shared_ptr<ReadAheadStream>& stream,
                 LaneOrderFn order, uint64_t first_step)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Drops what the lane read ahead; reads in flight finish and are dropped.
  void RemoveLane(LaneId lane) ABSL_LOCKS_EXCLUDED(mu_);
  // The lane's workers decode `step` from now on: read ahead after it.
  void Decoding(LaneId lane, uint64_t step) ABSL_LOCKS_EXCLUDED(mu_);

  // The item is done (filled, or failed for good): what it read is freed.
  void FinishItem(ReadAheadItem* item) ABSL_LOCKS_EXCLUDED(mu_);
  // ReadAheadStream::Forgo.
  void Forgo(ReadAheadStream* stream, const ExampleKey& key)
      ABSL_LOCKS_EXCLUDED(mu_);
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
  uint64_t max_total_held_bytes() const ABSL_LOCKS_EXCLUDED(mu_);

  // Test hook: waits until no read is in flight and none can be issued
  // (every lane is full or at its end, no read on demand waits).
  void WaitIdleForTest() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  friend class ReadAheadStream;
  friend class ReadAheadItem;
  using Pick = ReadAheadReader::Pick;
  using WorkerRead = ReadAheadReader::WorkerRead;

  // A worker's read of `key` for `item` (ReadAheadStream::Read).
  absl::Status ReadForItem(ReadAheadStream* stream, ReadAheadItem* item,
                           const ExampleKey& key, std::string* bytes,
                           int64_t* label) ABSL_LOCKS_EXCLUDED(mu_);
  // ReadAheadItem::ReadInto.
  void ReadInto(ReadAheadItem* item, const std::vector<ExampleKey>& keys,
                std::vector<std::string>* buffers, FillContext* ctx)
      ABSL_LOCKS_EXCLUDED(mu_);
  // A read outside any item: waits for one in flight; reads synchronously
  // what was not read ahead.
  absl::Status ReadOutsideItem(ReadAheadStream* stream, const ExampleKey& key,
                               std::string* bytes, int64_t* label)
      ABSL_LOCKS_EXCLUDED(mu_);
  // A worker's reads without mu_ (ReadAheadInline): `read(i)` reads the
  // i-th of `n`. False, having read nothing, when they go under mu_.
  template <typename ReadFn>
  bool ReadInline(ReadAheadStream* stream, size_t n, const ReadFn& read)
      ABSL_LOCKS_EXCLUDED(mu_);
  // A worker's own read (mu_ is released while reading).
  absl::Status ReadSelf(ReadAheadReader::SelfRead* read, const ExampleKey& key,
                        std::string* bytes, int64_t* label)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // An I/O thread's turn: picks and makes one read (false: none waits).
  bool RunOne(std::string* buffer) ABSL_LOCKS_EXCLUDED(mu_);
  // The next read to issue: on demand first, then ahead, round-robin over
  // lanes.
  bool NextRead(Pick* pick) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Wakes one idle I/O thread (all of them with `all`), or starts one when
  // every thread is busy.
  void Wake(bool all) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CallOnLanded() ABSL_LOCKS_EXCLUDED(mu_, landed_mu_);
  void RemoveStream(ReadAheadStream* stream) ABSL_LOCKS_EXCLUDED(mu_);
  ReadAheadStats Stats(const ReadAheadStream* stream) const
      ABSL_LOCKS_EXCLUDED(mu_);
  std::string StallReason(const ReadAheadStream* stream,
                          const ReadAheadItem& item, uint64_t now_ns) const
      ABSL_LOCKS_EXCLUDED(mu_);

  // Constant after construction.
  const Options options_;

  mutable absl::Mutex mu_;
  absl::CondVar done_cv_;  // a read landed or returned, entries dropped
  ReadAheadLanes lanes_ ABSL_GUARDED_BY(mu_);
  ReadAheadReader reader_ ABSL_GUARDED_BY(mu_);
  // Thread-safe; its lock is taken after mu_.
  ReadAheadIoPool pool_;

  absl::Mutex landed_mu_;  // held while on_landed_ runs
  std::function<void()> on_landed_ ABSL_GUARDED_BY(landed_mu_);
};

}  // namespace batchd

#endif  // BATCHD_SERVER_READAHEAD_H_

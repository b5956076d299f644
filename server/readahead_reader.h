// The read-ahead's reads, stream by stream (server/readahead.h): the
// examples read ahead or on demand and those being read (its entries);
// what a worker's read of an example gets (the bytes, handed over or
// copied; a pending status once the read is asked for; or a read it makes
// itself, inline, while the stream's reads return at once); which read the
// I/O threads make next (on demand first, then the lanes' reads ahead);
// whether a stream's reads return at once; the figures each stream
// reports and why an item waits.
//
// It makes no read itself: it says what to read and takes what was read,
// and the ReadAhead calls the source without its lock.
//
// Thread safety: not thread-safe. The ReadAhead that owns it calls it under
// its lock (a member guarded by that lock).
#ifndef BATCHD_SERVER_READAHEAD_READER_H_
#define BATCHD_SERVER_READAHEAD_READER_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <list>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "server/readahead_clock.h"
#include "server/readahead_inline.h"
#include "server/readahead_item.h"
#include "server/readahead_lanes.h"
#include "server/readahead_types.h"

namespace batchd {

class ReadAheadReader final : public ReadAheadLanes::Streams {
 private:
  struct StreamState;
  struct WorkerReadInFlight;

 public:
  using Key = ReadAheadEntryKey;
  using LaneId = ReadAheadLanes::LaneId;
  using StreamId = ReadAheadLanes::StreamId;

  // Reads ahead in a row that return at once before workers read inline;
  // what a read that does not costs; below which workers read ahead again:
  // six slow reads close together, or more than one read in four slow for
  // a while.
  static constexpr uint64_t kFastReadsForInline = 32;
  static constexpr uint64_t kSlowReadCost = 3;
  static constexpr uint64_t kLeaveInlineScore = 16;
  // A read by a worker blocked this many times inline_read_ns (50 ms for
  // the daemon's: a busy node keeps a lock's holder from its CPU for a
  // few ms, stalled storage stalls for longer): the next reads go ahead.
  static constexpr uint64_t kInlineStallFactor = 100;

  struct Options {
    // A stream keeps at most its even share of these busy.
    int io_threads = 0;
    // A read blocked at most this long returns "at once" (0: never read
    // inline); ReadAhead::Options::inline_read_ns.
    uint64_t inline_read_ns = 0;
  };

  // A read the I/O threads may make next.
  struct Pick {
    StreamId stream = nullptr;
    Key key;
    LaneId lane = 0;
    uint64_t step = 0;
    uint64_t steps_ahead = 0;
    bool demand = false;  // asked for by a worker, not read ahead
  };
  // A read under way on an I/O thread: what it needs without the lock.
  struct Job {
    StreamState* stream = nullptr;
    Key key;
    uint64_t serial = 0;
    uint64_t started_ns = 0;
    bool demand = false;
    const ExampleSource* source = nullptr;
  };
  // A read a worker makes itself, without the lock (WorkerRead::kSelf),
  // between BeginSelfRead and EndSelfRead.
  struct SelfRead {
    const ExampleSource* source = nullptr;
    StreamId stream = nullptr;
    bool demand = false;  // not inline: counts as a read on demand
    bool begun = false;
    ThreadSample start;  // once begun
    std::list<WorkerReadInFlight>::iterator in_flight;
  };
  // What a worker's read of one example gets.
  struct WorkerRead {
    enum Kind {
      kGiven,    // `status`, and the bytes when it is OK
      kPending,  // ReadPendingError(); wake an I/O thread when `queued`
      kSelf,     // the worker reads, `self`
      kWait,     // wait for a read in flight to land, then ask again
    };
    Kind kind = kGiven;
    absl::Status status;
    bool queued = false;
    SelfRead self;
  };

  // `lanes` (the same owner's) outlives the reader.
  ReadAheadReader(const Options& options, ReadAheadLanes* lanes);
  ~ReadAheadReader();

  // ---- streams
  // The stream's path without the lock (it lives while the handle does).
  ReadAheadInline* AddStream(ReadAheadStream* handle,
                             std::shared_ptr<const ExampleSource> source);
  // Nothing more is read on demand for the stream: it goes.
  void Closing(StreamId stream);
  // When the newest read of `stream` in flight began (0: none).
  uint64_t NewestReadStart(StreamId stream) const;
  // The stream goes: its entries are dropped, and its source goes into
  // `*gone` (to be released without the lock: what it holds goes with
  // it), or is kept while reads of it are in flight (a stalled mount).
  // True when items waited for what was dropped.
  bool RemoveStream(StreamId stream,
                    std::shared_ptr<const ExampleSource>* gone);
  // Drops what lane `lane` of `stream` read ahead; true when items waited
  // for it.
  bool DropLane(StreamId stream, LaneId lane);

  // ---- a worker's reads, for its item
  // One example: `*bytes` and `*label` are set for kGiven. Hits are copied
  // while the item may run again, handed over once it may not.
  WorkerRead ForItem(StreamId stream, ReadAheadItem* item, const Key& key,
                     std::string* bytes, int64_t* label, uint64_t now_ns);
  // Every example of an item before FillItem. Pending (kPending, or kWait
  // for none of them) at the first that is not there; else each is given
  // (bytes handed over into (*buffers)[i], unless the key comes again) or
  // read by the worker (kSelf): results[i].
  using WorkerReads = absl::InlinedVector<WorkerRead, 2>;
  using Labels = absl::InlinedVector<int64_t, 2>;
  WorkerRead ForItemAll(StreamId stream, ReadAheadItem* item,
                        const std::vector<ExampleKey>& keys,
                        std::vector<std::string>* buffers, WorkerReads* results,
                        Labels* labels, uint64_t now_ns);
  // A worker's own read (kSelf) begins now, on the calling thread (the
  // first of ForItemAll's, and ForItem's, have begun).
  void BeginSelfRead(SelfRead* read);
  // ... and returned, blocked `blocked_ns`; true when reads go ahead again
  // from now on (wake the I/O threads).
  bool EndSelfRead(const SelfRead& read, uint64_t blocked_ns);
  // A worker's read without the lock (ReadAheadInline) was blocked
  // `blocked_ns`, more than a read that returns at once; true as for
  // EndSelfRead.
  bool NoteSlowInlineRead(StreamId stream, uint64_t blocked_ns);
  // The item is done: what it read is freed; true when budget was freed.
  bool FinishItem(ReadAheadItem* item);
  // An item got the bytes of `key` elsewhere (ReadAheadStream::Forgo):
  // what was read ahead for it, unless an item holds it, is dropped; true
  // when budget was freed.
  bool Forgo(StreamId stream, const Key& key);

  // ---- reads outside any item (tests, tools)
  // Drops what was read for the place of `key` under another id, counts a
  // wait when `key` is in flight; then whether it still is.
  bool InFlight(StreamId stream, const Key& key, bool count_wait);
  // The bytes of `key` read ahead, taken (true); false when there are none
  // or its read failed (the caller reads). `*dropped`: an entry went.
  bool TakeOutsideItem(StreamId stream, const Key& key, std::string* bytes,
                       int64_t* label, bool* dropped);
  // The caller reads synchronously: counted, and the source to read.
  const ExampleSource* SyncRead(StreamId stream);
  void AddIoWait(StreamId stream, uint64_t ns);

  // ---- the I/O threads' reads
  // The oldest read a worker asked for, of a stream with I/O threads to
  // spare, round-robin over streams.
  bool NextDemand(Pick* pick);
  // Starts `pick` (lane reads are charged to their lane). False when it
  // needs no read (a twin's bytes copied); else `*job` is the read to make.
  bool Start(const Pick& pick, Job* job);
  // The read of `job` returned, blocked `blocked_ns`. Sets `*landed` when
  // items waited for it, `*wake_all` when reads go ahead again; `*gone`
  // receives the source of a stream that went once its last read is back.
  void Finish(const Job& job, absl::Status status, std::string* bytes,
              int64_t label, uint64_t blocked_ns, bool* landed, bool* wake_all,
              std::shared_ptr<const ExampleSource>* gone);
  // A buffer for an I/O thread's next read (one an entry no longer needs).
  void LendSpare(std::string* buffer);
  // Reads in flight of streams that went, and beyond their stream's share
  // of threads: threads the pool does not count as busy for new reads.
  int StuckThreads() const;
  // No read in flight and none waits on demand.
  bool Idle() const;

  // Whether `stream`'s reads return at once (nothing is read ahead).
  bool ReadsInline(StreamId stream) const;

  // ---- ReadAheadLanes::Streams
  bool MayReadAhead(StreamId stream) const override;
  uint64_t MeanBytes(StreamId stream) const override;
  Seen Check(StreamId stream, const Key& key) const override;

  // ---- figures
  ReadAheadStats Stats(StreamId stream) const;
  // Why `item` has waited (see ReadAheadStream::StallReason); `io_threads`
  // running, and why the last could not start.
  std::string StallReason(StreamId stream, const ReadAheadItem& item,
                          uint64_t now_ns, int io_threads,
                          const std::string& thread_error) const;

 private:
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
    bool handed = false;   // its bytes went to the item that holds it
    uint64_t start_ns = 0;
    absl::Status status;
    std::string bytes;
    int64_t label = 0;
    uint64_t held = 0;  // bytes counted against the lane
    std::shared_ptr<ReadAheadItem::Wait> wait;  // items waiting for it
  };
  // A read a worker makes itself, in flight.
  struct WorkerReadInFlight {
    ThreadSample start;
    const ThreadClock* clock = nullptr;
    uint64_t next_check_ns = 0;  // when its thread is looked at next
    bool stalled = false;        // ... found blocked too long last time
    // Set by the reading thread, without the lock, once its read returned:
    // it may then wait for the lock (on a busy machine, for a holder kept
    // from its CPU), and that wait is no storage's.
    std::atomic<bool> returned{false};
  };
  struct StreamState {
    std::shared_ptr<const ExampleSource> source;
    std::map<Key, Entry> entries;
    // (id, kind) -> the entries of that file: a read ahead copies a
    // twin's bytes instead of reading them again.
    std::multimap<std::pair<uint64_t, int>, Key> by_file;
    std::deque<Key> demand;  // entries read on demand, not started yet
    uint64_t bytes_read = 0, reads_done = 0;     // for the mean size
    int in_flight = 0;                           // I/O threads reading now
    std::multiset<uint64_t> read_starts;         // when each of them began
    std::list<WorkerReadInFlight> worker_reads;  // workers reading now
    // How much the stream's reads have returned at once (NoteReadTime):
    // up one a read made ahead (or inline) that did, down kSlowReadCost a
    // read that did not; workers read inline from when it reaches
    // kFastReadsForInline until it falls below kLeaveInlineScore.
    uint64_t fast_reads = 0;
    bool reads_inline = false;
    bool removed = false;  // its handle went; reads in flight remain
    ReadAheadStats stats;
    // Open (Reconsider) while workers read inline with nothing read ahead
    // or asked for.
    ReadAheadInline inline_path;
  };

  StreamState* State(StreamId stream) const;
  int PerStreamThreads() const;
  // Whether `s`'s reads return at once (nothing is read ahead for it);
  // whether workers read inline now: its reads return at once and no read
  // of a worker in flight has been blocked too long.
  bool ReadsInline(const StreamState& s) const;
  bool WorkerReadsInline(StreamState& s, uint64_t now_ns);
  // Notes how a read of `s` went: blocked longer than inline_read_ns
  // turns reading ahead on (true when that happens now); blocked less
  // returned at once. Only reads made ahead (`ahead`) count towards
  // reading inline, so that a stream reads ahead before it stops.
  bool NoteReadTime(StreamState* s, uint64_t blocked_ns, bool ahead);
  // Opens or closes `s`'s path without the lock: open while its reads
  // return at once (the score at its top: a read that did not closes it)
  // and it holds no entry.
  void Reconsider(StreamState* s);
  // An item's hold on an entry: kept for it until it completes.
  void TakeFor(ReadAheadItem* item, const Key& key, Entry* e, StreamState* s);
  // A read on demand of `key` for `item` (a new entry, or a failed one
  // read again); then the item waits for it.
  void Demand(StreamState* s, ReadAheadItem* item, const Key& key);
  WorkerRead Pending(StreamState* s, ReadAheadItem* item, const Key& key,
                     bool queued);
  WorkerRead SelfReading(StreamState* s, StreamId stream, bool inline_read);
  // Hands the entry's bytes to `*bytes` (which gives the entry its old
  // buffer, emptied: it holds no bytes of its file now).
  static void HandOver(Entry* e, std::string* bytes);
  Entry& Insert(StreamState* s, const Key& key);
  // A buffered twin of `key` (the same file under another key), or null;
  // `*in_flight` (may be null) says whether a twin is being read.
  const Entry* Twin(const StreamState& s, const Key& key,
                    bool* in_flight = nullptr) const;
  // Drops an entry (its bytes, its share, its waiters).
  std::map<Key, Entry>::iterator Erase(StreamState* s,
                                       std::map<Key, Entry>::iterator it);
  // The entry's waiters may run again; true if there were any.
  static bool Land(Entry* e);
  // Keeps a buffer that is no longer needed for a later read, or drops it.
  void KeepSpare(std::string* buffer);
  void Landed(StreamState* s, const Job& job, absl::Status status,
              std::string* bytes, int64_t label, bool* landed);

  const Options options_;
  ReadAheadLanes* const lanes_;
  std::map<StreamId, std::unique_ptr<StreamState>> streams_;
  // Removed streams whose reads are still in flight.
  std::vector<std::unique_ptr<StreamState>> removed_;
  size_t demand_round_robin_ = 0;
  uint64_t next_serial_ = 1;
  int in_flight_ = 0;
  int orphaned_ = 0;  // reads in flight of removed streams
  // Buffers of entries that went, for the next reads: a read into a buffer
  // of the right size neither allocates, nor faults pages in, nor zeroes
  // them (a volume's slice can be 2.3 MB). At most kSpareBuffers, each at most
  // kMaxSpareBytes.
  std::vector<std::string> spare_;
};

}  // namespace batchd

#endif  // BATCHD_SERVER_READAHEAD_READER_H_

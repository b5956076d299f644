// A stream's reads without the read-ahead's lock: while its reads return
// at once and nothing is read ahead or asked for, a worker reads an item's
// examples itself (as without read-ahead) and takes no lock shared with the
// other workers.
//
// Why: on a busy node the scheduler keeps a lock's holder from its CPU for
// milliseconds; two workers that each took the read-ahead's lock twice an
// example then waited for each other in turns (thousands of sleeps a
// minute, ~9 % of the rate with every core busy) where the same workers
// without read-ahead never wait.
//
// The reader (server/readahead_reader.h) opens and closes the path under
// its lock (Allow); a worker's reads are watched through slots, so that a
// read blocked too long (stalled storage) is seen by the other workers as
// it is on the locked path.
//
// Thread safety: Allow, Check and the slots' check state are the reader's,
// under its lock; Begin, Start, Returned and End are a worker's, without
// it.
#ifndef BATCHD_SERVER_READAHEAD_INLINE_H_
#define BATCHD_SERVER_READAHEAD_INLINE_H_

#include <atomic>
#include <cstdint>

#include "server/readahead_clock.h"

namespace batchd {

class ReadAheadInline {
 public:
  // Workers reading one stream at once that the slots watch; a worker
  // finding none free reads under the lock.
  static constexpr int kSlots = 16;

  // The reader's, under its lock: whether workers may read without it.
  void Allow(bool allowed) {
    allowed_.store(allowed, std::memory_order_release);
  }
  bool allowed() const { return allowed_.load(std::memory_order_acquire); }

  // The reader's, under its lock: a worker's read under the lock begins
  // (+1) or returned (-1). The reader watches those itself.
  void CountLockedRead(int delta) {
    locked_reads_.fetch_add(delta, std::memory_order_release);
  }

  // A worker, without the lock: true and a slot (`*slot`) when it may read
  // without the lock now: the path is open, no worker reads under the lock
  // and no read without it has been under way longer than `bound_ns`. Each
  // read then runs between Start and Returned; End gives the slot back.
  bool Begin(uint64_t now_ns, uint64_t bound_ns, int* slot);
  void Start(int slot, const ThreadClock& clock, const ThreadSample& start);
  void Returned(int slot);
  void End(int slot);
  // Reads made without the lock, in all.
  uint64_t reads() const { return reads_.load(std::memory_order_relaxed); }
  void Count(uint64_t n) { reads_.fetch_add(n, std::memory_order_relaxed); }

  // The reader's, under its lock: whether a read made without the lock
  // has been blocked longer than `bound_ns` (its thread is looked at once
  // the read is older than the bound, then each time its age doubles);
  // and the start of the oldest one under way (0: none).
  bool Stalled(uint64_t now_ns, uint64_t bound_ns);
  uint64_t OldestStart() const;

 private:
  struct alignas(64) Slot {
    std::atomic<bool> claimed{false};
    // The read under way: its start (0: none; published last), the rest
    // of its start sample, and its thread's clock.
    std::atomic<uint64_t> wall_ns{0};
    std::atomic<uint64_t> cpu_ns{0};
    std::atomic<uint64_t> queued_ns{0};
    std::atomic<const ThreadClock*> clock{nullptr};
    // The reader's (under its lock): the read last looked at.
    uint64_t checked_wall_ns = 0;
    uint64_t next_check_ns = 0;
    bool stalled = false;
  };

  std::atomic<bool> allowed_{false};
  std::atomic<int> locked_reads_{0};
  std::atomic<uint64_t> reads_{0};
  Slot slots_[kSlots];
};

}  // namespace batchd

#endif  // BATCHD_SERVER_READAHEAD_INLINE_H_

// A stream's reads without the read-ahead's lock; see readahead_inline.h.
#include "server/readahead_inline.h"

#include <algorithm>

#include "absl/synchronization/mutex.h"

namespace batchd {

bool ReadAheadInline::Begin(uint64_t now_ns, uint64_t bound_ns, int* slot) {
  if (!allowed() || locked_reads_.load(std::memory_order_acquire) != 0) {
    return false;
  }
  *slot = -1;
  for (int i = 0; i < kSlots; ++i) {
    const uint64_t start = slots_[i].wall_ns.load(std::memory_order_acquire);
    // Older than the bound: the locked path looks at its thread.
    if (start != 0 && now_ns > start && now_ns - start > bound_ns) {
      if (*slot >= 0) End(*slot);
      return false;
    }
    bool free = false;
    if (*slot < 0 && slots_[i].claimed.compare_exchange_strong(
                         free, true, std::memory_order_acquire)) {
      *slot = i;
    }
  }
  return *slot >= 0;
}

void ReadAheadInline::Start(int slot, const ThreadClock& clock,
                            const ThreadSample& start) {
  Slot& s = slots_[slot];
  // The slot's last read ended (wall_ns 0) before this one's sample is
  // written: Stalled never takes a mix of two reads for one.
  std::atomic_thread_fence(std::memory_order_release);
  s.cpu_ns.store(start.cpu_ns, std::memory_order_relaxed);
  s.queued_ns.store(start.queued_ns, std::memory_order_relaxed);
  s.clock.store(&clock, std::memory_order_relaxed);
  s.wall_ns.store(std::max<uint64_t>(start.wall_ns, 1),
                  std::memory_order_release);
}

void ReadAheadInline::Returned(int slot) {
  slots_[slot].wall_ns.store(0, std::memory_order_release);
}

void ReadAheadInline::End(int slot) {
  slots_[slot].wall_ns.store(0, std::memory_order_release);
  slots_[slot].claimed.store(false, std::memory_order_release);
}

bool ReadAheadInline::Stalled(uint64_t now_ns, uint64_t bound_ns) {
  bool stalled = false;
  for (Slot& s : slots_) {
    const uint64_t start = s.wall_ns.load(std::memory_order_acquire);
    if (start == 0 || now_ns <= start || now_ns - start <= bound_ns) continue;
    if (s.checked_wall_ns != start) {  // another read than last looked at
      s.checked_wall_ns = start;
      s.next_check_ns = 0;
      s.stalled = false;
    }
    if (now_ns >= s.next_check_ns) {
      // The read's thread may end once its read returned: its clock is
      // used while it cannot, and only if the read is still the one
      // looked at (its start sample read in between is then whole).
      absl::MutexLock lock(&ThreadClock::LifetimeMutex());
      ThreadSample sample;
      sample.wall_ns = start;
      sample.cpu_ns = s.cpu_ns.load(std::memory_order_relaxed);
      sample.queued_ns = s.queued_ns.load(std::memory_order_relaxed);
      const ThreadClock* clock = s.clock.load(std::memory_order_relaxed);
      // The loads above stay before the recheck.
      std::atomic_thread_fence(std::memory_order_acquire);
      if (s.wall_ns.load(std::memory_order_relaxed) != start) continue;
      s.stalled = clock->BlockedNowNs(sample, now_ns) > bound_ns;
      s.next_check_ns = now_ns + (now_ns - start);
    }
    stalled |= s.stalled;
  }
  return stalled;
}

uint64_t ReadAheadInline::OldestStart() const {
  uint64_t oldest = 0;
  for (const Slot& s : slots_) {
    const uint64_t start = s.wall_ns.load(std::memory_order_acquire);
    if (start != 0 && (oldest == 0 || start < oldest)) oldest = start;
  }
  return oldest;
}

}  // namespace batchd

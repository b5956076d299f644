// How long a read kept its thread waiting for storage: what the read-ahead
// (server/readahead.h) asks to tell reads that return at once (the page
// cache: worth reading inline) from reads that wait (a disk's seek, a FUSE
// or network round trip: worth reading ahead).
//
// A read of the page cache runs on a CPU from start to end; on a busy
// machine it may also wait, runnable, for a CPU, and neither is storage's
// doing. So the time a read was blocked is its wall time less the thread's
// CPU time (CLOCK_THREAD_CPUTIME_ID) and less its time runnable but not
// running (the run delay of /proc/thread-self/schedstat). Where schedstat
// cannot be read, a read that never gave up the CPU (getrusage's voluntary
// context switches) counts as not blocked, and one that did counts its
// wall time less its CPU time.
//
// Thread safety: a ThreadClock belongs to its thread (ThreadClock::Self);
// another thread may call BlockedNowNs while the clock's thread is inside
// the read that began at `start` (the caller makes sure it is: under the
// read-ahead's lock, or holding LifetimeMutex() while it checks that the
// read has not returned).
#ifndef BATCHD_SERVER_READAHEAD_CLOCK_H_
#define BATCHD_SERVER_READAHEAD_CLOCK_H_

#include <cstdint>

#include "absl/synchronization/mutex.h"

namespace batchd {

// A thread's clocks at one moment.
struct ThreadSample {
  uint64_t wall_ns = 0;             // MonotonicNanos
  uint64_t cpu_ns = 0;              // on a CPU, in all
  uint64_t queued_ns = 0;           // runnable and waiting for a CPU, in all
  uint64_t voluntary_switches = 0;  // only where schedstat is not read
};

class ThreadClock {
 public:
  // The calling thread's clock (opened on first use, closed when the
  // thread ends).
  static ThreadClock& Self();

  ThreadClock(const ThreadClock&) = delete;
  ThreadClock& operator=(const ThreadClock&) = delete;
  ~ThreadClock();

  // The calling thread's clocks now; call on the clock's own thread.
  ThreadSample Sample() const;
  // How long the clock's thread was blocked from `start` to `end` (two of
  // its samples).
  uint64_t BlockedNs(const ThreadSample& start, const ThreadSample& end) const;
  // From any thread, while the clock's thread is inside what began at
  // `start`: 0 while that thread runs or waits for a CPU; while it is
  // blocked, how long it has been blocked since `start` (wall time since
  // `start` where /proc cannot tell).
  uint64_t BlockedNowNs(const ThreadSample& start, uint64_t now_ns) const;
  // No clock goes (its thread ends) while this is held.
  static absl::Mutex& LifetimeMutex();

 private:
  ThreadClock();
  // Run time and run delay from schedstat; false when it cannot be read.
  bool ReadSchedstat(uint64_t* run_ns, uint64_t* queued_ns) const;

  int schedstat_fd_ = -1;  // /proc/thread-self/schedstat
  int stat_fd_ = -1;       // /proc/thread-self/stat (its state letter)
};

}  // namespace batchd

#endif  // BATCHD_SERVER_READAHEAD_CLOCK_H_

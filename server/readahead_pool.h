// The read-ahead's I/O threads (server/readahead.h): an elastic pool on
// base/threads.h's ThreadGroup. A thread is started when reads wait and
// every thread is busy, up to a bound; a thread that finds nothing to do
// for idle_exit_seconds ends (and is joined by the next start or by Stop),
// so an idle daemon holds none. Each thread calls the owner's `run_one`
// (with a buffer of its own for the bytes it reads) until it returns false
// (nothing to read), then waits for Wake.
//
// Thread safety: thread-safe. Its lock is taken after the owner's (the
// read-ahead calls Wake under its own lock); `run_one` is called without
// the pool's lock.
#ifndef BATCHD_SERVER_READAHEAD_POOL_H_
#define BATCHD_SERVER_READAHEAD_POOL_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "base/threads.h"

namespace batchd {

class ReadAheadIoPool {
 public:
  // At most `max_threads` threads busy at once, besides `stuck` ones (see
  // Wake), and never more than twice as many in all. `run_one` runs one
  // read and returns true, or returns false at once when none waits; it
  // may call Wake, and must outlive the pool's threads.
  using RunOne = std::function<bool(std::string* buffer)>;
  ReadAheadIoPool(int max_threads, double idle_exit_seconds, RunOne run_one);
  // Stop(0).
  ~ReadAheadIoPool();
  ReadAheadIoPool(const ReadAheadIoPool&) = delete;
  ReadAheadIoPool& operator=(const ReadAheadIoPool&) = delete;

  // Starts a thread if none runs; ResourceExhausted (StartThread's message:
  // the thread, the limit, --readahead-threads) when none can be started.
  absl::Status EnsureThread() ABSL_LOCKS_EXCLUDED(mu_);
  // Reads may wait: wakes an idle thread (every idle one with `all`), or,
  // when none is idle, starts one unless `max_threads` threads are busy
  // besides `stuck` (threads in reads the owner no longer counts: of
  // streams that went, or beyond a stream's share). False when no thread
  // runs (none could be started), or the pool is stopping.
  bool Wake(bool all, int stuck) ABSL_LOCKS_EXCLUDED(mu_);
  // Stops the threads: waits until `deadline_ns` (MonotonicNanos; 0: as
  // long as it takes) for them to end. False when some are still in
  // `run_one` then; a later Stop waits for them again.
  bool Stop(uint64_t deadline_ns) ABSL_LOCKS_EXCLUDED(mu_, join_mu_);

  // Threads running now, and of them those waiting for work.
  int live() const ABSL_LOCKS_EXCLUDED(mu_);
  int idle() const ABSL_LOCKS_EXCLUDED(mu_);
  // Why the last thread that could not be started could not ("" if none).
  std::string thread_error() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void Loop() ABSL_LOCKS_EXCLUDED(mu_);
  bool Start() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Constant after construction.
  const int max_threads_;
  const double idle_exit_seconds_;
  const RunOne run_one_;

  mutable absl::Mutex mu_;
  absl::CondVar work_cv_;  // Wake, or stop_
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  int live_ ABSL_GUARDED_BY(mu_) = 0;  // threads in Loop
  int idle_ ABSL_GUARDED_BY(mu_) = 0;  // ... of which waiting for work
  // Counts Wake calls: a thread that found nothing to do looks again when
  // it moved since it began to look (a read made ready meanwhile).
  uint64_t wakes_ ABSL_GUARDED_BY(mu_) = 0;
  std::string thread_error_ ABSL_GUARDED_BY(mu_);

  // Starts (under mu_, while !stop_) and Stop's wait (without mu_, which
  // ending threads take) hold it in turn.
  absl::Mutex join_mu_ ABSL_ACQUIRED_AFTER(mu_);
  ThreadGroup threads_ ABSL_GUARDED_BY(join_mu_);
};

}  // namespace batchd

#endif  // BATCHD_SERVER_READAHEAD_POOL_H_

// The read-ahead's elastic pool of I/O threads; see readahead_pool.h.
#include "server/readahead_pool.h"

#include <pthread.h>

#include <utility>

#include "absl/time/time.h"
#include "base/log.h"

namespace batchd {

ReadAheadIoPool::ReadAheadIoPool(int max_threads, double idle_exit_seconds,
                                 RunOne run_one)
    : max_threads_(max_threads),
      idle_exit_seconds_(idle_exit_seconds),
      run_one_(std::move(run_one)) {}

ReadAheadIoPool::~ReadAheadIoPool() { Stop(0); }

int ReadAheadIoPool::live() const {
  absl::MutexLock lock(&mu_);
  return live_;
}

int ReadAheadIoPool::idle() const {
  absl::MutexLock lock(&mu_);
  return idle_;
}

std::string ReadAheadIoPool::thread_error() const {
  absl::MutexLock lock(&mu_);
  return thread_error_;
}

absl::Status ReadAheadIoPool::EnsureThread() {
  absl::MutexLock lock(&mu_);
  if (live_ > 0 || stop_ || Start()) return absl::OkStatus();
  return absl::ResourceExhaustedError(thread_error_);
}

bool ReadAheadIoPool::Start() {
  absl::MutexLock join(&join_mu_);
  // Threads that ended since the last start are joined here (the last to
  // end is joined by the next start, or by Stop).
  threads_.JoinReturned();
  const absl::Status started = threads_.Start(
      "a read-ahead I/O thread", "--readahead-threads", [this] { Loop(); });
  if (!started.ok()) {
    thread_error_ = std::string(started.message());
    LogKeyed(LogLevel::kWarn, "readahead_thread_failed", "thread_failed",
             {{"what", "read-ahead I/O thread"},
              {"threads", std::to_string(live_)},
              {"msg", thread_error_}});
    return false;
  }
  ++live_;
  return true;
}

bool ReadAheadIoPool::Wake(bool all, int stuck) {
  absl::MutexLock lock(&mu_);
  if (stop_) return false;
  ++wakes_;
  if (idle_ > 0) {
    if (all) {
      work_cv_.SignalAll();
    } else {
      work_cv_.Signal();
    }
    return true;
  }
  if (live_ - stuck < max_threads_ && live_ < 2 * max_threads_) {
    return Start() || live_ > 0;
  }
  return live_ > 0;
}

void ReadAheadIoPool::Loop() {
  // Named, so that ps, top and the tests tell the I/O threads apart (a
  // thread is otherwise named after whichever thread started it).
  pthread_setname_np(pthread_self(), "batchd-io");
  const absl::Duration idle_exit = absl::Seconds(idle_exit_seconds_);
  std::string buffer;
  absl::MutexLock lock(&mu_);
  while (!stop_) {
    const uint64_t wakes = wakes_;
    mu_.Unlock();
    const bool ran = run_one_(&buffer);
    mu_.Lock();
    if (ran || wakes_ != wakes || stop_) continue;
    ++idle_;
    const bool timed_out = work_cv_.WaitWithTimeout(&mu_, idle_exit);
    --idle_;
    if (timed_out && wakes_ == wakes) break;  // idle: end
  }
  --live_;
}

bool ReadAheadIoPool::Stop(uint64_t deadline_ns) {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
    work_cv_.SignalAll();
  }
  // No thread starts once stop_ is set; those in a read end after it.
  absl::MutexLock join(&join_mu_);
  if (threads_.WaitUntil(deadline_ns)) return true;
  Log(LogLevel::kWarn, "readahead_threads_abandoned",
      {{"threads", std::to_string(threads_.running())},
       {"msg",
        "I/O threads stuck in reads that have not returned are "
        "left to end with the process"}});
  return false;
}

}  // namespace batchd

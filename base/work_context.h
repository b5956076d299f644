// Whose work a thread does, and whether it is still wanted: the context
// that a request (an OpenStream, a Plan) gives the work it starts, and that
// the daemon's pool (base/executor.h) carries from a task to every task it
// submits.
//
// Owner: the uid the work is for (the stream's owner; the caller's for a
// Plan). The pool's threads take owners in turn, so that one uid's heavy
// indexing takes at most its share. kNoOwner: the daemon's own work, and
// code that runs outside a daemon (tools, tests).
//
// Cancellation: whether the request that started the work still wants it.
// Its caller may have gone (the gRPC layer polls ServerContext::IsCancelled
// through a function it supplies; the core knows nothing of gRPC), its
// deadline may have passed, or it may have been refused. Long loops (over
// a file's bytes, a tree's files, a data set's records) call
// CheckCancelled() every so often and stop with CANCELLED. A request that
// ends (Finish) stops asking its caller: what it still says is what it
// said then. Work that outlives its request (a stream's counting tasks, a
// shared pass) runs under its owner alone, never under a request's
// cancellation: it stops when what it is for goes.
//
// Progress: what the work is doing, for a caller that waits for it (an
// OpenStream whose stream is being prepared, server/stream_preparations.h):
// what is done (e.g. "listing imagenet/train"), done of total units, and a
// count of steps that grows while the work goes on (every CheckCancelled
// and every chunk of a ParallelFor counts one), so that a caller can tell
// work that progresses from work that is stuck even where nothing reports
// what it does.
//
// Thread safety: Cancellation and WorkProgress are thread-safe;
// CurrentWork and WorkScope are the calling thread's own.
#ifndef BATCHD_BASE_WORK_CONTEXT_H_
#define BATCHD_BASE_WORK_CONTEXT_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace batchd {

// The owner of the daemon's own work (no uid: uids are 32-bit).
constexpr uint64_t kNoOwner = ~uint64_t{0};

class Cancellation {
 public:
  // How often `gone` is asked at most. Default: 20 ms.
  static constexpr uint64_t kDefaultPollNs = 20'000'000;

  // Never cancelled unless Cancel is called.
  Cancellation() = default;
  // `gone` (may be null) says whether the caller has gone; it is asked by
  // one thread at a time, at most every `poll_ns`, until Finish.
  // `deadline_ns` (MonotonicNanos; 0: none) is when the caller stops
  // waiting.
  Cancellation(std::function<bool()> gone, uint64_t deadline_ns,
               uint64_t poll_ns = kDefaultPollNs);
  Cancellation(const Cancellation&) = delete;
  Cancellation& operator=(const Cancellation&) = delete;

  // Whether the work is no longer wanted. Cheap (an atomic load, and now
  // and then a clock read or a call of `gone`): loops may ask it every
  // item of a few microseconds or more.
  bool cancelled() const;
  // OK, or the CANCELLED status that says why.
  absl::Status status() const;
  // The request ended (Finish) without being cancelled: what it made was
  // handed out.
  bool finished() const {
    return state_.load(std::memory_order_acquire) == kFinished;
  }
  // When the caller stops waiting (MonotonicNanos); 0: no deadline.
  uint64_t deadline_ns() const { return deadline_ns_; }
  // Nobody wants the work any more; `why` (kept when it is the first
  // reason) says why, e.g. the request's own error.
  void Cancel(const absl::Status& why);
  // The request has ended: `gone` is never asked again (what it asks may
  // go once Finish returns) and the deadline no longer applies; cancelled()
  // stays what it is now unless Cancel is called.
  void Finish();

 private:
  enum State : int { kOpen, kCancelled, kFinished };
  // Asks `gone` and the deadline, unless another thread does or it was
  // asked less than poll_ns_ ago.
  void Poll() const;

  const uint64_t deadline_ns_ = 0;
  const uint64_t poll_ns_ = kDefaultPollNs;
  mutable std::atomic<int> state_{kOpen};
  mutable std::atomic<uint64_t> next_poll_ns_{0};
  mutable absl::Mutex mu_;
  std::function<bool()> gone_ ABSL_GUARDED_BY(mu_);
  mutable absl::Status why_ ABSL_GUARDED_BY(mu_);
};

class WorkProgress {
 public:
  struct Snapshot {
    std::string what;  // "" until the work says
    std::string unit;  // what done/total count, e.g. "folders"
    uint64_t done = 0;
    uint64_t total = 0;  // 0: not known
    uint64_t steps = 0;
  };

  // What the work does now: `done` of `total` `unit`s of `what`.
  void Set(const std::string& what, uint64_t done, uint64_t total,
           const std::string& unit);
  // One more step of work done (cheap: an atomic add).
  void Step() { steps_.fetch_add(1, std::memory_order_relaxed); }
  Snapshot Get() const;

 private:
  std::atomic<uint64_t> steps_{0};
  mutable absl::Mutex mu_;
  std::string what_ ABSL_GUARDED_BY(mu_);
  std::string unit_ ABSL_GUARDED_BY(mu_);
  uint64_t done_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t total_ ABSL_GUARDED_BY(mu_) = 0;
};

struct WorkContext {
  uint64_t owner = kNoOwner;
  // Null: never cancelled.
  std::shared_ptr<Cancellation> cancel;
  // Null: nobody watches the work's progress.
  std::shared_ptr<WorkProgress> progress{};

  bool cancelled() const { return cancel != nullptr && cancel->cancelled(); }
};

// The context of what the calling thread does now: the innermost
// WorkScope's, or {kNoOwner, null} outside any.
const WorkContext& CurrentWork();

// OK, or CANCELLED (naming `what` was stopped, and why) when the current
// work's request no longer wants it. Counts a step of the current work's
// progress.
absl::Status CheckCancelled(const std::string& what);

// The current work does `done` of `total` `unit`s of `what` (nothing when
// nobody watches its progress).
void ReportProgress(const std::string& what, uint64_t done, uint64_t total,
                    const std::string& unit);

// Makes `context` the calling thread's current work until it ends; scopes
// nest. The executor opens one around every task, with the context the
// task was submitted under.
class WorkScope {
 public:
  explicit WorkScope(WorkContext context);
  ~WorkScope();
  WorkScope(const WorkScope&) = delete;
  WorkScope& operator=(const WorkScope&) = delete;

 private:
  WorkContext outer_;
};

}  // namespace batchd

#endif  // BATCHD_BASE_WORK_CONTEXT_H_

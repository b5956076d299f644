// The daemon's pool for indexing and counting work: a fixed set of threads,
// started once, that runs what streams prepare (WMT's length pass and the
// tokenizing of an epoch's first windows, packed schedules' epoch counts,
// SentencePiece model loads, ImageFolder listings, TFRecord shard opens).
// Workloads never start threads of their own: whatever a request asks, what
// runs at once is bounded by this pool, and the daemon's thread count does
// not depend on streams or their options.
//
// Two classes of work, each on threads of its own: serving work (what a
// stream waits for before its next batches) at the daemon's CPU priority,
// and background work (a one-time pass over a data set) on threads at a
// lower one (nice +10), so that a pass yields the CPU to serving work and
// never holds a thread that serving work needs.
//
// Owners take turns (base/work_context.h): every task carries the work
// context it was submitted under (its owner, the uid it is for, and its
// request's cancellation), and runs under it, so that what a task submits
// (ParallelFor's helpers, tasks of its own) is its owner's too. A class's
// free thread takes the next task of the owner with the fewest tasks
// running in the class (owners with as few take turns, round robin), and
// each owner queues at most max_queued tasks of a class; a loop's helper
// gives its thread back when another owner's task waits (ParallelFor), so
// that one uid's heavy indexing takes at most its share of the threads and
// another uid's work starts promptly. What no thread can be taken from is
// the loop's caller: a task that runs a loop holds its own thread.
//
// Nothing here waits for a task that has not started: ParallelFor runs its
// loop on the calling thread too and revokes the helpers still queued when
// the loop is done; TaskScope::Close revokes queued tasks and waits only for
// running ones. So a task may use ParallelFor, or close a scope, on its own
// pool without deadlock, however busy the pool is. Cancelled work (its
// request's caller gone) stops: ParallelFor's loop ends with CANCELLED, and
// Run stops waiting for a task that has not started.
//
// Thread safety: thread-safe.
#ifndef BATCHD_BASE_EXECUTOR_H_
#define BATCHD_BASE_EXECUTOR_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "base/threads.h"
#include "base/work_context.h"

namespace batchd {

enum class Priority : int {
  kServing = 0,     // a stream waits for it
  kBackground = 1,  // a pass that may take its time
};

struct ExecutorOptions {
  // Threads of serving work. Default: 1; at most Executor::kMaxThreads.
  int serving_threads = 1;
  // Threads of background work. Default: 1; at most Executor::kMaxThreads.
  int background_threads = 1;
  // Added to the daemon's nice value for the background threads (best
  // effort; at most 19). Default: 10.
  int background_nice = 10;
  // Tasks each owner may hold queued in a class; Submit fails beyond.
  // Default: 65536.
  size_t max_queued = 65536;
  // Stack of every thread, in bytes: tasks may recurse as deep as this
  // allows (SentencePiece's trie builder recurses once per byte of a
  // piece). Default: 8 MiB.
  size_t stack_bytes = size_t(8) << 20;
};

class Executor {
 public:
  static constexpr int kMaxThreads = 256;

  // Starts every thread. InvalidArgument for a count out of [1,
  // kMaxThreads]; StartThread's ResourceExhausted (naming the thread, the
  // count and --index-threads) when a thread cannot be started: the
  // threads started are stopped again.
  static absl::StatusOr<std::unique_ptr<Executor>> Create(
      const ExecutorOptions& options);
  // The process-wide executor of code that runs workloads outside a daemon
  // (tools, tests): as many threads in each class as there are cores,
  // started on first use and never stopped. The daemon never uses it: it
  // gives workloads its own. Null when it cannot start.
  static Executor* Default();

  ~Executor();  // Shutdown()
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  int threads(Priority priority) const;
  // Queues `task` for a thread of `priority`'s class, to run under the
  // calling thread's work context (CurrentWork()). ResourceExhausted when
  // max_queued tasks of its owner wait in the class already;
  // FailedPrecondition once Shutdown has begun. Tasks must not throw.
  absl::Status Submit(Priority priority, std::function<void()> task);
  // Runs `fn` on a thread of `priority`'s class and waits for it; on the
  // calling thread when that is already a thread of this executor (whose
  // stack is as large). fn's status, or Submit's error, or CANCELLED when
  // the current work is cancelled before fn has started (fn then never
  // runs).
  absl::Status Run(Priority priority, const std::function<absl::Status()>& fn);
  // Whether a task of an owner other than the current work's waits for a
  // thread of `priority`'s class: a loop's helper then gives its thread
  // back. Cheap when nothing waits.
  bool OthersWaiting(Priority priority) const;
  // From now on Submit fails and stopping() is true; the tasks queued still
  // run (long ones should check stopping() and end early), then the threads
  // are joined. Idempotent; never call it from a task of this executor.
  void Shutdown();
  bool stopping() const;
  // Whether the calling thread is one of this executor's.
  bool OnPoolThread() const;

 private:
  explicit Executor(const ExecutorOptions& options);
  // A thread of `priority`'s class: names itself, lowers its priority for
  // background work, then runs tasks until Shutdown.
  void ThreadMain(Priority priority);
  void WorkerLoop(Priority priority);

  struct Task {
    std::function<void()> fn;
    WorkContext context;
  };
  // One owner's work in a class.
  struct OwnerWork {
    std::deque<Task> queued;
    int running = 0;
  };
  // One class's work: its owners (those with tasks queued or running), and
  // those with tasks queued in the order of their next turn.
  struct ClassWork {
    std::map<uint64_t, OwnerWork> owners;
    std::deque<uint64_t> turns;
  };
  // The next task of class `c` (one is queued), counted as running.
  Task TakeTask(int c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Constant after construction.
  const ExecutorOptions options_;

  mutable absl::Mutex mu_;
  ClassWork work_of_[2] ABSL_GUARDED_BY(mu_);
  // work_of_[c].turns.size(), read without the lock by OthersWaiting.
  std::atomic<size_t> waiting_owners_[2] = {{0}, {0}};
  absl::CondVar work_[2];  // a task was queued, or stopping_
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;

  // Held by Create and Shutdown, which may be called from several threads.
  absl::Mutex join_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  ThreadGroup threads_ ABSL_GUARDED_BY(join_mu_);
};

// fn(i) for every i in [0, n), on up to `parallel` threads at once: the
// calling thread and helpers submitted to `executor` at `priority` (at most
// as many as the class has threads). Items are handed out in chunks of at
// most `max_chunk` (1 where an item is long work, so that threads end
// together). The first error stops the loop and is returned; so does the
// current work's cancellation (CANCELLED), checked before every chunk.
// Helpers that cannot be queued, or have not started when the caller's
// loop ends, are left out: the loop always completes, on the caller alone
// if need be. A helper that finishes a chunk while another owner's task
// waits (Executor::OthersWaiting) queues itself again behind it and gives
// its thread back. A null executor runs everything on the caller.
absl::Status ParallelFor(Executor* executor, Priority priority, uint64_t n,
                         uint64_t parallel,
                         const std::function<absl::Status(uint64_t)>& fn,
                         uint64_t max_chunk = 256);

// Tasks that refer to one object, which may go once the scope is closed:
// Submit runs a task on the executor only while the scope is open; Close
// (and the destructor) revokes those not yet started and waits for those
// running, but never for the task that calls it. Its tasks are the
// object's: they run as the owner current where the scope was made (the
// uid of the stream whose schedule made it), whoever submits them, and no
// request's cancellation stops them (the object's end does: Close).
//
// Thread safety: thread-safe.
class TaskScope {
 public:
  // `executor` may be null: then Submit fails (FailedPrecondition).
  TaskScope(Executor* executor, Priority priority);
  ~TaskScope();  // Close()
  TaskScope(const TaskScope&) = delete;
  TaskScope& operator=(const TaskScope&) = delete;

  // Executor::Submit's errors, and FailedPrecondition once closed.
  absl::Status Submit(std::function<void()> task);
  void Close();
  Executor* executor() const { return executor_; }

 private:
  struct State {
    absl::Mutex mu;
    absl::CondVar idle;  // running dropped
    int running ABSL_GUARDED_BY(mu) = 0;
    bool closed ABSL_GUARDED_BY(mu) = false;
  };
  Executor* const executor_;
  const Priority priority_;
  const WorkContext context_;
  const std::shared_ptr<State> state_;
};

}  // namespace batchd

#endif  // BATCHD_BASE_EXECUTOR_H_

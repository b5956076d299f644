// The daemon's pool for indexing and counting work; see executor.h.
#include "base/executor.h"

#include <pthread.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <thread>

#include "absl/strings/str_cat.h"

namespace batchd {
namespace {

// The executor whose thread this is (null on other threads).
thread_local const Executor* tls_executor = nullptr;
// The scope of the task this thread runs (TaskScope), if any.
thread_local const void* tls_scope = nullptr;

const char* ClassName(Priority p) {
  return p == Priority::kServing ? "serving" : "background";
}

}  // namespace

Executor::Executor(const ExecutorOptions& options) : options_(options) {}

absl::StatusOr<std::unique_ptr<Executor>> Executor::Create(
    const ExecutorOptions& options) {
  for (int n : {options.serving_threads, options.background_threads}) {
    if (n < 1 || n > kMaxThreads) {
      return absl::InvalidArgumentError(absl::StrCat(
          "executor: ", n, " threads; a class has 1 to ", kMaxThreads));
    }
  }
  std::unique_ptr<Executor> e(new Executor(options));
  absl::MutexLock lock(&e->join_mu_);
  for (Priority p : {Priority::kServing, Priority::kBackground}) {
    for (int i = 0; i < e->threads(p); ++i) {
      Executor* self = e.get();
      absl::Status s = e->threads_.Start(
          absl::StrCat(ClassName(p), " thread ", i + 1, " of ", e->threads(p),
                       " of the index executor"),
          "--index-threads", [self, p] { self->ThreadMain(p); },
          options.stack_bytes);
      if (!s.ok()) {
        {
          absl::MutexLock stop(&e->mu_);
          e->stopping_ = true;
          e->work_[0].SignalAll();
          e->work_[1].SignalAll();
        }
        e->threads_.JoinUntil(0);
        return s;
      }
    }
  }
  return e;
}

Executor* Executor::Default() {
  static Executor* const executor = [] {
    ExecutorOptions o;
    const int cores = int(std::max(1u, std::thread::hardware_concurrency()));
    o.serving_threads = o.background_threads = std::min(cores, kMaxThreads);
    absl::StatusOr<std::unique_ptr<Executor>> e = Create(o);
    return e.ok() ? e->release() : nullptr;  // never destroyed
  }();
  return executor;
}

void Executor::ThreadMain(Priority priority) {
  tls_executor = this;
  if (priority == Priority::kBackground) {
    // Best effort: a thread's nice value is its own (Linux), inherited from
    // the thread that started it; raised from there, never set back below.
    const id_t tid = id_t(syscall(SYS_gettid));
    errno = 0;
    const int nice = getpriority(PRIO_PROCESS, tid);
    if (errno == 0) {
      setpriority(PRIO_PROCESS, tid,
                  std::min(19, nice + options_.background_nice));
    }
    pthread_setname_np(pthread_self(), "batchd-bg");
  } else {
    pthread_setname_np(pthread_self(), "batchd-index");
  }
  WorkerLoop(priority);
}

void Executor::WorkerLoop(Priority priority) {
  const int c = int(priority);
  while (true) {
    Task task;
    {
      absl::MutexLock lock(&mu_);
      while (work_of_[c].turns.empty() && !stopping_) work_[c].Wait(&mu_);
      if (work_of_[c].turns.empty()) return;  // stopping, nothing left
      task = TakeTask(c);
    }
    const uint64_t owner = task.context.owner;
    {
      WorkScope scope(std::move(task.context));
      task.fn();
    }
    task.fn = nullptr;  // what it holds goes before the lock is taken
    absl::MutexLock lock(&mu_);
    ClassWork& w = work_of_[c];
    auto it = w.owners.find(owner);
    if (--it->second.running == 0 && it->second.queued.empty()) {
      w.owners.erase(it);
    }
  }
}

Executor::Task Executor::TakeTask(int c) {
  ClassWork& w = work_of_[c];
  // The owner with the fewest tasks running; of those, the one whose turn
  // came first.
  auto next = w.turns.begin();
  int fewest = w.owners.find(*next)->second.running;
  for (auto it = std::next(next); it != w.turns.end() && fewest > 0; ++it) {
    const int running = w.owners.find(*it)->second.running;
    if (running < fewest) {
      next = it;
      fewest = running;
    }
  }
  const uint64_t owner = *next;
  w.turns.erase(next);
  OwnerWork& o = w.owners.find(owner)->second;
  Task task = std::move(o.queued.front());
  o.queued.pop_front();
  ++o.running;
  if (!o.queued.empty()) w.turns.push_back(owner);  // its next turn, last
  waiting_owners_[c].store(w.turns.size(), std::memory_order_relaxed);
  return task;
}

Executor::~Executor() { Shutdown(); }

int Executor::threads(Priority priority) const {
  return priority == Priority::kServing ? options_.serving_threads
                                        : options_.background_threads;
}

absl::Status Executor::Submit(Priority priority, std::function<void()> task) {
  const int c = int(priority);
  const WorkContext& context = CurrentWork();
  absl::MutexLock lock(&mu_);
  if (stopping_) {
    return absl::FailedPreconditionError("executor: the daemon is stopping");
  }
  ClassWork& w = work_of_[c];
  auto found = w.owners.find(context.owner);
  const size_t queued =
      found == w.owners.end() ? 0 : found->second.queued.size();
  if (queued >= options_.max_queued) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "executor: ", queued, " tasks of ", ClassName(priority),
        " work of one owner are queued already, the limit; retry when "
        "streams have finished preparing"));
  }
  OwnerWork& o = w.owners[context.owner];
  if (o.queued.empty()) w.turns.push_back(context.owner);
  o.queued.push_back(Task{std::move(task), context});
  waiting_owners_[c].store(w.turns.size(), std::memory_order_relaxed);
  work_[c].Signal();
  return absl::OkStatus();
}

bool Executor::OthersWaiting(Priority priority) const {
  const int c = int(priority);
  const size_t waiting = waiting_owners_[c].load(std::memory_order_relaxed);
  if (waiting != 1) return waiting > 1;
  const uint64_t self = CurrentWork().owner;
  absl::MutexLock lock(&mu_);
  for (uint64_t owner : work_of_[c].turns) {
    if (owner != self) return true;
  }
  return false;
}

absl::Status Executor::Run(Priority priority,
                           const std::function<absl::Status()>& fn) {
  if (OnPoolThread()) return fn();
  struct Done {
    absl::Mutex mu;
    absl::CondVar cv;
    bool started ABSL_GUARDED_BY(mu) = false;
    bool revoked ABSL_GUARDED_BY(mu) = false;
    bool done ABSL_GUARDED_BY(mu) = false;
    absl::Status status ABSL_GUARDED_BY(mu);
  };
  auto done = std::make_shared<Done>();
  absl::Status queued = Submit(priority, [done, &fn] {
    {
      absl::MutexLock lock(&done->mu);
      if (done->revoked) return;  // its caller stopped waiting; fn is gone
      done->started = true;
    }
    absl::Status s = fn();
    absl::MutexLock lock(&done->mu);
    done->status = std::move(s);
    done->done = true;
    done->cv.Signal();
  });
  if (!queued.ok()) return queued;
  const std::shared_ptr<Cancellation> cancel = CurrentWork().cancel;
  absl::MutexLock lock(&done->mu);
  while (!done->done) {
    if (cancel == nullptr) {
      done->cv.Wait(&done->mu);
      continue;
    }
    // A task that has started is waited for: fn is the caller's.
    if (!done->started && cancel->cancelled()) {
      done->revoked = true;
      return absl::CancelledError(
          absl::StrCat("a task that had not started was dropped: ",
                       cancel->status().message()));
    }
    done->cv.WaitWithTimeout(&done->mu, absl::Milliseconds(50));
  }
  return done->status;
}

void Executor::Shutdown() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    work_[0].SignalAll();
    work_[1].SignalAll();
  }
  absl::MutexLock lock(&join_mu_);
  threads_.JoinUntil(0);
}

bool Executor::stopping() const {
  absl::MutexLock lock(&mu_);
  return stopping_;
}

bool Executor::OnPoolThread() const { return tls_executor == this; }

namespace {

// What ParallelFor shares with its helpers, which may start after the
// caller has returned: those find it closed and touch nothing else.
struct LoopState {
  const std::function<absl::Status(uint64_t)>* fn;
  Executor* executor;
  Priority priority;
  std::shared_ptr<Cancellation> cancel;    // the caller's work's
  std::shared_ptr<WorkProgress> progress;  // the caller's work's
  uint64_t n, chunk;
  std::atomic<uint64_t> next{0};
  std::atomic<bool> failed{false};
  absl::Mutex mu;
  absl::CondVar idle;
  int running ABSL_GUARDED_BY(mu) = 0;
  bool closed ABSL_GUARDED_BY(mu) = false;
  absl::Status first_error ABSL_GUARDED_BY(mu);

  void Fail(absl::Status s) {
    absl::MutexLock lock(&mu);
    if (first_error.ok()) first_error = std::move(s);
    failed = true;
  }

  // Runs chunks until none is left or the loop failed; a helper also
  // stops when another owner's task waits for its thread. True when it
  // stopped so, with items left.
  bool Work(bool helper) {
    while (!failed.load(std::memory_order_relaxed)) {
      if (cancel != nullptr && cancel->cancelled()) {
        Fail(absl::CancelledError(absl::StrCat("a parallel loop stopped: ",
                                               cancel->status().message())));
        return false;
      }
      const uint64_t begin = next.fetch_add(chunk);
      if (begin >= n) return false;
      for (uint64_t i = begin; i < std::min(n, begin + chunk); ++i) {
        absl::Status s = (*fn)(i);
        if (!s.ok()) {
          Fail(std::move(s));
          return false;
        }
      }
      if (progress != nullptr) progress->Step();
      if (helper && next.load(std::memory_order_relaxed) < n &&
          executor->OthersWaiting(priority)) {
        return true;
      }
    }
    return false;
  }
};

// A helper of the loop: works while the loop is open, and when another
// owner's task waits, queues itself again (behind that task) and returns.
void RunHelper(const std::shared_ptr<LoopState>& state) {
  {
    absl::MutexLock lock(&state->mu);
    if (state->closed) return;
    ++state->running;
  }
  if (state->Work(/*helper=*/true)) {
    // Under this task's own work context: the loop's caller's.
    (void)state->executor->Submit(state->priority,
                                  [state] { RunHelper(state); });
  }
  absl::MutexLock lock(&state->mu);
  if (--state->running == 0) state->idle.SignalAll();
}

}  // namespace

absl::Status ParallelFor(Executor* executor, Priority priority, uint64_t n,
                         uint64_t parallel,
                         const std::function<absl::Status(uint64_t)>& fn,
                         uint64_t max_chunk) {
  if (n == 0) return absl::OkStatus();
  uint64_t threads = std::max<uint64_t>(1, std::min(parallel, n));
  threads = executor == nullptr
                ? 1
                : std::min<uint64_t>(threads,
                                     uint64_t(executor->threads(priority)) + 1);
  auto state = std::make_shared<LoopState>();
  state->fn = &fn;
  state->executor = executor;
  state->priority = priority;
  state->cancel = CurrentWork().cancel;
  state->progress = CurrentWork().progress;
  state->n = n;
  // Chunks small enough for every thread to get some.
  state->chunk =
      std::max<uint64_t>(1, std::min<uint64_t>(max_chunk, n / (4 * threads)));
  for (uint64_t t = 1; t < threads; ++t) {
    absl::Status queued =
        executor->Submit(priority, [state] { RunHelper(state); });
    if (!queued.ok()) break;  // fewer helpers; the caller does the rest
  }
  state->Work(/*helper=*/false);
  absl::MutexLock lock(&state->mu);
  state->closed = true;
  while (state->running > 0) state->idle.Wait(&state->mu);
  return state->first_error;
}

TaskScope::TaskScope(Executor* executor, Priority priority)
    : executor_(executor),
      priority_(priority),
      context_(WorkContext{CurrentWork().owner, nullptr}),
      state_(std::make_shared<State>()) {}

TaskScope::~TaskScope() { Close(); }

absl::Status TaskScope::Submit(std::function<void()> task) {
  {
    absl::MutexLock lock(&state_->mu);
    if (state_->closed) {
      return absl::FailedPreconditionError("the task's owner is closing");
    }
  }
  if (executor_ == nullptr) {
    return absl::FailedPreconditionError("no executor to run the task on");
  }
  std::shared_ptr<State> state = state_;
  WorkScope as(context_);  // the scope's tasks are its object's owner's
  return executor_->Submit(priority_,
                           [state, task = std::move(task)]() mutable {
                             {
                               absl::MutexLock lock(&state->mu);
                               if (state->closed) return;
                               ++state->running;
                             }
                             const void* outer = tls_scope;
                             tls_scope = state.get();
                             task();
                             tls_scope = outer;
                             absl::MutexLock lock(&state->mu);
                             --state->running;
                             state->idle.SignalAll();
                           });
}

void TaskScope::Close() {
  // A task of this scope that closes it waits for the others, not itself.
  const int self = tls_scope == state_.get() ? 1 : 0;
  absl::MutexLock lock(&state_->mu);
  state_->closed = true;
  while (state_->running > self) state_->idle.Wait(&state_->mu);
}

}  // namespace batchd

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
      return absl::InvalidArgumentError(
          absl::StrCat("executor: ", n, " threads; a class has 1 to ",
                       kMaxThreads));
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
    std::function<void()> task;
    {
      absl::MutexLock lock(&mu_);
      while (queues_[c].empty() && !stopping_) work_[c].Wait(&mu_);
      if (queues_[c].empty()) return;  // stopping, and nothing left to run
      task = std::move(queues_[c].front());
      queues_[c].pop_front();
    }
    task();
  }
}

Executor::~Executor() { Shutdown(); }

int Executor::threads(Priority priority) const {
  return priority == Priority::kServing ? options_.serving_threads
                                        : options_.background_threads;
}

absl::Status Executor::Submit(Priority priority, std::function<void()> task) {
  const int c = int(priority);
  absl::MutexLock lock(&mu_);
  if (stopping_) {
    return absl::FailedPreconditionError("executor: the daemon is stopping");
  }
  if (queues_[c].size() >= options_.max_queued) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "executor: ", queues_[c].size(), " tasks of ", ClassName(priority),
        " work are queued already, the limit; retry when streams have "
        "finished preparing"));
  }
  queues_[c].push_back(std::move(task));
  work_[c].Signal();
  return absl::OkStatus();
}

absl::Status Executor::Run(Priority priority,
                           const std::function<absl::Status()>& fn) {
  if (OnPoolThread()) return fn();
  struct Done {
    absl::Mutex mu;
    absl::CondVar cv;
    bool done ABSL_GUARDED_BY(mu) = false;
    absl::Status status ABSL_GUARDED_BY(mu);
  };
  auto done = std::make_shared<Done>();
  absl::Status queued = Submit(priority, [done, &fn] {
    absl::Status s = fn();
    absl::MutexLock lock(&done->mu);
    done->status = std::move(s);
    done->done = true;
    done->cv.Signal();
  });
  if (!queued.ok()) return queued;
  absl::MutexLock lock(&done->mu);
  while (!done->done) done->cv.Wait(&done->mu);
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
  // Shared with the helpers, which may start after the caller has
  // returned: those find it closed and touch nothing else.
  struct State {
    const std::function<absl::Status(uint64_t)>* fn;
    uint64_t n, chunk;
    std::atomic<uint64_t> next{0};
    std::atomic<bool> failed{false};
    absl::Mutex mu;
    absl::CondVar idle;
    int running ABSL_GUARDED_BY(mu) = 0;
    bool closed ABSL_GUARDED_BY(mu) = false;
    absl::Status first_error ABSL_GUARDED_BY(mu);

    void Work() {
      while (!failed.load(std::memory_order_relaxed)) {
        const uint64_t begin = next.fetch_add(chunk);
        if (begin >= n) return;
        for (uint64_t i = begin; i < std::min(n, begin + chunk); ++i) {
          absl::Status s = (*fn)(i);
          if (!s.ok()) {
            absl::MutexLock lock(&mu);
            if (first_error.ok()) first_error = std::move(s);
            failed = true;
            return;
          }
        }
      }
    }
  };
  auto state = std::make_shared<State>();
  state->fn = &fn;
  state->n = n;
  // Chunks small enough for every thread to get some.
  state->chunk = std::max<uint64_t>(
      1, std::min<uint64_t>(max_chunk, n / (4 * threads)));
  for (uint64_t t = 1; t < threads; ++t) {
    absl::Status queued = executor->Submit(priority, [state] {
      {
        absl::MutexLock lock(&state->mu);
        if (state->closed) return;
        ++state->running;
      }
      state->Work();
      absl::MutexLock lock(&state->mu);
      if (--state->running == 0) state->idle.SignalAll();
    });
    if (!queued.ok()) break;  // fewer helpers; the caller does the rest
  }
  state->Work();
  absl::MutexLock lock(&state->mu);
  state->closed = true;
  while (state->running > 0) state->idle.Wait(&state->mu);
  return state->first_error;
}

TaskScope::TaskScope(Executor* executor, Priority priority)
    : executor_(executor),
      priority_(priority),
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
  return executor_->Submit(
      priority_, [state, task = std::move(task)]() mutable {
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

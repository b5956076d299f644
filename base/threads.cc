// The one way the daemon starts a thread; see threads.h.
#include "base/threads.h"

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <type_traits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "base/clock.h"

namespace batchd {
namespace {

static_assert(std::is_same_v<pthread_t, unsigned long>,
              "Thread keeps pthread_t as unsigned long");

std::atomic<int> abandoned_threads{0};

void* RunFunction(void* arg) {
  std::unique_ptr<std::function<void()>> fn(
      static_cast<std::function<void()>*>(arg));
  (*fn)();
  return nullptr;
}

}  // namespace

Thread::~Thread() { Join(); }

Thread::Thread(Thread&& other) noexcept
    : handle_(other.handle_), started_(other.started_) {
  other.started_ = false;
}

Thread& Thread::operator=(Thread&& other) noexcept {
  if (this != &other) {
    Join();
    handle_ = other.handle_;
    started_ = std::exchange(other.started_, false);
  }
  return *this;
}

void Thread::Join() {
  if (!started_) return;
  started_ = false;
  pthread_join(pthread_t(handle_), nullptr);
}

void Thread::Detach() {
  if (!started_) return;
  started_ = false;
  pthread_detach(pthread_t(handle_));
}

absl::StatusOr<Thread> StartThread(absl::string_view name,
                                   absl::string_view bound,
                                   std::function<void()> fn,
                                   size_t stack_bytes) {
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  if (stack_bytes > 0) {
    pthread_attr_setstacksize(&attr,
                              std::max<size_t>(stack_bytes, PTHREAD_STACK_MIN));
  }
  auto* arg = new std::function<void()>(std::move(fn));
  pthread_t tid;
  const int err = pthread_create(&tid, &attr, &RunFunction, arg);
  pthread_attr_destroy(&attr);
  if (err != 0) {
    delete arg;
    return absl::ResourceExhaustedError(absl::StrCat(
        "cannot start ", name, " (pthread_create: ", strerror(err),
        "): the daemon is at its thread limit (a pids cgroup, systemd's "
        "TasksMax, RLIMIT_NPROC or the kernel's threads-max); raise it",
        bound.empty() ? "" : " or lower ", bound));
  }
  Thread t;
  t.handle_ = tid;
  t.started_ = true;
  return t;
}

ThreadGroup::ThreadGroup() : state_(std::make_shared<State>()) {}

ThreadGroup::~ThreadGroup() { JoinUntil(0); }

absl::Status ThreadGroup::Start(absl::string_view name, absl::string_view bound,
                                std::function<void()> fn, size_t stack_bytes) {
  {
    absl::MutexLock lock(&state_->mu);
    ++state_->running;
  }
  const uint64_t id = next_id_++;
  absl::StatusOr<Thread> t = StartThread(
      name, bound,
      [state = state_, id, fn = std::move(fn)] {
        fn();
        absl::MutexLock lock(&state->mu);
        --state->running;
        state->returned.push_back(id);
        state->exited.SignalAll();
      },
      stack_bytes);
  if (!t.ok()) {
    absl::MutexLock lock(&state_->mu);
    --state_->running;
    return t.status();
  }
  threads_.emplace(id, *std::move(t));
  return absl::OkStatus();
}

int ThreadGroup::WaitForThreads(uint64_t deadline_ns) {
  absl::MutexLock lock(&state_->mu);
  while (state_->running > 0) {
    if (deadline_ns == 0) {
      state_->exited.Wait(&state_->mu);
      continue;
    }
    const uint64_t now = MonotonicNanos();
    if (now >= deadline_ns) break;
    state_->exited.WaitWithTimeout(&state_->mu,
                                   absl::Nanoseconds(deadline_ns - now));
  }
  return state_->running;
}

int ThreadGroup::JoinUntil(uint64_t deadline_ns) {
  const int stuck = WaitForThreads(deadline_ns);
  if (stuck == 0) {
    for (auto& [id, t] : threads_) t.Join();
  } else {
    // Which of them returned is not known here: each is detached, and
    // those that returned end at once. The stuck ones keep the old state;
    // the group starts afresh.
    for (auto& [id, t] : threads_) t.Detach();
    abandoned_ += stuck;
    NoteAbandonedThreads(stuck);
    state_ = std::make_shared<State>();
  }
  threads_.clear();
  return stuck;
}

bool ThreadGroup::WaitUntil(uint64_t deadline_ns) {
  const bool none = WaitForThreads(deadline_ns) == 0;
  JoinReturned();
  return none;
}

int ThreadGroup::JoinReturned() {
  std::vector<uint64_t> returned;
  {
    absl::MutexLock lock(&state_->mu);
    returned.swap(state_->returned);
  }
  for (uint64_t id : returned) {
    auto it = threads_.find(id);
    if (it == threads_.end()) continue;
    it->second.Join();
    threads_.erase(it);
  }
  return int(returned.size());
}

int ThreadGroup::running() const {
  absl::MutexLock lock(&state_->mu);
  return state_->running;
}

int AbandonedThreads() { return abandoned_threads.load(); }

void NoteAbandonedThreads(int n) { abandoned_threads.fetch_add(n); }

}  // namespace batchd

// Whose work a thread does, and whether it is still wanted; see
// work_context.h.
#include "base/work_context.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "base/clock.h"

namespace batchd {
namespace {

thread_local WorkContext tls_work;

}  // namespace

Cancellation::Cancellation(std::function<bool()> gone, uint64_t deadline_ns,
                           uint64_t poll_ns)
    : deadline_ns_(deadline_ns), poll_ns_(poll_ns), gone_(std::move(gone)) {}

bool Cancellation::cancelled() const {
  const int state = state_.load(std::memory_order_acquire);
  if (state != kOpen) return state == kCancelled;
  Poll();
  return state_.load(std::memory_order_acquire) == kCancelled;
}

void Cancellation::Poll() const {
  const uint64_t now = MonotonicNanos();
  if (now < next_poll_ns_.load(std::memory_order_relaxed)) return;
  // One thread asks; the others go on and see its answer next time.
  if (!mu_.TryLock()) return;
  if (state_.load(std::memory_order_relaxed) == kOpen) {
    next_poll_ns_.store(now + poll_ns_, std::memory_order_relaxed);
    const char* why = nullptr;
    if (deadline_ns_ != 0 && now >= deadline_ns_) {
      why = "the caller's deadline passed";
    } else if (gone_ && gone_()) {
      why = "the caller has gone";
    }
    if (why != nullptr) {
      why_ = absl::CancelledError(why);
      state_.store(kCancelled, std::memory_order_release);
    }
  }
  mu_.Unlock();
}

absl::Status Cancellation::status() const {
  if (!cancelled()) return absl::OkStatus();
  absl::MutexLock lock(&mu_);
  return why_;
}

void Cancellation::Cancel(const absl::Status& why) {
  absl::MutexLock lock(&mu_);
  if (state_.load(std::memory_order_relaxed) == kCancelled) return;
  why_ = absl::CancelledError(
      why.ok() ? std::string("the request was cancelled")
               : absl::StrCat("the request failed: ", why.message()));
  state_.store(kCancelled, std::memory_order_release);
  gone_ = nullptr;
}

void Cancellation::Finish() {
  absl::MutexLock lock(&mu_);  // waits for a Poll in progress
  gone_ = nullptr;
  if (state_.load(std::memory_order_relaxed) == kOpen) {
    state_.store(kFinished, std::memory_order_release);
  }
}

void WorkProgress::Set(const std::string& what, uint64_t done, uint64_t total,
                       const std::string& unit) {
  Step();
  absl::MutexLock lock(&mu_);
  what_ = what;
  unit_ = unit;
  done_ = done;
  total_ = total;
}

WorkProgress::Snapshot WorkProgress::Get() const {
  Snapshot s;
  s.steps = steps_.load(std::memory_order_relaxed);
  absl::MutexLock lock(&mu_);
  s.what = what_;
  s.unit = unit_;
  s.done = done_;
  s.total = total_;
  return s;
}

const WorkContext& CurrentWork() { return tls_work; }

void ReportProgress(const std::string& what, uint64_t done, uint64_t total,
                    const std::string& unit) {
  if (tls_work.progress != nullptr) {
    tls_work.progress->Set(what, done, total, unit);
  }
}

absl::Status CheckCancelled(const std::string& what) {
  if (tls_work.progress != nullptr) tls_work.progress->Step();
  const std::shared_ptr<Cancellation>& cancel = tls_work.cancel;
  if (cancel == nullptr || !cancel->cancelled()) return absl::OkStatus();
  return absl::CancelledError(
      absl::StrCat(what, " stopped: ", cancel->status().message()));
}

WorkScope::WorkScope(WorkContext context) : outer_(std::move(tls_work)) {
  tls_work = std::move(context);
}

WorkScope::~WorkScope() { tls_work = std::move(outer_); }

}  // namespace batchd

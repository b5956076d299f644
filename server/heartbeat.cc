// The heartbeat thread; see heartbeat.h.
#include "server/heartbeat.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include "base/clock.h"

namespace batchd {

Heartbeat::~Heartbeat() { Stop(); }

void Heartbeat::Add(std::shared_ptr<RankProducer> producer) {
  absl::MutexLock lock(&mu_);
  beating_.push_back(std::move(producer));
}

void Heartbeat::Remove(const std::shared_ptr<RankProducer>& producer) {
  absl::MutexLock lock(&mu_);
  beating_.erase(std::remove(beating_.begin(), beating_.end(), producer),
                 beating_.end());
}

absl::Status Heartbeat::Start() {
  absl::StatusOr<Thread> t =
      StartThread("the heartbeat thread", "", [this] { Loop(); });
  if (!t.ok()) return t.status();
  thread_ = *std::move(t);
  return absl::OkStatus();
}

void Heartbeat::Stop() {
  stop_.store(true);
  thread_.Join();
}

void Heartbeat::Loop() {
  while (!stop_.load()) {
    const uint64_t now = MonotonicNanos();
    {
      absl::MutexLock lock(&mu_);
      for (const auto& p : beating_) p->ring().Heartbeat(now);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

}  // namespace batchd

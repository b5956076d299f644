// Objects shared by a daemon's streams, and the models' budget; see
// shared_work.h.
#include "workloads/shared_work.h"

#include "absl/strings/str_cat.h"

namespace batchd {

struct SharedWork::Charge::Budget {
  explicit Budget(uint64_t max) : max_bytes(max) {}
  const uint64_t max_bytes;
  absl::Mutex mu;
  uint64_t held ABSL_GUARDED_BY(mu) = 0;
};

SharedWork::Charge::~Charge() {
  absl::MutexLock lock(&budget_->mu);
  budget_->held -= bytes_;
}

SharedWork::SharedWork(uint64_t max_model_bytes)
    : budget_(std::make_shared<Charge::Budget>(max_model_bytes)) {}

absl::StatusOr<std::shared_ptr<void>> SharedWork::FindImpl(
    const std::string& kind, const std::string& key,
    const std::function<absl::StatusOr<std::shared_ptr<void>>()>& make) {
  const Key k(kind, key);
  {
    absl::MutexLock lock(&mu_);
    // Entries of objects gone are dropped as they are met.
    for (auto it = objects_.begin(); it != objects_.end();) {
      if (!it->second.making && it->second.object.expired() &&
          it->first != k) {
        it = objects_.erase(it);
      } else {
        ++it;
      }
    }
    while (true) {
      Entry& e = objects_[k];
      if (std::shared_ptr<void> live = e.object.lock()) return live;
      if (!e.making) {
        e.making = true;
        break;
      }
      made_.Wait(&mu_);
    }
  }
  absl::StatusOr<std::shared_ptr<void>> made = make();
  absl::MutexLock lock(&mu_);
  Entry& e = objects_[k];
  e.making = false;
  if (made.ok()) {
    e.object = *made;
  } else {
    objects_.erase(k);
  }
  made_.SignalAll();
  return made;
}

size_t SharedWork::Count(const std::string& kind) const {
  absl::MutexLock lock(&mu_);
  size_t n = 0;
  for (const auto& [k, e] : objects_) n += k.first == kind && !e.object.expired();
  return n;
}

absl::StatusOr<std::shared_ptr<const SharedWork::Charge>>
SharedWork::ChargeModel(uint64_t bytes, const std::string& what) {
  absl::MutexLock lock(&budget_->mu);
  if (bytes > budget_->max_bytes - std::min(budget_->held, budget_->max_bytes)) {
    return absl::ResourceExhaustedError(absl::StrCat(
        what, " takes about ", bytes, " bytes loaded; loaded models hold ",
        budget_->held, " of the daemon's ", budget_->max_bytes,
        " (--max-model-bytes): close streams of other models, share one "
        "model between jobs, or raise --max-model-bytes"));
  }
  budget_->held += bytes;
  return std::shared_ptr<const Charge>(new Charge(budget_, bytes));
}

uint64_t SharedWork::model_bytes() const {
  absl::MutexLock lock(&budget_->mu);
  return budget_->held;
}

uint64_t SharedWork::max_model_bytes() const { return budget_->max_bytes; }

}  // namespace batchd

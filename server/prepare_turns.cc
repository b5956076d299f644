// Turns at making streams, per owner; see prepare_turns.h.
#include "server/prepare_turns.h"

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"

namespace batchd {

PrepareTurns::Turn& PrepareTurns::Turn::operator=(Turn&& other) noexcept {
  if (this != &other) {
    if (turns_ != nullptr) turns_->Give(owner_);
    turns_ = other.turns_;
    owner_ = other.owner_;
    other.turns_ = nullptr;
  }
  return *this;
}

PrepareTurns::Turn::~Turn() {
  if (turns_ != nullptr) turns_->Give(owner_);
}

absl::StatusOr<PrepareTurns::Turn> PrepareTurns::Take(
    uint64_t owner, const Cancellation* cancel) {
  absl::MutexLock lock(&mu_);
  while (taken_[owner] >= per_owner_) {
    if (cancel == nullptr) {
      given_.Wait(&mu_);
      continue;
    }
    if (cancel->cancelled()) {
      if (taken_[owner] == 0) taken_.erase(owner);
      return absl::CancelledError(absl::StrCat(
          "stopped waiting for a turn to make a stream (", per_owner_,
          " of the same owner are being made): ", cancel->status().message()));
    }
    // Bounded, to see the cancellation of a caller that goes meanwhile.
    given_.WaitWithTimeout(&mu_, absl::Milliseconds(50));
  }
  ++taken_[owner];
  return Turn(this, owner);
}

PrepareTurns::Turn PrepareTurns::TryTake(uint64_t owner) {
  absl::MutexLock lock(&mu_);
  int& taken = taken_[owner];
  if (taken >= per_owner_) return Turn();
  ++taken;
  return Turn(this, owner);
}

void PrepareTurns::SetOnGiven(std::function<void(uint64_t owner)> on_given) {
  on_given_ = std::move(on_given);
}

int PrepareTurns::taken(uint64_t owner) const {
  absl::MutexLock lock(&mu_);
  auto it = taken_.find(owner);
  return it == taken_.end() ? 0 : it->second;
}

void PrepareTurns::Give(uint64_t owner) {
  {
    absl::MutexLock lock(&mu_);
    auto it = taken_.find(owner);
    if (--it->second == 0) taken_.erase(it);
    given_.SignalAll();
  }
  if (on_given_) on_given_(owner);
}

}  // namespace batchd

// Epoch permutations and batch slicing; see sampler.h.
#include "server/sampler.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "workloads/counter_rng.h"

namespace batchd {

EpochPermutation::EpochPermutation(uint64_t n, uint64_t seed, uint64_t epoch)
    : n_(n) {
  int bits = 0;
  while (bits < 64 && (uint64_t(1) << bits) < n) ++bits;
  if (bits % 2) ++bits;
  half_bits_ = bits / 2;
  half_mask_ = half_bits_ == 0 ? 0 : (uint64_t(1) << half_bits_) - 1;
  for (int r = 0; r < kRounds; ++r) {
    keys_[r] = Mix64(Mix64(seed ^ 0x6261746368640000ULL) ^ Mix64(epoch) ^
                     (uint64_t(r) << 56));
  }
}

uint64_t EpochPermutation::Encrypt(uint64_t x) const {
  uint64_t left = x >> half_bits_, right = x & half_mask_;
  for (int r = 0; r < kRounds; ++r) {
    const uint64_t f = Mix64(right ^ keys_[r]) & half_mask_;
    const uint64_t next = left ^ f;
    left = right;
    right = next;
  }
  return (left << half_bits_) | right;
}

uint64_t EpochPermutation::operator()(uint64_t position) const {
  // Cycle walking: the Feistel network permutes [0, 4^half_bits); following
  // the cycle until it lands in [0, n) permutes [0, n). n > 4^(h-1), so the
  // expected number of steps is below 4.
  uint64_t x = position;
  do {
    x = Encrypt(x);
  } while (x >= n_);
  return x;
}

absl::StatusOr<Sampler> Sampler::Create(uint64_t num_examples,
                                        uint64_t global_batch_size,
                                        uint32_t world_size, uint64_t seed,
                                        bool shuffle) {
  if (world_size == 0) {
    return absl::InvalidArgumentError("world_size must be at least 1");
  }
  if (global_batch_size == 0) {
    return absl::InvalidArgumentError("global_batch_size must be at least 1");
  }
  if (global_batch_size % world_size != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "global_batch_size ", global_batch_size,
        " is not divisible by world_size ", world_size,
        ": every rank must get the same number of examples"));
  }
  if (num_examples == 0) {
    return absl::InvalidArgumentError("the data set has no examples");
  }
  if (shuffle && num_examples < global_batch_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the data set has ", num_examples,
        " examples, fewer than one global batch of ", global_batch_size,
        " (training drops the remainder of each epoch)"));
  }
  return Sampler(num_examples, global_batch_size, world_size, seed, shuffle);
}

Sampler::Sampler(uint64_t n, uint64_t g, uint32_t w, uint64_t seed,
                 bool shuffle)
    : n_(n), g_(g), w_(w), seed_(seed), shuffle_(shuffle) {
  steps_per_epoch_ = shuffle ? n / g : (n + g - 1) / g;
}

RankSlice Sampler::Slice(uint64_t step, uint32_t rank) const {
  RankSlice s;
  s.epoch = shuffle_ ? step / steps_per_epoch_ : 0;
  const uint64_t in_epoch = shuffle_ ? step % steps_per_epoch_ : step;
  s.count = g_ / w_;
  s.first_position = in_epoch * g_ + uint64_t(rank) * s.count;
  return s;
}

uint64_t Sampler::ExampleId(uint64_t epoch, uint64_t position) const {
  if (!shuffle_) return position;
  // Constructing the permutation is a handful of hashes: cheaper than
  // caching one per epoch and sharing it between threads.
  return EpochPermutation(n_, seed_, epoch)(position);
}

EpochOrder PackedSchedule::Order(uint64_t epoch) const {
  EpochOrder order;
  order.seed = seed_;
  order.epoch = epoch;
  order.num_examples = n_;
  order.id_at = [perm = EpochPermutation(n_, seed_, epoch)](uint64_t p) {
    return perm(p);
  };
  return order;
}

absl::Status PackedSchedule::Anchor(uint64_t step, const RowCursor& cursor) {
  absl::StatusOr<uint64_t> row =
      workload_.RowAtCursor(Order(cursor.epoch), cursor);
  if (!row.ok()) return row.status();
  if (*row % g_ != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "start_cursor (", cursor.epoch, ", ", cursor.window, ", ", cursor.row,
        ") is row ", *row, " of its epoch, not the first row of a global "
        "batch of ", g_, ": take the cursor of rank 0's batch"));
  }
  std::lock_guard<std::mutex> lock(mu_);
  anchor_step_ = step;
  anchor_epoch_ = cursor.epoch;
  anchor_row_ = *row;
  ends_.clear();
  return absl::OkStatus();
}

PackedSchedule::~PackedSchedule() {
  std::thread t;
  {
    std::lock_guard<std::mutex> lock(mu_);
    cancelled_ = true;
    t = std::move(thread_);
  }
  if (t.joinable()) t.join();
}

void PackedSchedule::Cancel() {
  std::lock_guard<std::mutex> lock(mu_);
  cancelled_ = true;
  counted_.notify_all();
}

absl::Status PackedSchedule::CheckReachable(uint64_t step) const {
  std::lock_guard<std::mutex> lock(mu_);
  return Reachable(step);
}

absl::Status PackedSchedule::Reachable(uint64_t step) const {
  if (step < anchor_step_) return absl::OkStatus();  // Find refuses it
  // epochs >= (step - anchor) * G / N; in 128 bits, so nothing wraps.
  const unsigned __int128 need =
      (unsigned __int128)(step - anchor_step_) * g_ / n_;
  if (need > kMaxReplayEpochs) {
    return absl::FailedPreconditionError(absl::StrCat(
        "step ", step, " lies more than ", kMaxReplayEpochs, " epochs of ",
        n_, " examples past step ", anchor_step_,
        ": batchd replays at most that many epochs to find a step; resume "
        "from the batch's cursor (start_cursor) instead"));
  }
  return absl::OkStatus();
}

absl::StatusOr<PackedSchedule::Location> PackedSchedule::Find(
    uint64_t step) const {
  if (step < anchor_step_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "step ", step, " precedes step ", anchor_step_,
        " where this stream was resumed from a cursor"));
  }
  if (ends_.empty() || ends_.back() <= step) {
    return absl::UnavailableError(
        absl::StrCat("step ", step, " is being prepared"));
  }
  // Epochs are few; a linear scan from the end is fine.
  uint64_t i = ends_.size() - 1;
  while (i > 0 && ends_[i - 1] > step) --i;
  Location loc;
  loc.epoch = anchor_epoch_ + i;
  const uint64_t first_step = i == 0 ? anchor_step_ : ends_[i - 1];
  loc.first_row = (i == 0 ? anchor_row_ : 0) + (step - first_step) * g_;
  return loc;
}

absl::StatusOr<PackedSchedule::Location> PackedSchedule::TryLocate(
    uint64_t step) {
  std::lock_guard<std::mutex> lock(mu_);
  absl::StatusOr<Location> loc = Find(step);
  if (loc.ok()) served_ = std::max(served_, loc->epoch - anchor_epoch_);
  if (loc.ok()) {
    // Count the next epoch while this one is served, so that crossing into
    // it does not stall the stream.
    if (loc->epoch + 1 != anchor_epoch_ + ends_.size()) return loc;
    target_ = std::max(target_, ends_.back());
  } else if (!absl::IsUnavailable(loc.status())) {
    return loc;
  } else {
    if (!error_.ok()) return error_;
    if (cancelled_) return absl::CancelledError("the stream is closing");
    if (absl::Status s = Reachable(step); !s.ok()) return s;
    target_ = std::max(target_, step);
  }
  if (!counting_ && !cancelled_ && error_.ok()) {
    counting_ = true;
    if (thread_.joinable()) thread_.join();  // it has left CountLoop
    thread_ = std::thread([this] { CountLoop(); });
  }
  return loc;
}

absl::StatusOr<PackedSchedule::Location> PackedSchedule::Locate(
    uint64_t step) {
  for (;;) {
    absl::StatusOr<Location> loc = TryLocate(step);
    if (!absl::IsUnavailable(loc.status())) return loc;
    std::unique_lock<std::mutex> lock(mu_);
    counted_.wait_for(lock, std::chrono::milliseconds(100));
  }
}

void PackedSchedule::CountLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!cancelled_ && error_.ok() &&
         (ends_.empty() || ends_.back() <= target_)) {
    if (ends_.size() >= served_ + kMaxReplayEpochs) {
      // Rows hold several examples each, so the bound of CheckReachable
      // can let through a step that lies further out still.
      error_ = absl::FailedPreconditionError(absl::StrCat(
          "step ", target_, " lies more than ", kMaxReplayEpochs,
          " epochs past step ", anchor_step_,
          ": batchd replays at most that many epochs to find a step; resume "
          "from the batch's cursor (start_cursor) instead"));
      break;
    }
    const uint64_t epoch = anchor_epoch_ + ends_.size();
    const bool first = ends_.empty();
    const uint64_t skipped = anchor_row_ / g_;
    lock.unlock();
    // The slow part, without the lock: only this thread appends to ends_.
    absl::StatusOr<uint64_t> rows = workload_.RowsInEpoch(Order(epoch));
    lock.lock();
    if (!rows.ok()) {
      error_ = rows.status();
      break;
    }
    uint64_t steps = *rows / g_;
    if (steps == 0) {
      error_ = absl::InvalidArgumentError(absl::StrCat(
          "epoch ", epoch, " packs into ", *rows,
          " rows, fewer than one global batch of ", g_));
      break;
    }
    if (first) {
      if (skipped >= steps) {
        error_ = absl::InvalidArgumentError(absl::StrCat(
            "start_cursor is at row ", anchor_row_, " but epoch ", epoch,
            " has only ", steps, " global batches"));
        break;
      }
      steps -= skipped;
    }
    ends_.push_back((first ? anchor_step_ : ends_.back()) + steps);
    counted_.notify_all();
  }
  counting_ = false;
  counted_.notify_all();
}

}  // namespace batchd

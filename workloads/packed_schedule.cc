// Packed rows' schedule; see packed_schedule.h.
#include "workloads/packed_schedule.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace batchd {

absl::Status PackedSchedule::Ready(uint64_t step) {
  return TryLocate(step).status();
}

absl::StatusOr<StepItems> PackedSchedule::Locate(uint64_t step, uint32_t rank) {
  absl::StatusOr<Location> loc = TryLocate(step);
  if (!loc.ok()) return loc.status();
  StepItems items;
  items.epoch = loc->epoch;
  items.first = loc->first_row + uint64_t(rank) * per_rank_;
  items.count = per_rank_;
  items.valid = per_rank_;
  items.epoch_first_step = loc->epoch_first_step;
  items.epoch_steps = loc->epoch_steps;
  // The batch is where its first row is.
  absl::StatusOr<RowCursor> cursor =
      packer_.CursorOfRow(Order(loc->epoch), items.first);
  if (!cursor.ok()) return cursor.status();
  items.cursor = *cursor;
  return items;
}

ItemRef PackedSchedule::Item(const StepItems& items, uint64_t i) const {
  ItemRef item;
  item.seed = seed_;
  item.epoch = items.epoch;
  item.position = items.first + i;
  item.id = item.position;
  return item;
}

bool PackedSchedule::ExamplesOf(uint64_t step, uint32_t rank,
                                std::vector<ExampleKey>* keys) {
  Location loc;
  {
    absl::MutexLock lock(&mu_);
    absl::StatusOr<Location> found = Find(step);
    if (!found.ok()) return false;
    loc = *found;
  }
  // With each key's row, kept for ExamplesOfItem.
  const uint64_t first = loc.first_row + uint64_t(rank) * per_rank_;
  ListedRows listed;
  listed.count = per_rank_;
  if (!packer_.KeysOfRows(Order(loc.epoch), first, per_rank_, &listed.keys)) {
    return false;
  }
  for (const auto& [row, key] : listed.keys) keys->push_back(key);
  Keep(loc.epoch, first, std::move(listed));
  return true;
}

void PackedSchedule::Keep(uint64_t epoch, uint64_t first,
                          ListedRows listed) const {
  absl::MutexLock lock(&rows_mu_);
  const auto at = std::make_pair(epoch, first);
  auto it = row_keys_.find(at);
  if (it == row_keys_.end()) {
    listed_.push_back(at);
  } else {
    listed_keys_ -= it->second.keys.size();
  }
  listed_keys_ += listed.keys.size();
  row_keys_.insert_or_assign(at, std::move(listed));
  while (listed_.size() > 1 && (listed_keys_ > kKeptBatches * g_ ||
                                listed_.size() > kKeptListings)) {
    listed_keys_ -= row_keys_[listed_.front()].keys.size();
    row_keys_.erase(listed_.front());
    listed_.pop_front();
  }
}

bool PackedSchedule::FindListed(uint64_t epoch, uint64_t row,
                                std::vector<ExampleKey>* keys) const {
  absl::MutexLock lock(&rows_mu_);
  // The listed batch holding the row: the last starting at or before it.
  auto it = row_keys_.upper_bound({epoch, row});
  if (it == row_keys_.begin()) return false;
  --it;
  if (it->first.first != epoch || row - it->first.second >= it->second.count) {
    return false;
  }
  const auto& rk = it->second.keys;
  auto k = std::lower_bound(
      rk.begin(), rk.end(), row,
      [](const auto& e, uint64_t r) { return e.first < r; });
  for (; k != rk.end() && k->first == row; ++k) keys->push_back(k->second);
  return true;
}

bool PackedSchedule::ExamplesOfItem(const StepItems& items, uint64_t i,
                                    std::vector<ExampleKey>* keys) const {
  const uint64_t row = items.first + i;
  if (FindListed(items.epoch, row, keys)) return true;
  // Not listed ahead (the read-ahead reads inline, or is behind): the
  // rank's batch is listed now, once for all its rows.
  ListedRows listed;
  listed.count = items.count;
  if (!packer_.KeysOfRows(Order(items.epoch), items.first, items.count,
                          &listed.keys)) {
    return packer_.ExamplesOfRows(Order(items.epoch), row, 1, keys);
  }
  Keep(items.epoch, items.first, std::move(listed));
  return FindListed(items.epoch, row, keys);
}

absl::Status PackedSchedule::Anchor(uint64_t step, const RowCursor& cursor,
                                    bool any_rank) {
  if (absl::Status s = packer_.CheckCursor(n_, cursor); !s.ok()) return s;
  absl::MutexLock lock(&mu_);
  anchor_step_ = step;
  anchor_epoch_ = cursor.epoch;
  anchor_row_ = 0;
  anchor_pending_ = true;
  pending_cursor_ = cursor;
  pending_any_rank_ = any_rank;
  ends_.clear();
  partial_rows_ = 0;
  return absl::OkStatus();
}

bool PackedSchedule::ResolveAnchor() {
  const RowCursor cursor = pending_cursor_;
  const bool any_rank = pending_any_rank_;
  mu_.Unlock();
  // The slow part (the packer may learn the epoch up to the cursor),
  // without the lock: only this task resolves the anchor.
  absl::StatusOr<uint64_t> row =
      packer_.RowAtCursor(Order(cursor.epoch), cursor, &stop_);
  if (row.ok() && (any_rank || *row % g_ == 0)) {
    absl::Status s =
        packer_.PrepareFrom(Order(cursor.epoch), *row - *row % g_, &stop_);
    if (!s.ok()) row = s;
  }
  mu_.Lock();
  if (cancelled_) return false;
  if (!row.ok()) {
    SetError(row.status());
    return false;
  }
  if (any_rank) *row -= *row % g_;  // the first row of its global batch
  if (*row % g_ != 0) {
    SetError(absl::InvalidArgumentError(
        absl::StrCat("start_cursor (", cursor.epoch, ", ", cursor.window, ", ",
                     cursor.row, ") is row ", *row,
                     " of its epoch, not the first row of a global "
                     "batch of ",
                     g_, ": take the cursor of rank 0's batch")));
    return false;
  }
  anchor_row_ = *row;
  anchor_pending_ = false;
  return true;
}

PackedSchedule::~PackedSchedule() {
  {
    absl::MutexLock lock(&mu_);
    cancelled_ = true;
    stop_.store(true);
  }
  scope_.Close();  // a queued count never starts; a running one ends
}

void PackedSchedule::Cancel() {
  absl::MutexLock lock(&mu_);
  cancelled_ = true;
  stop_.store(true);
}

void PackedSchedule::SetError(const absl::Status& error) {
  // Ready's contract gives these codes meanings of their own.
  if (absl::IsUnavailable(error) || absl::IsOutOfRange(error)) {
    error_ = absl::InternalError(error.message());
  } else {
    error_ = error;
  }
}

absl::Status PackedSchedule::CheckReachable(uint64_t step) const {
  absl::MutexLock lock(&mu_);
  return Reachable(step);
}

absl::Status PackedSchedule::Reachable(uint64_t step) const {
  if (step < anchor_step_) return absl::OkStatus();  // Find refuses it
  // epochs >= (step - anchor) * G / (N * max rows per example); in 128
  // bits, so nothing wraps.
  const unsigned __int128 need =
      (unsigned __int128)(step - anchor_step_) * g_ /
      ((unsigned __int128)n_ * packer_.max_rows_per_example());
  if (need > kMaxReplayEpochs) {
    return absl::FailedPreconditionError(absl::StrCat(
        "step ", step, " lies more than ", kMaxReplayEpochs, " epochs of ", n_,
        " examples past step ", anchor_step_,
        ": batchd replays at most that many epochs to find a step; resume "
        "from the batch's cursor (start_cursor) instead"));
  }
  return absl::OkStatus();
}

absl::StatusOr<PackedSchedule::Location> PackedSchedule::Find(
    uint64_t step) const {
  if (step < anchor_step_) {
    return absl::InvalidArgumentError(
        absl::StrCat("step ", step, " precedes step ", anchor_step_,
                     " where this stream was resumed from a cursor"));
  }
  if (anchor_pending_) {
    return absl::UnavailableError(
        absl::StrCat("step ", step,
                     " is being prepared (finding the row of "
                     "the cursor this stream resumes at)"));
  }
  if (ends_.empty() || ends_.back() <= step) {
    // In the epoch being counted: located if its rows are known already.
    const uint64_t first_step = ends_.empty() ? anchor_step_ : ends_.back();
    const uint64_t first_row = ends_.empty() ? anchor_row_ : 0;
    if (partial_rows_ > first_row &&
        (partial_rows_ - first_row) / g_ > step - first_step) {
      Location loc;
      loc.epoch = anchor_epoch_ + ends_.size();
      loc.first_row = first_row + (step - first_step) * g_;
      // An anchor's row begins a global batch: the steps before it are
      // the epoch's first anchor_row_ / G.
      loc.epoch_first_step = first_step - first_row / g_;
      return loc;
    }
    return absl::UnavailableError(
        absl::StrCat("step ", step, " is being prepared"));
  }
  // Epochs are few; a linear scan from the end is fine.
  uint64_t i = ends_.size() - 1;
  while (i > 0 && ends_[i - 1] > step) --i;
  Location loc;
  loc.epoch = anchor_epoch_ + i;
  const uint64_t first_step = i == 0 ? anchor_step_ : ends_[i - 1];
  const uint64_t first_row = i == 0 ? anchor_row_ : 0;
  loc.first_row = first_row + (step - first_step) * g_;
  loc.epoch_first_step = first_step - first_row / g_;
  loc.epoch_steps = ends_[i] - loc.epoch_first_step;
  return loc;
}

absl::StatusOr<PackedSchedule::Location> PackedSchedule::TryLocate(
    uint64_t step) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<Location> loc = Find(step);
  if (loc.ok()) served_ = std::max(served_, loc->epoch - anchor_epoch_);
  if (loc.ok()) {
    const uint64_t counting = anchor_epoch_ + ends_.size();
    if (loc->epoch == counting) {
      // A partly known epoch: learn its next steps while this one is served.
      target_ = std::max(target_, step + kLookaheadSteps);
    } else if (loc->epoch + 1 == counting) {
      // Count the next epoch while this one is served, so that crossing into
      // it does not stall the stream.
      target_ = std::max(target_, ends_.back());
    } else {
      return loc;
    }
  } else if (!absl::IsUnavailable(loc.status())) {
    return loc;
  } else {
    if (!error_.ok()) return error_;
    if (cancelled_) return absl::CancelledError("the stream is closing");
    if (absl::Status s = Reachable(step); !s.ok()) return s;
    target_ = std::max(target_, step);
  }
  if (!counting_ && !cancelled_ && error_.ok()) SubmitCount();
  if (!loc.ok() && !error_.ok()) return error_;
  return loc;
}

bool PackedSchedule::SubmitCount() {
  counting_ = true;
  absl::Status queued = scope_.Submit([this] { CountStep(); });
  if (queued.ok()) return true;
  counting_ = false;
  if (!cancelled_) {
    SetError(absl::Status(queued.code(),
                          absl::StrCat("cannot count the epochs of this "
                                       "stream: ",
                                       queued.message())));
  }
  return false;
}

void PackedSchedule::CountStep() {
  absl::MutexLock lock(&mu_);
  if (anchor_pending_ && (cancelled_ || !error_.ok() || !ResolveAnchor())) {
    counting_ = false;
    return;
  }
  // One epoch a task: other streams' counts take turns on the executor.
  if (CountEpoch() && !cancelled_ && error_.ok() &&
      (ends_.empty() || ends_.back() <= target_)) {
    if (SubmitCount()) return;
  }
  counting_ = false;
}

bool PackedSchedule::CountEpoch() {
  if (cancelled_ || !error_.ok() ||
      !(ends_.empty() || ends_.back() <= target_)) {
    return false;
  }
  if (ends_.size() >= served_ + kMaxReplayEpochs) {
    // Rows hold several examples each, so the bound of CheckReachable can
    // let through a step that lies further out still.
    SetError(absl::FailedPreconditionError(absl::StrCat(
        "step ", target_, " lies more than ", kMaxReplayEpochs,
        " epochs past step ", anchor_step_,
        ": batchd replays at most that many epochs to find a step; resume "
        "from the batch's cursor (start_cursor) instead")));
    return false;
  }
  const uint64_t epoch = anchor_epoch_ + ends_.size();
  const bool first = ends_.empty();
  const uint64_t skipped = anchor_row_ / g_;
  // The rows up to target_ in this epoch (all of it if target_ is later;
  // the packer stops at the epoch's end). No overflow: Reachable bounds
  // target_ - first step by N * max_rows_per_example * kMaxReplayEpochs / G.
  const uint64_t first_step = first ? anchor_step_ : ends_.back();
  const uint64_t want =
      (first ? anchor_row_ : 0) + (target_ - first_step + 1) * g_;
  mu_.Unlock();
  // The slow part, without the lock: only this task appends to ends_.
  absl::StatusOr<RowPacking::KnownRows> known =
      packer_.RowsUpTo(Order(epoch), want, &stop_);
  mu_.Lock();
  if (!known.ok()) {
    SetError(known.status());
    return false;
  }
  if (!known->complete) {
    partial_rows_ = std::max(partial_rows_, known->rows);
    // Learnt as far as asked: go on only if a later step was asked for
    // meanwhile; otherwise the next TryLocate beyond these rows submits
    // the count again.
    const uint64_t want_now =
        (first ? anchor_row_ : 0) + (target_ - first_step + 1) * g_;
    return known->rows >= want && known->rows < want_now;
  }
  partial_rows_ = 0;
  uint64_t steps = known->rows / g_;
  if (steps == 0) {
    SetError(absl::InvalidArgumentError(
        absl::StrCat("epoch ", epoch, " packs into ", known->rows,
                     " rows, fewer than one global batch of ", g_)));
    return false;
  }
  if (first) {
    if (skipped >= steps) {
      SetError(absl::InvalidArgumentError(
          absl::StrCat("start_cursor is at row ", anchor_row_, " but epoch ",
                       epoch, " has only ", steps, " global batches")));
      return false;
    }
    steps -= skipped;
  }
  ends_.push_back((first ? anchor_step_ : ends_.back()) + steps);
  return true;
}

}  // namespace batchd

// The example schedule and the defaults of Schedule; see schedule.h.
#include "workloads/schedule.h"

#include <algorithm>

namespace batchd {

absl::Status Schedule::Anchor(uint64_t step, const RowCursor& cursor,
                              bool any_rank) {
  return absl::InvalidArgumentError(
      "start_cursor is for row-packing streams (wmt train); this stream "
      "resumes by start_step");
}

absl::Status Schedule::CheckReachable(uint64_t step) const {
  return absl::OkStatus();
}

bool Schedule::ExamplesOf(uint64_t step, uint32_t rank,
                          std::vector<ExampleKey>* keys) {
  if (!Ready(step).ok()) return false;
  absl::StatusOr<StepItems> items = Locate(step, rank);
  if (!items.ok()) return false;
  for (uint64_t i = 0; i < items->valid; ++i) {
    const ItemRef item = Item(*items, i);
    keys->push_back({item.epoch, item.position, item.id});
  }
  return true;
}

bool Schedule::ExamplesOfItem(const StepItems& items, uint64_t i,
                              std::vector<ExampleKey>* keys) const {
  if (!items_are_examples()) return false;
  const ItemRef item = Item(items, i);
  if (item.valid) keys->push_back({item.epoch, item.position, item.id});
  return true;
}

absl::Status ExampleSchedule::Ready(uint64_t step) {
  if (sampler_.Finite() && step >= sampler_.steps_per_epoch()) {
    return absl::OutOfRangeError("the evaluation pass has ended");
  }
  return absl::OkStatus();
}

absl::StatusOr<StepItems> ExampleSchedule::Locate(uint64_t step,
                                                  uint32_t rank) {
  const RankSlice slice = sampler_.Slice(step, rank);
  StepItems items;
  items.epoch = slice.epoch;
  items.first = slice.first_position;
  items.count = slice.count;
  const uint64_t n = sampler_.num_examples();
  items.valid = sampler_.shuffle() ? slice.count
                : slice.first_position >= n
                    ? 0
                    : std::min<uint64_t>(slice.count, n - slice.first_position);
  items.cursor.epoch = slice.epoch;
  items.cursor.window =
      sampler_.shuffle() ? step % sampler_.steps_per_epoch() : step;
  // A shuffled stream's epochs are steps_per_epoch long, back to back; an
  // evaluation pass is the one epoch.
  const uint64_t steps = sampler_.steps_per_epoch();
  items.epoch_first_step = sampler_.shuffle() ? step - step % steps : 0;
  items.epoch_steps = steps;
  return items;
}

ItemRef ExampleSchedule::Item(const StepItems& items, uint64_t i) const {
  ItemRef item;
  item.seed = sampler_.seed();
  item.epoch = items.epoch;
  item.position = items.first + i;
  item.valid = i < items.valid;
  item.id = item.valid ? sampler_.ExampleId(items.epoch, item.position) : 0;
  return item;
}

}  // namespace batchd

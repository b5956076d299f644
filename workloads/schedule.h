// Where the items of every batch come from. A stream's batches are made of
// items: examples of the sampler's order (most workloads) or rows packed
// from several examples (WMT training). The stream's Schedule says, for
// global step s and rank r, which items of which epoch make up rank r's
// slice of batch s, and where the batch sits (its cursor); the engine fills
// each item with one Workload::FillItem call. One loop serves every kind of
// stream; only the schedule differs.
//
// Thread safety: every Schedule method may be called from any thread at
// once (the engine calls Ready under its lock, Locate and Item on workers).
#ifndef BATCHD_WORKLOADS_SCHEDULE_H_
#define BATCHD_WORKLOADS_SCHEDULE_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "workloads/sampler.h"

namespace batchd {

// Where a batch sits: the cursor of the determinism contract. For packed
// rows: (epoch, window, row within the window) of the batch's first row,
// and resuming from it is exact and O(1). For examples: (epoch, step within
// the epoch, 0).
struct RowCursor {
  uint64_t epoch = 0;
  uint64_t window = 0;
  uint64_t row = 0;
};

// One item to write, and the key of its randomness.
struct ItemRef {
  uint64_t seed = 0;
  uint64_t epoch = 0;
  uint64_t position = 0;  // in the epoch's item order (example or row)
  uint64_t id = 0;        // the example id, or the row (meaningless if !valid)
  bool valid = true;      // false: padding of the last eval batch
};

// Rank r's items of global step s: items [first, first + count) of the
// epoch's item order, of which the first `valid` are real (the rest pads
// the last batch of an evaluation pass).
struct StepItems {
  uint64_t epoch = 0;
  uint64_t first = 0;
  uint64_t count = 0;
  uint64_t valid = 0;
  RowCursor cursor;  // where the batch begins (its first item)
  // The batch's epoch in global steps: its first step and how many it
  // holds, so that a client ends an epoch's loop at its last batch.
  // epoch_steps 0: not known yet (a packed epoch still being counted); a
  // schedule leaves it unknown only for a step that is not its epoch's
  // last.
  uint64_t epoch_first_step = 0;
  uint64_t epoch_steps = 0;
};

// An example that an item reads from storage (workloads/fill_context.h):
// unique per (epoch, position, id, kind) within a stream; the read-ahead
// keys its reads by it.
struct ExampleKey {
  // What `id` numbers. kExample: an example of the stream, as its items name
  // it. kSubstitute: an entry of the workload's store read in place of one
  // that could not be decoded (ImageNet); a stream that serves a subset of
  // its store numbers the two differently.
  enum class Kind : uint8_t { kExample, kSubstitute };
  uint64_t epoch = 0;
  uint64_t position = 0;
  uint64_t id = 0;
  Kind kind = Kind::kExample;

  bool operator==(const ExampleKey& o) const {
    return epoch == o.epoch && position == o.position && id == o.id &&
           kind == o.kind;
  }
};

class Schedule {
 public:
  virtual ~Schedule() = default;

  // Whether `step` can be located now; never waits, and is cheap (the
  // engine asks under its lock). OK: Locate will answer. Unavailable: the
  // step is being prepared elsewhere (not on the caller's thread); ask
  // again later. OutOfRange: past the end of a finite stream. Any other
  // error is final (the data cannot reach `step`, or counting failed).
  virtual absl::Status Ready(uint64_t step) = 0;
  // Rank `rank`'s items of `step`, once Ready(step) said OK.
  virtual absl::StatusOr<StepItems> Locate(uint64_t step, uint32_t rank) = 0;
  // Item `i` (< items.count) of a located step: what FillItem is given.
  virtual ItemRef Item(const StepItems& items, uint64_t i) const = 0;
  // Global batches per epoch; 0 when epochs differ (packed rows).
  virtual uint64_t steps_per_epoch() const = 0;

  // Resume from a cursor: `cursor` is a row of the batch of step `step`
  // (any rank's when `any_rank`, else the batch's first row, rank 0's);
  // earlier steps are then unknown. Call before the first Ready. Default:
  // InvalidArgument (the stream resumes by step).
  virtual absl::Status Anchor(uint64_t step, const RowCursor& cursor,
                              bool any_rank);
  // Whether batches' cursors are what a resume names (Anchor works).
  // Default: false.
  virtual bool resumes_by_cursor() const { return false; }
  // FailedPrecondition when the schedule refuses to look for `step` (too
  // far to replay); checked at OpenStream, before any work. Default: OK.
  virtual absl::Status CheckReachable(uint64_t step) const;
  // Stops background preparation soon (the stream is closing); Ready then
  // fails for steps not yet prepared. Default: nothing to stop.
  virtual void Cancel() {}

  // Read-ahead: appends the examples rank `rank`'s items of `step` read,
  // in the order FillItem reads them (padding left out). False when they
  // are not known now: the step is past the end of a finite stream, or not
  // located yet (ask again later). Never waits and is cheap: the read-ahead
  // stage asks under its lock. Default: the items' own (epoch, position,
  // id), once Ready(step) is OK (items that are examples).
  virtual bool ExamplesOf(uint64_t step, uint32_t rank,
                          std::vector<ExampleKey>* keys);
  // Whether each valid item is one example that FillItem reads under the
  // item's own key (FillContext::key()). Default: true (items are the
  // sampler's examples).
  virtual bool items_are_examples() const { return true; }
  // The examples item i of `items` reads, in the order FillItem reads them:
  // with read-ahead on, the engine reads them before FillItem and hands
  // them in the context, so that FillItem makes no read of its own. False
  // when they are not known now (the item then reads through the context).
  // Never waits. Default: the item's own key, for items that are examples.
  virtual bool ExamplesOfItem(const StepItems& items, uint64_t i,
                              std::vector<ExampleKey>* keys) const;
};

// Items are the examples of the sampler's order, pure arithmetic: rank r's
// slice of step s is Sampler::Slice(s, r); the cursor is (epoch, step
// within the epoch, 0) for training and (0, step, 0) for evaluation.
class ExampleSchedule : public Schedule {
 public:
  explicit ExampleSchedule(const Sampler& sampler) : sampler_(sampler) {}

  absl::Status Ready(uint64_t step) override;
  absl::StatusOr<StepItems> Locate(uint64_t step, uint32_t rank) override;
  ItemRef Item(const StepItems& items, uint64_t i) const override;
  uint64_t steps_per_epoch() const override {
    return sampler_.steps_per_epoch();
  }

 private:
  const Sampler sampler_;
};

}  // namespace batchd

#endif  // BATCHD_WORKLOADS_SCHEDULE_H_

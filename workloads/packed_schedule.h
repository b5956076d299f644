// The schedule of a workload whose items are rows packed from the examples
// of an epoch, in the epoch's order (WMT training): global batch s of an
// epoch is rows [sG, (s+1)G) of it, and the remainder of each epoch is
// dropped, as for examples. How many rows an epoch holds is known only by
// looking at every example of it, so steps map to epochs by a running sum
// that this schedule counts, epoch by epoch, as serving work of the daemon's
// executor (base/executor.h).
#ifndef BATCHD_WORKLOADS_PACKED_SCHEDULE_H_
#define BATCHD_WORKLOADS_PACKED_SCHEDULE_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "base/executor.h"
#include "workloads/sampler.h"
#include "workloads/schedule.h"
#include "workloads/workload.h"

namespace batchd {

// What a row-packing workload tells its schedule: the rows of an epoch and
// where each sits. Rows are deterministic in (seed, epoch).
//
// Thread safety: every method may be called from any thread at once.
class RowPacking {
 public:
  // Set when the caller no longer wants the answer (its schedule is
  // cancelled or goes): slow learning checks it between blocks and ends
  // with Cancelled. May be null: never stopped.
  using StopFlag = std::atomic<bool>;

  virtual ~RowPacking() = default;
  // Rows the epoch packs into. May be slow (it may have to look at every
  // example's length): PackedSchedule calls it once per epoch, from its
  // counting task only. The one place that learns an epoch's size.
  virtual absl::StatusOr<uint64_t> RowsInEpoch(
      const EpochOrder& order) const = 0;
  // What is known of an epoch's rows so far, for serving its first steps
  // before its size is: a workload that learns lengths progressively knows
  // a prefix of the epoch's rows (the rows it has, which never change) long
  // before the last. `complete`: rows is the epoch's row count.
  struct KnownRows {
    uint64_t rows = 0;
    bool complete = false;
  };
  // Learns the epoch's rows at least up to `want_rows` (or its end, if
  // fewer) and says what is known. Called from the counting task only (a
  // task of the executor: it must do work, never wait for other tasks);
  // may be slow, but should only do work in proportion to `want_rows`
  // while the epoch's size is unknown. CursorOfRow, FillRow and
  // ExamplesOfRows must then work for every row below `rows`. Default:
  // RowsInEpoch, complete.
  virtual absl::StatusOr<KnownRows> RowsUpTo(const EpochOrder& order,
                                             uint64_t want_rows,
                                             const StopFlag* stop) const {
    absl::StatusOr<uint64_t> rows = RowsInEpoch(order);
    if (!rows.ok()) return rows.status();
    return KnownRows{*rows, true};
  }
  // Where row `row` of the epoch sits; OutOfRange past the epoch's rows.
  virtual absl::StatusOr<RowCursor> CursorOfRow(const EpochOrder& order,
                                                uint64_t row) const = 0;
  // The row of its epoch that `cursor` names (the inverse of CursorOfRow),
  // for resuming from a cursor without replaying earlier epochs;
  // InvalidArgument when the cursor is not in the epoch. May be slow (it
  // may learn the epoch up to the cursor): called from the counting task.
  virtual absl::StatusOr<uint64_t> RowAtCursor(const EpochOrder& order,
                                               const RowCursor& cursor,
                                               const StopFlag* stop) const = 0;
  // The schedule resumes at `row` of the epoch: RowAtCursor's row, moved to
  // the first row of its global batch (an earlier row when the cursor was
  // another rank's). Learns what serving rows from there needs that
  // RowAtCursor did not (a workload that learnt only from the cursor on).
  // May be slow: called from the counting task, after RowAtCursor.
  // Default: nothing to learn.
  virtual absl::Status PrepareFrom(const EpochOrder& order, uint64_t row,
                                   const StopFlag* stop) const {
    return absl::OkStatus();
  }
  // The most rows one example can give (a workload whose examples are
  // blocks of many rows says so); bounds how far a step can lie. Default:
  // 1 (a row holds at least one example).
  virtual uint64_t max_rows_per_example() const { return 1; }
  // InvalidArgument when no epoch of `num_examples` examples can hold
  // `cursor` (a window or row beyond the most there can be); cheap, and
  // learns nothing, so that a far cursor is refused at once. Default: OK.
  virtual absl::Status CheckCursor(uint64_t num_examples,
                                   const RowCursor& cursor) const {
    return absl::OkStatus();
  }
  // Writes row `row` of the epoch into out[k] (one row's bytes of tensor
  // k), counting drops into `counters` (may be null).
  virtual absl::Status FillRow(const EpochOrder& order, uint64_t row,
                               uint8_t* const* out,
                               WorkloadCounters* counters) const = 0;
  // Read-ahead: appends the examples that FillRow reads for rows
  // [first_row, first_row + count) of the epoch, in its order, keyed by
  // (epoch, position in the epoch's order, id). False when they are not
  // known without waiting (the epoch's layout is not at hand). Never waits
  // for I/O or for a pass over the data. Default: false (not read ahead).
  virtual bool ExamplesOfRows(const EpochOrder& order, uint64_t first_row,
                              uint64_t count,
                              std::vector<ExampleKey>* keys) const {
    return false;
  }
  // ExamplesOfRows with the row of each key: (row, key) for rows
  // [first_row, first_row + count), in row order. Default: row by row; a
  // workload whose rows mostly read nothing (a key per block of thousands
  // of rows) answers for the range at once.
  virtual bool KeysOfRows(
      const EpochOrder& order, uint64_t first_row, uint64_t count,
      std::vector<std::pair<uint64_t, ExampleKey>>* out) const {
    std::vector<ExampleKey> keys;
    for (uint64_t r = first_row; r < first_row + count; ++r) {
      keys.clear();
      if (!ExamplesOfRows(order, r, 1, &keys)) return false;
      for (const ExampleKey& k : keys) out->emplace_back(r, k);
    }
    return true;
  }
};

// Where the steps of a RowPacking workload fall: epoch e holds
// RowsInEpoch(e) / G global batches, so step s maps to (epoch, first row)
// by the running sum over epochs. Row counts are asked once per epoch and
// kept. Items are rows: ItemRef::position and ::id are the row of the epoch.
//
// Counting epochs is slow, so it runs as a task of the daemon's executor
// (serving work), submitted on demand and again after each epoch, so that
// the streams counting at once share the executor's threads epoch by epoch:
// Ready never waits for it, and Cancel stops it between two epochs. A
// stream resuming far ahead thus never holds a worker of the engine's pool
// and starts no thread, and shutdown waits at most for the epoch being
// counted.
//
// Every final error (of the packer, of the executor) reaches Ready as one:
// codes that Ready's contract gives a meaning (Unavailable: being
// prepared; OutOfRange: the end of a finite stream) are turned into
// Internal, so that a failed count never reads as a stream that waits or
// ended.
//
// The epoch being counted may be served before its count is known: the
// task asks the packer for its rows up to the steps asked for
// (RowsUpTo), and a step whose rows are all known is located. Every step
// located this way is where the full count puts it: a step's place depends
// only on the rows before it. Once such a step is served, the task learns
// kLookaheadSteps further, so a stream reading its first epoch while its
// data is still being indexed does not wait at every step.
//
// Thread safety: thread-safe. mu_ is only ever held for bookkeeping, never
// while the workload counts. `packer` and `executor` must outlive the
// schedule.
class PackedSchedule : public Schedule {
 public:
  // `executor` counts the epochs (WorkloadConfig::pool()); null: counting
  // cannot be queued and the stream fails with the reason.
  PackedSchedule(const RowPacking& packer, const Sampler& sampler,
                 Executor* executor)
      : packer_(packer),
        n_(sampler.num_examples()),
        g_(sampler.global_batch_size()),
        per_rank_(sampler.per_rank_batch()),
        seed_(sampler.seed()),
        scope_(executor, Priority::kServing) {}
  // Cancels counting, and waits for the epoch being counted.
  ~PackedSchedule() override;

  // A row holds at least one example, so an epoch holds at most N / G
  // global batches: a step needs at least (step - anchor) * G / N epochs
  // counted first. Steps that need more than this many are refused.
  static constexpr uint64_t kMaxReplayEpochs = 10000;
  // Steps learnt ahead of the latest one served in a partly known epoch.
  static constexpr uint64_t kLookaheadSteps = 16;

  absl::Status Ready(uint64_t step) override;
  // The rank's rows and the cursor of its first row (asked of the packer).
  absl::StatusOr<StepItems> Locate(uint64_t step, uint32_t rank) override;
  ItemRef Item(const StepItems& items, uint64_t i) const override;
  uint64_t steps_per_epoch() const override { return 0; }
  // Resumes at the cursor's row, without looking at earlier epochs; the
  // batch is the global batch that row falls in (any rank's row when
  // `any_rank`; otherwise the row must begin it: rank 0's cursor). Only
  // the packer's CheckCursor runs here (a cursor no epoch can hold is
  // refused at once); the row is found by the counting task, on the
  // executor, and steps are being prepared (Unavailable) until it is: a
  // far cursor never holds the caller (a request thread, a lock).
  absl::Status Anchor(uint64_t step, const RowCursor& cursor,
                      bool any_rank) override;
  bool resumes_by_cursor() const override { return true; }
  absl::Status CheckReachable(uint64_t step) const override;
  void Cancel() override;
  // The pairs of the rank's rows, from the packer, when the step is
  // located (its epoch counted); never starts counting.
  bool items_are_examples() const override { return false; }
  bool ExamplesOf(uint64_t step, uint32_t rank,
                  std::vector<ExampleKey>* keys) override;
  // The pairs of one row, so that the engine hands a row's pairs in the
  // context: as ExamplesOf listed them for the read-ahead, else its rank
  // batch is listed now (KeysOfRows), once for all its rows.
  bool ExamplesOfItem(const StepItems& items, uint64_t i,
                      std::vector<ExampleKey>* keys) const override;

  struct Location {
    uint64_t epoch = 0;
    uint64_t first_row = 0;  // of the global batch, within its epoch
    // The epoch's first global step, and its steps (0 while the epoch is
    // being counted).
    uint64_t epoch_first_step = 0;
    uint64_t epoch_steps = 0;
  };
  // The location of `step` if the epochs up to it are counted. Otherwise
  // Unavailable ("being prepared"), and the counting task works towards
  // it; other errors are final.
  absl::StatusOr<Location> TryLocate(uint64_t step);
  // The order of an epoch's examples, as the packer sees it.
  EpochOrder Order(uint64_t epoch) const {
    return ShuffledOrder(n_, seed_, epoch);
  }

 private:
  // Location of `step` from ends_, or Unavailable.
  absl::StatusOr<Location> Find(uint64_t step) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  absl::Status Reachable(uint64_t step) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Submits CountStep; false, with error_ set, when it cannot be queued.
  bool SubmitCount() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The counting task: one epoch (or the part of it asked for), then
  // submits itself again while more is wanted.
  void CountStep() ABSL_LOCKS_EXCLUDED(mu_);
  // Counts one epoch; false when counting should stop. Releases mu_ while
  // the packer counts.
  bool CountEpoch() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Finds the anchor's row (pending_anchor_); false, with error_ set,
  // when it cannot. Releases mu_ while the packer looks.
  bool ResolveAnchor() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sets error_, with a code Ready gives no other meaning.
  void SetError(const absl::Status& error) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const RowPacking& packer_;
  const uint64_t n_, g_, per_rank_, seed_;
  mutable absl::Mutex mu_;
  // The schedule starts at (anchor_step_, anchor_epoch_, anchor_row_):
  // (0, 0, 0) unless resumed from a cursor.
  uint64_t anchor_step_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t anchor_epoch_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t anchor_row_ ABSL_GUARDED_BY(mu_) = 0;
  // Anchor's cursor while its row is not found yet (anchor_row_ unknown).
  bool anchor_pending_ ABSL_GUARDED_BY(mu_) = false;
  RowCursor pending_cursor_ ABSL_GUARDED_BY(mu_);
  bool pending_any_rank_ ABSL_GUARDED_BY(mu_) = false;
  // ends_[i]: first step after epoch anchor_epoch_ + i.
  std::vector<uint64_t> ends_ ABSL_GUARDED_BY(mu_);
  // Count until ends_.back() > target_.
  uint64_t target_ ABSL_GUARDED_BY(mu_) = 0;
  // Rows known so far of the epoch being counted (anchor_epoch_ +
  // ends_.size()), from RowsUpTo; 0 once it is counted.
  uint64_t partial_rows_ ABSL_GUARDED_BY(mu_) = 0;
  // Index in ends_ of the latest epoch a step was located in: counting
  // stops kMaxReplayEpochs past it.
  uint64_t served_ ABSL_GUARDED_BY(mu_) = 0;
  // A counting task is queued or runs.
  bool counting_ ABSL_GUARDED_BY(mu_) = false;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  // cancelled_, for the packer while it counts or looks without mu_.
  RowPacking::StopFlag stop_{false};
  absl::Status error_ ABSL_GUARDED_BY(mu_);  // final
  // The keys of the rank batches ExamplesOf listed, by (epoch, first
  // row): each with its rows and the (row, key) of those that read
  // (KeysOfRows). Oldest first in listed_; at most kKeptBatches global
  // batches' rows' worth of keys, and kKeptListings listings (the
  // read-ahead lists steps well ahead when most rows read nothing).
  static constexpr uint64_t kKeptBatches = 16;
  static constexpr size_t kKeptListings = 4096;
  struct ListedRows {
    uint64_t count = 0;
    std::vector<std::pair<uint64_t, ExampleKey>> keys;
  };
  // Keeps a listing, the oldest dropped past the bounds.
  void Keep(uint64_t epoch, uint64_t first, ListedRows listed) const
      ABSL_LOCKS_EXCLUDED(rows_mu_);
  // The keys of `row` if a listing holds it.
  bool FindListed(uint64_t epoch, uint64_t row,
                  std::vector<ExampleKey>* keys) const
      ABSL_LOCKS_EXCLUDED(rows_mu_);
  mutable absl::Mutex rows_mu_;
  mutable std::map<std::pair<uint64_t, uint64_t>, ListedRows> row_keys_
      ABSL_GUARDED_BY(rows_mu_);
  mutable std::deque<std::pair<uint64_t, uint64_t>> listed_
      ABSL_GUARDED_BY(rows_mu_);
  mutable uint64_t listed_keys_ ABSL_GUARDED_BY(rows_mu_) = 0;
  // Last: the counting task refers to everything above.
  TaskScope scope_;
};

}  // namespace batchd

#endif  // BATCHD_WORKLOADS_PACKED_SCHEDULE_H_

// The global order of the determinism contract, as pure arithmetic: which
// example sits at which position of which epoch, and which positions make up
// rank r's slice of global batch s. No I/O and no per-example state, so a
// data set of 10^8 examples costs the same as one of 10^3.
//
// Thread safety: both classes are immutable after construction.
#ifndef BATCHD_SERVER_SAMPLER_H_
#define BATCHD_SERVER_SAMPLER_H_

#include <cstdint>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "workloads/workload.h"

namespace batchd {

// A pseudo-random bijection of [0, n) chosen by (seed, epoch): a balanced
// Feistel network on the smallest even-bit power of two >= n, with cycle
// walking back into [0, n). O(1) memory; a few hashes per lookup.
class EpochPermutation {
 public:
  EpochPermutation(uint64_t n, uint64_t seed, uint64_t epoch);
  // The example id at `position` (< n).
  uint64_t operator()(uint64_t position) const;
  uint64_t size() const { return n_; }

 private:
  static constexpr int kRounds = 6;
  uint64_t Encrypt(uint64_t x) const;

  uint64_t n_;
  int half_bits_;
  uint64_t half_mask_;
  uint64_t keys_[kRounds];
};

struct RankSlice {
  uint64_t epoch = 0;
  uint64_t first_position = 0;  // position in the epoch of element 0
  uint64_t count = 0;           // elements in the slice (G / W)
};

class Sampler {
 public:
  // shuffle: training order (permuted per epoch, repeating for ever, the
  // remainder of each epoch dropped). Otherwise evaluation order: one pass in
  // file order, the last global batch padded past num_examples.
  static absl::StatusOr<Sampler> Create(uint64_t num_examples,
                                        uint64_t global_batch_size,
                                        uint32_t world_size, uint64_t seed,
                                        bool shuffle);

  uint64_t num_examples() const { return n_; }
  uint64_t global_batch_size() const { return g_; }
  uint32_t world_size() const { return w_; }
  uint64_t per_rank_batch() const { return g_ / w_; }
  bool shuffle() const { return shuffle_; }
  // Full global batches per epoch (training) or batches of the single pass,
  // the last possibly padded (evaluation).
  uint64_t steps_per_epoch() const { return steps_per_epoch_; }
  // Evaluation streams end after this many steps; training never does.
  bool Finite() const { return !shuffle_; }

  RankSlice Slice(uint64_t step, uint32_t rank) const;
  // The example at `position` of `epoch`; positions >= num_examples are
  // padding (evaluation only) and have no id.
  uint64_t ExampleId(uint64_t epoch, uint64_t position) const;

 private:
  Sampler(uint64_t n, uint64_t g, uint32_t w, uint64_t seed, bool shuffle);
  uint64_t n_, g_;
  uint32_t w_;
  uint64_t seed_;
  bool shuffle_;
  uint64_t steps_per_epoch_;
};

// Where the steps of a row-packing workload fall: epoch e holds
// RowsInEpoch(e) / G global batches (the remainder dropped, as for examples),
// so step s maps to (epoch, first row) by the running sum over epochs. Row
// counts are asked of the workload once per epoch and kept.
//
// Counting epochs is slow (each looks at every example's length), so it
// runs on the schedule's own thread, started on demand: TryLocate never
// waits for it, and Cancel stops it between two epochs. A stream resuming
// far ahead thus never holds a worker of the shared pool, and shutdown
// waits at most for the epoch being counted.
//
// Thread safety: thread-safe. mu_ is only ever held for bookkeeping, never
// while the workload counts.
class PackedSchedule {
 public:
  PackedSchedule(const Workload& workload, uint64_t num_examples,
                 uint64_t global_batch_size, uint64_t seed)
      : workload_(workload),
        n_(num_examples),
        g_(global_batch_size),
        seed_(seed) {}
  ~PackedSchedule();  // cancels and joins the counting thread

  // A row holds at least one example, so an epoch holds at most N / G
  // global batches: a step needs at least (step - anchor) * G / N epochs
  // counted first. Steps that need more than this many are refused.
  static constexpr uint64_t kMaxReplayEpochs = 10000;

  struct Location {
    uint64_t epoch = 0;
    uint64_t first_row = 0;  // of the global batch, within its epoch
  };
  // The location of `step` if the epochs up to it are counted. Otherwise
  // Unavailable ("being prepared"), and the counting thread works towards
  // it; other errors are final (the data cannot reach `step`, or the
  // workload failed).
  absl::StatusOr<Location> TryLocate(uint64_t step);
  // TryLocate, waiting for the counting thread (tests and tools).
  absl::StatusOr<Location> Locate(uint64_t step);
  // FailedPrecondition when `step` needs more than kMaxReplayEpochs epochs
  // replayed from the anchor; checked at OpenStream, before any work.
  absl::Status CheckReachable(uint64_t step) const;
  // Stops the counting thread after the epoch it counts (does not wait);
  // TryLocate then fails for steps not yet counted.
  void Cancel();
  // The order of an epoch's examples, as the workload sees it.
  EpochOrder Order(uint64_t epoch) const;
  // Resume from a cursor: step `step` begins at `cursor`, found through the
  // workload without looking at earlier epochs; earlier steps are then
  // unknown. Call before the first Locate.
  absl::Status Anchor(uint64_t step, const RowCursor& cursor);

 private:
  // Location of `step` from ends_, or Unavailable. Requires mu_.
  absl::StatusOr<Location> Find(uint64_t step) const;
  absl::Status Reachable(uint64_t step) const;  // requires mu_
  void CountLoop();  // the counting thread

  const Workload& workload_;
  const uint64_t n_, g_, seed_;
  mutable std::mutex mu_;
  std::condition_variable counted_;  // signalled after each epoch
  // The schedule starts at (anchor_step_, anchor_epoch_, anchor_row_):
  // (0, 0, 0) unless resumed from a cursor. Guarded by mu_.
  uint64_t anchor_step_ = 0, anchor_epoch_ = 0, anchor_row_ = 0;
  // ends_[i]: first step after epoch anchor_epoch_ + i. Guarded by mu_.
  std::vector<uint64_t> ends_;
  // Count until ends_.back() > target_. Guarded by mu_.
  uint64_t target_ = 0;
  // Index in ends_ of the latest epoch a step was located in: counting
  // stops kMaxReplayEpochs past it. Guarded by mu_.
  uint64_t served_ = 0;
  bool counting_ = false;   // the thread runs; guarded by mu_
  bool cancelled_ = false;  // guarded by mu_
  absl::Status error_;      // final; guarded by mu_
  std::thread thread_;      // guarded by mu_
};

}  // namespace batchd

#endif  // BATCHD_SERVER_SAMPLER_H_

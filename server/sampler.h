// The global order of the determinism contract, as pure arithmetic: which
// example sits at which position of which epoch, and which positions make up
// rank r's slice of global batch s. No I/O and no per-example state, so a
// data set of 10^8 examples costs the same as one of 10^3.
//
// Thread safety: both classes are immutable after construction.
#ifndef BATCHD_SERVER_SAMPLER_H_
#define BATCHD_SERVER_SAMPLER_H_

#include <cstdint>
#include <mutex>
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
// Thread safety: thread-safe; Locate may run RowsInEpoch (slow) under its own
// lock, never under the engine's.
class PackedSchedule {
 public:
  PackedSchedule(const Workload& workload, uint64_t num_examples,
                 uint64_t global_batch_size, uint64_t seed)
      : workload_(workload),
        n_(num_examples),
        g_(global_batch_size),
        seed_(seed) {}

  struct Location {
    uint64_t epoch = 0;
    uint64_t first_row = 0;  // of the global batch, within its epoch
  };
  absl::StatusOr<Location> Locate(uint64_t step);
  // The order of an epoch's examples, as the workload sees it.
  EpochOrder Order(uint64_t epoch) const;
  // Resume from a cursor: step `step` begins at `cursor`, found through the
  // workload without looking at earlier epochs; earlier steps are then
  // unknown. Call before the first Locate.
  absl::Status Anchor(uint64_t step, const RowCursor& cursor);

 private:
  const Workload& workload_;
  const uint64_t n_, g_, seed_;
  std::mutex mu_;
  // The schedule starts at (anchor_step_, anchor_epoch_, anchor_row_):
  // (0, 0, 0) unless resumed from a cursor. Guarded by mu_.
  uint64_t anchor_step_ = 0, anchor_epoch_ = 0, anchor_row_ = 0;
  // ends_[i]: first step after epoch anchor_epoch_ + i. Guarded by mu_.
  std::vector<uint64_t> ends_;
};

}  // namespace batchd

#endif  // BATCHD_SERVER_SAMPLER_H_

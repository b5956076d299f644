// The global order of the determinism contract, as pure arithmetic: which
// example sits at which position of which epoch, and which positions make up
// rank r's slice of global batch s. No I/O and no per-example state, so a
// data set of 10^8 examples costs the same as one of 10^3.
//
// Thread safety: both classes are immutable after construction.
#ifndef BATCHD_WORKLOADS_SAMPLER_H_
#define BATCHD_WORKLOADS_SAMPLER_H_

#include <cstdint>
#include <functional>

#include "absl/status/statusor.h"

namespace batchd {

// A pseudo-random bijection of [0, n) chosen by (seed, epoch): a balanced
// Feistel network on the smallest even-bit power of two >= n, with cycle
// walking back into [0, n). O(1) memory; a few hashes per lookup.
class EpochPermutation {
 public:
  EpochPermutation(uint64_t n, uint64_t seed, uint64_t epoch);
  // The example id at `position` (< n).
  uint64_t operator()(uint64_t position) const;
  // out[i] = (*this)(first + i) for i < count (first + count <= n): the same
  // function, with eight positions in flight at once, about twice as fast
  // for long ranges.
  void Fill(uint64_t first, uint64_t count, uint64_t* out) const;
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
  // file order, the last global batch padded past num_examples. Whether an
  // epoch holds a global batch is the schedule's to say (its items may be
  // rows packed from the examples): Schedule::CheckReachable.
  static absl::StatusOr<Sampler> Create(uint64_t num_examples,
                                        uint64_t global_batch_size,
                                        uint32_t world_size, uint64_t seed,
                                        bool shuffle);

  uint64_t num_examples() const { return n_; }
  uint64_t global_batch_size() const { return g_; }
  uint32_t world_size() const { return w_; }
  uint64_t per_rank_batch() const { return g_ / w_; }
  uint64_t seed() const { return seed_; }
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

// The example order of one shuffled epoch, as a function: what a workload
// that packs the examples of an epoch into rows is given.
struct EpochOrder {
  uint64_t seed = 0;
  uint64_t epoch = 0;
  uint64_t num_examples = 0;
  std::function<uint64_t(uint64_t)> id_at;  // position in epoch -> example id
  // Optional: out[i] = id_at(first + i) for i < count, faster (EpochIds).
  std::function<void(uint64_t first, uint64_t count, uint64_t* out)> ids_at;
};

// out[i] = order.id_at(first + i) for i < count, through ids_at if set.
void EpochIds(const EpochOrder& order, uint64_t first, uint64_t count,
              uint64_t* out);

// Epoch `epoch`'s order of n examples under `seed`: EpochPermutation's.
EpochOrder ShuffledOrder(uint64_t n, uint64_t seed, uint64_t epoch);

}  // namespace batchd

#endif  // BATCHD_WORKLOADS_SAMPLER_H_

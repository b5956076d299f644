// Epoch permutations and batch slicing; see sampler.h.
#include "workloads/sampler.h"

#include <algorithm>

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

void EpochPermutation::Fill(uint64_t first, uint64_t count,
                            uint64_t* out) const {
  // Lanes: the positions in flight and where each goes. Every round is run
  // on all lanes at once (independent chains the CPU overlaps); a lane
  // whose value landed in [0, n) is written out and takes the next
  // position, the others walk their cycle on.
  constexpr int kLanes = 8;
  uint64_t x[kLanes] = {}, slot[kLanes] = {};
  int active = 0;
  uint64_t next = first;
  const uint64_t end = first + count;
  for (; active < kLanes && next < end; ++active, ++next) {
    x[active] = next;
    slot[active] = next - first;
  }
  while (active > 0) {
    uint64_t left[kLanes], right[kLanes];
    for (int l = 0; l < kLanes; ++l) {
      left[l] = x[l] >> half_bits_;
      right[l] = x[l] & half_mask_;
    }
    for (int r = 0; r < kRounds; ++r) {
      for (int l = 0; l < kLanes; ++l) {
        const uint64_t f = Mix64(right[l] ^ keys_[r]) & half_mask_;
        const uint64_t next_right = left[l] ^ f;
        left[l] = right[l];
        right[l] = next_right;
      }
    }
    for (int l = 0; l < kLanes; ++l) x[l] = (left[l] << half_bits_) | right[l];
    for (int l = 0; l < active; ++l) {
      if (x[l] >= n_) continue;  // walks on
      out[slot[l]] = x[l];
      if (next < end) {
        x[l] = next;
        slot[l] = next - first;
        ++next;
      } else {  // the last lane takes this one's place
        --active;
        x[l] = x[active];
        slot[l] = slot[active];
        --l;
      }
    }
  }
}

void EpochIds(const EpochOrder& order, uint64_t first, uint64_t count,
              uint64_t* out) {
  if (order.ids_at) return order.ids_at(first, count, out);
  for (uint64_t i = 0; i < count; ++i) out[i] = order.id_at(first + i);
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
  return Sampler(num_examples, global_batch_size, world_size, seed, shuffle);
}

Sampler::Sampler(uint64_t n, uint64_t g, uint32_t w, uint64_t seed,
                 bool shuffle)
    : n_(n), g_(g), w_(w), seed_(seed), shuffle_(shuffle) {
  // At least 1: an epoch of fewer examples than a batch (their rows make
  // the batches; the schedule knows them) must not divide by zero.
  steps_per_epoch_ = shuffle ? std::max<uint64_t>(1, n / g) : (n + g - 1) / g;
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

EpochOrder ShuffledOrder(uint64_t n, uint64_t seed, uint64_t epoch) {
  EpochOrder order;
  order.seed = seed;
  order.epoch = epoch;
  order.num_examples = n;
  const EpochPermutation perm(n, seed, epoch);
  order.id_at = [perm](uint64_t p) { return perm(p); };
  order.ids_at = [perm](uint64_t first, uint64_t count, uint64_t* out) {
    perm.Fill(first, count, out);
  };
  return order;
}

}  // namespace batchd

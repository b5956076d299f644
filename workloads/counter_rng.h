// Counter-based random numbers: Philox4x32-10 (Salmon et al., "Parallel
// random numbers: as easy as 1, 2, 3", SC'11). Each example's randomness is a
// pure function of (seed, epoch, position), so it never depends on which
// thread, process or node produced the example, nor on what came before.
//
// Thread safety: ExampleRng is a small value; use one per example.
#ifndef BATCHD_WORKLOADS_COUNTER_RNG_H_
#define BATCHD_WORKLOADS_COUNTER_RNG_H_

#include <array>
#include <cstdint>

namespace batchd {

// One Philox4x32-10 block: 4 words from a 128-bit counter and a 64-bit key.
inline std::array<uint32_t, 4> Philox4x32(std::array<uint32_t, 4> ctr,
                                          uint64_t key) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  uint32_t k0 = uint32_t(key), k1 = uint32_t(key >> 32);
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = uint64_t(kM0) * ctr[0];
    const uint64_t p1 = uint64_t(kM1) * ctr[2];
    ctr = {uint32_t(p1 >> 32) ^ ctr[1] ^ k0, uint32_t(p1),
           uint32_t(p0 >> 32) ^ ctr[3] ^ k1, uint32_t(p0)};
    k0 += kW0;
    k1 += kW1;
  }
  return ctr;
}

// A stateless 64-bit mix (SplitMix64's finaliser), for keys and hashes.
inline uint64_t Mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

// The random stream of one example: words i = 0, 1, 2, ... of the Philox
// stream keyed by the seed, with the counter (position, epoch, i).
class ExampleRng {
 public:
  ExampleRng(uint64_t seed, uint64_t epoch, uint64_t position)
      : key_(Mix64(seed)), epoch_(epoch), position_(position) {}

  uint32_t NextU32() {
    if (used_ == 4) {
      block_ = Philox4x32({uint32_t(position_), uint32_t(position_ >> 32),
                           uint32_t(epoch_), uint32_t(block_index_++)},
                          key_);
      used_ = 0;
    }
    return block_[used_++];
  }
  uint64_t NextU64() {
    const uint64_t hi = NextU32();
    return (hi << 32) | NextU32();
  }
  // Uniform in [0, 1) with 53 bits.
  double Uniform() { return double(NextU64() >> 11) * 0x1.0p-53; }
  // Uniform in [lo, hi).
  double Uniform(double lo, double hi) { return lo + (hi - lo) * Uniform(); }

 private:
  uint64_t key_;
  uint64_t epoch_;
  uint64_t position_;
  uint64_t block_index_ = 0;
  std::array<uint32_t, 4> block_{};
  int used_ = 4;
};

}  // namespace batchd

#endif  // BATCHD_WORKLOADS_COUNTER_RNG_H_

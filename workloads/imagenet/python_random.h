// CPython's `random.Random(seed).shuffle(x)`, bit for bit, for the example
// subsets AlgoPerf draws with it: its PyTorch imagenet_resnet workload picks
// eval_train as
//
//   indices = list(range(self.num_train_examples))
//   random.Random(int(data_rng[0])).shuffle(indices)
//   dataset = Subset(dataset, indices[:self.num_eval_train_examples])
//
// so matching that subset needs CPython's generator, not any MT19937: its
// seeding (init_by_array over the 32-bit words of |seed|), its
// getrandbits(k) (the top k bits of one 32-bit output for k <= 32) and its
// _randbelow (redraw while >= n) all shape the result.
//
// Thread safety: a PythonRandom is a value; use one per thread.
#ifndef BATCHD_WORKLOADS_IMAGENET_PYTHON_RANDOM_H_
#define BATCHD_WORKLOADS_IMAGENET_PYTHON_RANDOM_H_

#include <cstdint>
#include <utility>
#include <vector>

namespace batchd {

class PythonRandom {
 public:
  // random.Random(seed) for a non-negative integer seed (CPython's
  // random_seed: init_by_array over |seed|'s 32-bit words, least significant
  // first; 0 is the one word 0).
  explicit PythonRandom(uint64_t seed) {
    uint32_t key[2] = {uint32_t(seed), uint32_t(seed >> 32)};
    InitByArray(key, key[1] != 0 ? 2 : 1);
  }

  uint32_t NextU32() {
    if (index_ >= kN) Twist();
    uint32_t y = state_[index_++];
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    y ^= y >> 18;
    return y;
  }

  // random.getrandbits(k), 1 <= k <= 32.
  uint32_t GetRandBits(int k) { return NextU32() >> (32 - k); }

  // random._randbelow(n) (_randbelow_with_getrandbits), n >= 1.
  uint64_t RandBelow(uint64_t n) {
    int k = 0;
    while (k < 64 && (n >> k) != 0) ++k;  // n.bit_length()
    uint64_t r = GetRandBits(k);
    while (r >= n) r = GetRandBits(k);
    return r;
  }

  // random.shuffle(x): for i in reversed(range(1, len(x))), swap x[i] with
  // x[_randbelow(i + 1)]. Sizes below 2^32, as getrandbits(k <= 32) needs.
  template <typename T>
  void Shuffle(std::vector<T>* x) {
    for (size_t i = x->size(); i-- > 1;) {
      std::swap((*x)[i], (*x)[RandBelow(i + 1)]);
    }
  }

 private:
  static constexpr int kN = 624;
  static constexpr int kM = 397;

  void InitGenrand(uint32_t s) {
    state_[0] = s;
    for (int i = 1; i < kN; ++i) {
      state_[i] =
          1812433253u * (state_[i - 1] ^ (state_[i - 1] >> 30)) + uint32_t(i);
    }
    index_ = kN;
  }

  void InitByArray(const uint32_t* key, int key_length) {
    InitGenrand(19650218u);
    int i = 1, j = 0;
    for (int k = kN > key_length ? kN : key_length; k > 0; --k) {
      state_[i] =
          (state_[i] ^ ((state_[i - 1] ^ (state_[i - 1] >> 30)) * 1664525u)) +
          key[j] + uint32_t(j);
      ++i;
      ++j;
      if (i >= kN) {
        state_[0] = state_[kN - 1];
        i = 1;
      }
      if (j >= key_length) j = 0;
    }
    for (int k = kN - 1; k > 0; --k) {
      state_[i] = (state_[i] ^
                   ((state_[i - 1] ^ (state_[i - 1] >> 30)) * 1566083941u)) -
                  uint32_t(i);
      ++i;
      if (i >= kN) {
        state_[0] = state_[kN - 1];
        i = 1;
      }
    }
    state_[0] = 0x80000000u;  // MSB is 1, assuring a non-zero initial array
  }

  void Twist() {
    for (int k = 0; k < kN; ++k) {
      const uint32_t y =
          (state_[k] & 0x80000000u) | (state_[(k + 1) % kN] & 0x7fffffffu);
      state_[k] =
          state_[(k + kM) % kN] ^ (y >> 1) ^ ((y & 1u) ? 0x9908b0dfu : 0u);
    }
    index_ = 0;
  }

  uint32_t state_[kN];
  int index_ = kN;
};

}  // namespace batchd

#endif  // BATCHD_WORKLOADS_IMAGENET_PYTHON_RANDOM_H_

// The sampler's arithmetic: permutations are bijections chosen by
// (seed, epoch), slices tile each global batch, and nothing scales with N.
#include "workloads/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <set>
#include <vector>

#include "workloads/counter_rng.h"

namespace batchd {
namespace {

TEST(EpochPermutationTest, IsABijectionForManySizes) {
  for (uint64_t n : {1, 2, 3, 5, 16, 17, 255, 256, 1000, 4097, 65537}) {
    EpochPermutation perm(n, 42, 3);
    std::vector<bool> seen(n, false);
    for (uint64_t p = 0; p < n; ++p) {
      const uint64_t id = perm(p);
      ASSERT_LT(id, n);
      ASSERT_FALSE(seen[id]) << "n=" << n << " id " << id << " twice";
      seen[id] = true;
    }
  }
}

TEST(EpochPermutationTest, FillIsTheSameFunction) {
  for (uint64_t n : {1, 2, 3, 5, 16, 17, 255, 256, 1000, 4097, 65537}) {
    for (uint64_t seed : {0, 9}) {
      EpochPermutation perm(n, seed, 4);
      // Every range shape: empty, shorter and longer than the lanes, and
      // starting anywhere.
      for (uint64_t first : {uint64_t(0), n / 3, n - 1}) {
        for (uint64_t count : {0, 1, 7, 8, 9, 100, 100000}) {
          count = std::min(count, n - first);
          std::vector<uint64_t> got(count + 1, ~uint64_t(0));
          perm.Fill(first, count, got.data());
          for (uint64_t i = 0; i < count; ++i) {
            ASSERT_EQ(got[i], perm(first + i))
                << "n=" << n << " first " << first << " i " << i;
          }
          EXPECT_EQ(got[count], ~uint64_t(0));  // nothing past the range
        }
      }
    }
  }
  const EpochOrder order = ShuffledOrder(1000, 5, 2);
  std::vector<uint64_t> ids(1000);
  EpochIds(order, 0, 1000, ids.data());
  for (uint64_t p = 0; p < 1000; ++p) EXPECT_EQ(ids[p], order.id_at(p));
  EpochOrder plain = order;
  plain.ids_at = nullptr;  // id_at alone
  std::vector<uint64_t> again(1000);
  EpochIds(plain, 0, 1000, again.data());
  EXPECT_EQ(again, ids);
}

TEST(EpochPermutationTest, DependsOnSeedAndEpochOnly) {
  const uint64_t n = 5000;
  auto order = [&](uint64_t seed, uint64_t epoch) {
    EpochPermutation perm(n, seed, epoch);
    std::vector<uint64_t> v(n);
    for (uint64_t p = 0; p < n; ++p) v[p] = perm(p);
    return v;
  };
  EXPECT_EQ(order(7, 0), order(7, 0));
  EXPECT_NE(order(7, 0), order(7, 1));
  EXPECT_NE(order(7, 0), order(8, 0));
  // A shuffle, not the identity or a rotation.
  std::vector<uint64_t> v = order(7, 0);
  size_t fixed = 0;
  for (uint64_t p = 0; p < n; ++p) fixed += v[p] == p;
  EXPECT_LT(fixed, 20u);
}

TEST(EpochPermutationTest, ServesAHundredMillionExamplesWithoutState) {
  // O(1) memory: sampling positions of a 10^8 data set stays in range and
  // distinct over a sample.
  const uint64_t n = 100000000;
  EpochPermutation perm(n, 1, 0);
  EXPECT_LE(sizeof(perm), 128u);
  std::set<uint64_t> ids;
  for (uint64_t p = 0; p < 100000; ++p) {
    const uint64_t id = perm(p * 997 % n);
    ASSERT_LT(id, n);
    ids.insert(id);
  }
  EXPECT_EQ(ids.size(), 100000u);
}

TEST(SamplerTest, RefusesIndivisibleBatch) {
  absl::StatusOr<Sampler> s = Sampler::Create(1000, 30, 4, 0, true);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("not divisible by world_size"),
            std::string::npos);
}

TEST(SamplerTest, SlicesTileGlobalBatchesAndDropRemainder) {
  const uint64_t n = 1000, g = 96;
  for (uint32_t w : {1u, 2u, 3u, 4u, 8u}) {
    absl::StatusOr<Sampler> s = Sampler::Create(n, g, w, 5, true);
    ASSERT_TRUE(s.ok());
    EXPECT_EQ(s->steps_per_epoch(), n / g);
    for (uint64_t step = 0; step < 2 * s->steps_per_epoch(); ++step) {
      for (uint32_t r = 0; r < w; ++r) {
        RankSlice sl = s->Slice(step, r);
        EXPECT_EQ(sl.epoch, step / (n / g));
        EXPECT_EQ(sl.count, g / w);
        EXPECT_EQ(sl.first_position, (step % (n / g)) * g + r * (g / w));
      }
    }
  }
}

TEST(SamplerTest, EvalOrderIsSequentialAndPadded) {
  absl::StatusOr<Sampler> s = Sampler::Create(100, 32, 2, 5, false);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->steps_per_epoch(), 4u);  // 32 + 32 + 32 + 4 real, 28 padding
  EXPECT_EQ(s->ExampleId(0, 57), 57u);
  EXPECT_EQ(s->Slice(3, 1).first_position, 3 * 32 + 16u);
}

TEST(ExampleRngTest, IsAPureFunctionOfSeedEpochPosition) {
  ExampleRng a(1, 2, 3), b(1, 2, 3), c(1, 2, 4), d(1, 3, 3), e(2, 2, 3);
  const uint64_t x = a.NextU64();
  EXPECT_EQ(x, b.NextU64());
  EXPECT_NE(x, c.NextU64());
  EXPECT_NE(x, d.NextU64());
  EXPECT_NE(x, e.NextU64());
  // Uniform() covers [0, 1) evenly enough.
  ExampleRng u(9, 9, 9);
  double sum = 0;
  for (int i = 0; i < 10000; ++i) {
    const double v = u.Uniform();
    ASSERT_GE(v, 0.0);
    ASSERT_LT(v, 1.0);
    sum += v;
  }
  EXPECT_NEAR(sum / 10000, 0.5, 0.02);
}

TEST(ExampleRngTest, PhiloxMatchesPublishedKnownAnswer) {
  // Random123's kat_vectors: philox4x32 10 rounds, counter and key all ones.
  std::array<uint32_t, 4> out = Philox4x32(
      {0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu},
      0xffffffffffffffffULL);
  EXPECT_EQ(out[0], 0x408f276du);
  EXPECT_EQ(out[1], 0x41c83b0eu);
  EXPECT_EQ(out[2], 0xa20bc7c6u);
  EXPECT_EQ(out[3], 0x6d5451fdu);
}

}  // namespace
}  // namespace batchd

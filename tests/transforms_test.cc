// Tests of the transform geometry: RandomResizedCrop's sampling against its
// exact distribution, torchvision's rounding, and the resampler.
#include "workloads/imagenet/transforms.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <vector>

#include "gtest/gtest.h"
#include "workloads/imagenet/resample.h"

namespace batchd {
namespace {

// The distribution of torchvision's get_params on a width x height image,
// integrated numerically: a try proposes (area fraction s ~ U(0.08, 1),
// log ratio ~ U(log 3/4, log 4/3)) and succeeds when the rounded box fits;
// the first success is the proposal conditioned on success, and with
// probability (1 - p)^10 the centre-crop fallback is taken. Cells: 8 bins
// of w/width x 8 bins of log(w/h).
constexpr int kBins = 8;

int Cell(int w, int h, int width) {
  const double lr = std::log(double(w) / h);
  const double lo = std::log(3.0 / 4.0) - 0.01, hi = std::log(4.0 / 3.0) + 0.01;
  int a = std::min(kBins - 1, int(kBins * double(w) / (width + 1)));
  int b = std::min(kBins - 1, std::max(0, int(kBins * (lr - lo) / (hi - lo))));
  return a * kBins + b;
}

std::vector<double> ExpectedCells(int width, int height) {
  const int grid = 1500;
  std::vector<double> mass(kBins * kBins, 0.0);
  double accepted = 0;
  const double area = double(width) * height;
  const double llo = std::log(3.0 / 4.0), lhi = std::log(4.0 / 3.0);
  for (int i = 0; i < grid; ++i) {
    const double s = 0.08 + (1 - 0.08) * (i + 0.5) / grid;
    for (int j = 0; j < grid; ++j) {
      const double r = std::exp(llo + (lhi - llo) * (j + 0.5) / grid);
      const int w = RoundHalfEven(std::sqrt(area * s * r));
      const int h = RoundHalfEven(std::sqrt(area * s / r));
      if (0 < w && w <= width && 0 < h && h <= height) {
        mass[Cell(w, h, width)] += 1;
        accepted += 1;
      }
    }
  }
  const double p = accepted / (double(grid) * grid);
  const double fallback = std::pow(1 - p, 10);
  ExampleRng unused(0, 0, 0);
  // The fallback box does not depend on the random draws that failed.
  RandomResizedCropParams params;
  params.scale_lo = params.scale_hi = 1e9;  // every try fails
  const CropBox fb = SampleRandomResizedCrop(width, height, params, &unused);
  for (double& m : mass) m = m / accepted * (1 - fallback);
  mass[Cell(fb.w, fb.h, width)] += fallback;
  return mass;
}

void CheckDistribution(int width, int height) {
  const int n = 100000;
  std::vector<double> seen(kBins * kBins, 0.0);
  std::vector<double> x_bins(10, 0.0);
  int x_count = 0;
  for (int p = 0; p < n; ++p) {
    ExampleRng rng(/*seed=*/1234, /*epoch=*/3, p);
    const CropBox b =
        SampleRandomResizedCrop(width, height, RandomResizedCropParams(), &rng);
    ASSERT_GE(b.x, 0);
    ASSERT_GE(b.y, 0);
    ASSERT_LE(b.x + b.w, width);
    ASSERT_LE(b.y + b.h, height);
    seen[Cell(b.w, b.h, width)] += 1;
    if (width - b.w >= 99) {  // x uniform over [0, width - w]
      x_bins[std::min(9, 10 * b.x / (width - b.w + 1))] += 1;
      ++x_count;
    }
  }
  const std::vector<double> expected = ExpectedCells(width, height);
  double chi2 = 0;
  int dof = -1;
  for (int c = 0; c < kBins * kBins; ++c) {
    const double e = expected[c] * n;
    if (e < 5) continue;  // the rare cells
    chi2 += (seen[c] - e) * (seen[c] - e) / e;
    ++dof;
  }
  // The 99.99th percentile of chi-square is below dof + 6 sqrt(2 dof) + 20
  // for these dof; a wrong distribution lands far above.
  EXPECT_LT(chi2, dof + 6 * std::sqrt(2.0 * dof) + 20)
      << width << " x " << height << ", dof " << dof;
  if (x_count < 1000) return;
  double chi2_x = 0;
  for (double v : x_bins) {
    const double e = x_count / 10.0;
    chi2_x += (v - e) * (v - e) / e;
  }
  EXPECT_LT(chi2_x, 40.0);  // 9 dof
}

TEST(RandomResizedCropTest, MatchesTorchvisionDistributionLandscape) {
  CheckDistribution(500, 375);
}

TEST(RandomResizedCropTest, MatchesTorchvisionDistributionTallAndSmall) {
  CheckDistribution(120, 400);
}

TEST(RandomResizedCropTest, FallbackClampsTheRatio) {
  RandomResizedCropParams never;
  never.scale_lo = never.scale_hi = 1e9;
  ExampleRng rng(0, 0, 0);
  CropBox b = SampleRandomResizedCrop(1000, 100, never, &rng);  // too wide
  EXPECT_EQ(b.h, 100);
  EXPECT_EQ(b.w, 133);  // round(100 * 4/3)
  EXPECT_EQ(b.x, (1000 - 133) / 2);
  EXPECT_EQ(b.y, 0);
  b = SampleRandomResizedCrop(100, 1000, never, &rng);  // too tall
  EXPECT_EQ(b.w, 100);
  EXPECT_EQ(b.h, 133);
  EXPECT_EQ(b.y, (1000 - 133) / 2);
  b = SampleRandomResizedCrop(400, 350, never, &rng);  // ratio in range
  EXPECT_EQ(b.w, 400);
  EXPECT_EQ(b.h, 350);
}

TEST(RandomResizedCropTest, DependsOnSeedEpochPositionOnly) {
  ExampleRng a(5, 1, 77), b(5, 1, 77), c(5, 2, 77);
  const RandomResizedCropParams p;
  const CropBox ba = SampleRandomResizedCrop(500, 375, p, &a);
  const CropBox bb = SampleRandomResizedCrop(500, 375, p, &b);
  EXPECT_EQ(ba.x, bb.x);
  EXPECT_EQ(ba.y, bb.y);
  EXPECT_EQ(ba.w, bb.w);
  EXPECT_EQ(ba.h, bb.h);
  int differ = 0;
  for (int pos = 0; pos < 20; ++pos) {
    ExampleRng e1(5, 1, pos), e2(5, 2, pos);
    differ += SampleRandomResizedCrop(500, 375, p, &e1).w !=
              SampleRandomResizedCrop(500, 375, p, &e2).w;
  }
  EXPECT_GT(differ, 10);
}

TEST(EvalGeometryTest, TorchvisionRounding) {
  EXPECT_EQ(RoundHalfEven(2.5), 2);
  EXPECT_EQ(RoundHalfEven(3.5), 4);
  EXPECT_EQ(RoundHalfEven(-0.5), 0);
  ResampleAxis x, y;
  ResizeCenterCropAxes(500, 375, 256, 224, &x, &y);
  EXPECT_EQ(x.out_size, 341);  // int(256 * 500 / 375)
  EXPECT_EQ(y.out_size, 256);
  EXPECT_EQ(x.out_first, 58);  // round(58.5) = 58
  EXPECT_EQ(y.out_first, 16);
  EXPECT_EQ(x.out_count, 224);
  ResizeCenterCropAxes(333, 500, 256, 224, &x, &y);
  EXPECT_EQ(x.out_size, 256);
  EXPECT_EQ(y.out_size, 384);  // int(256 * 500 / 333) = int(384.38)
  EXPECT_EQ(y.out_first, 80);
}

TEST(ResampleTest, IdentityAndConstant) {
  const int n = 50;
  ResampleAxis axis{0, double(n), 0, n, n, 0, n};
  ResampleTaps taps;
  ComputeTaps(axis, 1.0, n, &taps);
  // ResampleRow may read ResampleRowSlack bytes past the row (times 0).
  const size_t slack = 256;
  ASSERT_LE(ResampleRowSlack(taps), slack);
  std::vector<uint8_t> row(n * 3 + slack, 0xee);
  for (int i = 0; i < n * 3; ++i) row[i] = uint8_t(i * 7);
  std::vector<uint8_t> out(n * 3);
  ResampleRow(row.data(), 0, 3, taps, out.data());
  EXPECT_EQ(out, std::vector<uint8_t>(row.begin(), row.begin() + n * 3));
  // Downscaling a constant row keeps the constant.
  std::fill(row.begin(), row.begin() + n * 3, 200);
  axis = ResampleAxis{3, 47, 3, 47, 11, 0, 11};
  ComputeTaps(axis, 1.0, n, &taps);
  ASSERT_LE(ResampleRowSlack(taps), slack);
  EXPECT_GE(taps.src_begin, 3);
  EXPECT_LE(taps.src_end, 47);
  ResampleRow(row.data(), 0, 3, taps, out.data());
  for (int i = 0; i < 11 * 3; ++i) EXPECT_EQ(out[i], 200);
}

// A reversed axis writes the same outputs right to left (the train flip),
// the SIMD row pass writes no byte past its last output, and every output
// is the taps' weighted sum (as the scalar code computes it).
TEST(ResampleTest, ReversedAxisMirrorsAndRowsStayInBounds) {
  const int n = 97;
  std::vector<uint8_t> row(n * 3 + 256);
  for (size_t i = 0; i < row.size(); ++i) row[i] = uint8_t(i * 37 + i / 5);
  for (const int out_n : {224, 61, 37, 1}) {  // up- and downscales, odd
    ResampleAxis axis{2.5, 93.0, 2, 93, out_n, 0, out_n};
    ResampleTaps taps, mirrored;
    ComputeTaps(axis, 1.0, n, &taps);
    axis.reverse = true;
    ComputeTaps(axis, 1.0, n, &mirrored);
    std::vector<uint8_t> out(out_n * 3 + 16, 0xab), back(out_n * 3 + 16, 0xcd);
    ResampleRow(row.data(), 0, 3, taps, out.data());
    ResampleRow(row.data(), 0, 3, mirrored, back.data());
    for (int o = 0; o < out_n; ++o) {
      int32_t want[3] = {1 << 13, 1 << 13, 1 << 13};
      for (int k = 0; k < taps.count[o]; ++k) {
        for (int c = 0; c < 3; ++c) {
          want[c] += row[size_t(taps.first[o] + k) * 3 + c] *
                     taps.taps[size_t(o) * taps.ksize + k];
        }
      }
      for (int c = 0; c < 3; ++c) {
        const int v = std::min(255, std::max(0, want[c] >> 14));
        ASSERT_EQ(out[o * 3 + c], v) << out_n << " " << o << " " << c;
        ASSERT_EQ(back[(out_n - 1 - o) * 3 + c], v) << out_n << " " << o;
      }
    }
    for (int i = out_n * 3; i < out_n * 3 + 16; ++i) {
      ASSERT_EQ(out[i], 0xab) << out_n;
      ASSERT_EQ(back[i], 0xcd) << out_n;
    }
  }
}

// Every output of the vertical pass is its taps' weighted sum of the rows
// (as the scalar code computes it), for odd and even tap counts and rows
// whose length is not a multiple of the SIMD block.
TEST(ResampleTest, ColumnsAreTheTapsWeightedSums) {
  const int n = 83;
  for (const size_t row_bytes : {size_t(672), size_t(101), size_t(7)}) {
    std::vector<uint8_t> src(row_bytes * n);
    for (size_t i = 0; i < src.size(); ++i) src[i] = uint8_t(i * 53 + i / 7);
    for (const int out_n : {224, 40, 19}) {
      ResampleAxis axis{1.5, 80.0, 1, 80, out_n, 0, out_n};
      ResampleTaps taps;
      ComputeTaps(axis, 1.0, n, &taps);
      std::vector<uint8_t> out(row_bytes * out_n);
      ResampleColumns(src.data() + row_bytes * taps.src_begin, taps.src_begin,
                      row_bytes, taps, out.data());
      for (int o = 0; o < out_n; ++o) {
        for (size_t i = 0; i < row_bytes; ++i) {
          int32_t want = 1 << 13;
          for (int k = 0; k < taps.count[o]; ++k) {
            want += src[row_bytes * (taps.first[o] + k) + i] *
                    taps.taps[size_t(o) * taps.ksize + k];
          }
          ASSERT_EQ(out[row_bytes * o + i],
                    std::min(255, std::max(0, want >> 14)))
              << row_bytes << " " << out_n << " " << o << " " << i;
        }
      }
    }
  }
}

}  // namespace
}  // namespace batchd

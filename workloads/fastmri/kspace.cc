// fastMRI's per-slice transform; see kspace.h.
#include "workloads/fastmri/kspace.h"

#include <fftw3.h>

#include <cmath>
#include <complex>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "workloads/counter_rng.h"

namespace batchd {
namespace {

// TF's Philox key for the seed's own block (its stateless random ops'
// "kPhiloxDefaultKey" scrambling of the int64 seed pair).
constexpr uint64_t kSeedKey = 0x02461e293ec8f720ULL;

float WordToUniform(uint32_t x) {
  // The 23 low bits as the mantissa of a float in [1, 2), minus 1.
  const uint32_t bits = 0x3f800000u | (x & 0x7fffffu);
  float f;
  memcpy(&f, &bits, 4);
  return f - 1.0f;
}

// A 128-bit counter incremented from its first word.
void Increment(std::array<uint32_t, 4>& c) {
  for (uint32_t& w : c) {
    if (++w != 0) return;
  }
}

// FFTW's single-precision plans, one per length: in place, backward
// (unnormalised inverse), made once. Plans are never freed; lengths are
// bounded (kFastMriMinWidth..kFastMriMaxWidth and kFastMriRows).
fftwf_plan PlanFor(int n) {
  static std::mutex* mu = new std::mutex;
  static auto* plans = new std::map<int, fftwf_plan>;
  std::lock_guard<std::mutex> lock(*mu);
  auto it = plans->find(n);
  if (it != plans->end()) return it->second;
  fftwf_complex* scratch = fftwf_alloc_complex(size_t(n));
  fftwf_plan p =
      fftwf_plan_dft_1d(n, scratch, scratch, FFTW_BACKWARD, FFTW_ESTIMATE);
  fftwf_free(scratch);
  plans->emplace(n, p);
  return p;
}

struct FftwFree {
  void operator()(fftwf_complex* p) const { fftwf_free(p); }
};
using FftwBuffer = std::unique_ptr<fftwf_complex[], FftwFree>;

// What one thread reuses from slice to slice. Buffers come from
// fftwf_malloc, so that every call passes arrays aligned as the plan's.
struct Scratch {
  // The kept columns, ifftshifted, each kFastMriRows long, transformed in
  // place: [kept][rows].
  FftwBuffer columns;
  size_t columns_capacity = 0;  // in columns
  FftwBuffer row{fftwf_alloc_complex(kFastMriMaxWidth)};
  std::vector<int> stored;   // each kept column's index in the k-space
  std::vector<int> shifted;  // and after ifftshift
  std::vector<float> magnitude;
};

Scratch& LocalScratch() {
  thread_local Scratch s;
  return s;
}

// Whether every value is finite: none has an exponent field of all ones
// (one pass the compiler vectorises, no branch per value).
bool AllFinite(const float* v, size_t n) {
  uint32_t bad = 0;
  for (size_t i = 0; i < n; ++i) {
    uint32_t bits;
    memcpy(&bits, v + i, 4);
    bad += (bits & 0x7f800000u) == 0x7f800000u;
  }
  return bad == 0;
}

bool Finite(float x) { return AllFinite(&x, 1); }

// The mean and population variance of v[0..n), n a multiple of 8, summed
// in double in eight independent lanes (which the compiler vectorises).
// The deviations are taken from the mean as float32, as it is handed out.
void Moments(const float* v, size_t n, float* mean, double* variance) {
  double lanes[8] = {};
  for (size_t i = 0; i < n; i += 8) {
    for (int l = 0; l < 8; ++l) lanes[l] += double(v[i + l]);
  }
  double total = 0;
  for (double l : lanes) total += l;
  *mean = float(total / double(n));
  const double m = double(*mean);
  double sq[8] = {};
  for (size_t i = 0; i < n; i += 8) {
    for (int l = 0; l < 8; ++l) {
      const double d = double(v[i + l]) - m;
      sq[l] += d * d;
    }
  }
  double squares = 0;
  for (double l : sq) squares += l;
  *variance = squares / double(n);
}

float Clip6(float x) {
  // tf.clip_by_value(x, -6, 6) = min(max(x, -6), 6); x is never NaN here.
  x = x < -6.0f ? -6.0f : x;
  return x > 6.0f ? 6.0f : x;
}

}  // namespace

void StatelessUniform(int64_t s0, int64_t s1, int n, float* out) {
  const uint64_t a = uint64_t(s0), b = uint64_t(s1);
  const std::array<uint32_t, 4> m = Philox4x32(
      {uint32_t(a), uint32_t(a >> 32), uint32_t(b), uint32_t(b >> 32)},
      kSeedKey);
  const uint64_t key = uint64_t(m[0]) | (uint64_t(m[1]) << 32);
  std::array<uint32_t, 4> counter = {0, 0, m[2], m[3]};
  for (int i = 0; i < n; i += 4) {
    const std::array<uint32_t, 4> block = Philox4x32(counter, key);
    Increment(counter);
    for (int j = 0; j < 4 && i + j < n; ++j)
      out[i + j] = WordToUniform(block[j]);
  }
}

void TrainUniform(uint64_t seed, uint64_t slice, int n, float* out) {
  ExampleRng rng(seed, 0, slice);
  for (int i = 0; i < n; ++i) out[i] = WordToUniform(rng.NextU32());
}

std::vector<uint8_t> ColumnMask(const float* u, int width) {
  // tf.float32 arithmetic, as AlgoPerf writes it.
  const float w = float(width);
  const int low = int(w * 0.08f);  // truncation
  const float lowf = float(low);
  const float prob = (w / 4.0f - lowf) / (w - lowf);
  std::vector<uint8_t> mask(size_t(width), 0);
  const int pad = (width - low + 1) / 2;
  for (int j = pad; j < pad + low; ++j) mask[size_t(j)] = 1;
  for (int j = 0; j < width; ++j) {
    if (u[j] < prob) mask[size_t(j)] = 1;
  }
  return mask;
}

absl::Status TransformSlice(const float* kspace, int width, const uint8_t* mask,
                            const float* target, SliceOut* out) {
  constexpr int kRows = kFastMriRows, kCrop = kFastMriCrop;
  constexpr size_t kPixels = size_t(kCrop) * kCrop;
  const size_t floats = size_t(kRows) * size_t(width) * 2;
  if (!AllFinite(kspace, floats)) {
    for (size_t i = 0; i < floats; ++i) {
      if (!Finite(kspace[i])) {
        return absl::DataLossError(
            absl::StrCat("k-space value at row ", i / 2 / size_t(width),
                         " column ", i / 2 % size_t(width), " is not finite"));
      }
    }
  }
  if (!AllFinite(target, kPixels)) {
    for (size_t i = 0; i < kPixels; ++i) {
      if (!Finite(target[i])) {
        return absl::DataLossError(
            absl::StrCat("reconstruction_esc value at row ", i / kCrop,
                         " column ", i % kCrop, " is not finite"));
      }
    }
  }

  // image = fftshift(ifft2(ifftshift(masked))) * sqrt(rows * width), then
  // the centre crop: ifftshift moves input index i + n/2 (mod n) to i,
  // fftshift output index i - n/2 (mod n) to i (n/2 rounded down). A
  // masked-out column is zero, so its column transform is zero: the first
  // pass transforms the kept columns only; the second transforms only the
  // 320 rows the crop takes.
  Scratch& s = LocalScratch();
  const int half_rows = kRows / 2, half_width = width / 2;
  const int row_from = (kRows - kCrop) / 2, col_from = (width - kCrop) / 2;
  s.stored.clear();
  s.shifted.clear();
  for (int c = 0; c < width; ++c) {
    if (!mask[c]) continue;
    s.stored.push_back(c);
    s.shifted.push_back(((c - half_width) % width + width) % width);
  }
  const size_t kept = s.stored.size();
  if (kept > s.columns_capacity) {
    s.columns.reset(fftwf_alloc_complex(kept * kRows));
    s.columns_capacity = kept;
  }
  fftwf_complex* cols = s.columns.get();
  // Gathered one k-space row at a time (each row read once, in order),
  // each complex value moved as one 8-byte word. AlgoPerf's "* mask + 0.0"
  // also turns -0 into +0, which changes no magnitude: a sum of zeros is
  // a zero of either sign, and its square is 0.
  // Eight rows at a time, so that each column's eight values fill one
  // 64-byte line of `cols` while the eight rows stay in the L1 cache.
  constexpr int kBlock = 8;
  static_assert(kRows % kBlock == 0);
  for (int i0 = 0; i0 < kRows; i0 += kBlock) {
    const char* src[kBlock];
    for (int b = 0; b < kBlock; ++b) {
      src[b] = reinterpret_cast<const char*>(kspace) +
               8 * size_t((i0 + b + half_rows) % kRows) * width;
    }
    for (size_t k = 0; k < kept; ++k) {
      const size_t at = 8 * size_t(s.stored[k]);
      fftwf_complex* dst = &cols[k * kRows + size_t(i0)];
      for (int b = 0; b < kBlock; ++b) memcpy(&dst[b], src[b] + at, 8);
    }
  }
  const fftwf_plan column_plan = PlanFor(kRows);
  for (size_t k = 0; k < kept; ++k) {
    fftwf_execute_dft(column_plan, cols + k * kRows, cols + k * kRows);
  }
  const fftwf_plan row_plan = PlanFor(width);
  fftwf_complex* row = s.row.get();
  // TF: ifft2d divides by rows * width; the image is multiplied by its
  // square root.
  const float scale = 1.0f / std::sqrt(float(kRows) * float(width));
  s.magnitude.resize(kPixels);
  // The crop's columns q take the transformed row's (q + col_from -
  // half_width) mod width: two runs, before and after the wrap.
  const int first = ((col_from - half_width) % width + width) % width;
  const int before_wrap = std::min(kCrop, width - first);
  for (int p = 0; p < kCrop; ++p) {
    const int r = ((p + row_from - half_rows) % kRows + kRows) % kRows;
    memset(row, 0, sizeof(fftwf_complex) * size_t(width));
    for (size_t k = 0; k < kept; ++k) {
      memcpy(&row[s.shifted[k]], &cols[k * kRows + r], 8);
    }
    fftwf_execute_dft(row_plan, row, row);
    float* mag = &s.magnitude[size_t(p) * kCrop];
    const float* a = &row[first][0];
    for (int q = 0; q < before_wrap; ++q) {
      const float re = a[2 * q] * scale, im = a[2 * q + 1] * scale;
      mag[q] = std::sqrt(re * re + im * im);
    }
    const float* b = &row[0][0] - 2 * before_wrap;
    for (int q = before_wrap; q < kCrop; ++q) {
      const float re = b[2 * q] * scale, im = b[2 * q + 1] * scale;
      mag[q] = std::sqrt(re * re + im * im);
    }
  }
  static_assert(kPixels % 8 == 0);
  float mean = 0;
  double variance = 0;
  Moments(s.magnitude.data(), kPixels, &mean, &variance);
  const float std = float(std::sqrt(variance));
  if (!(std > 0)) {
    return absl::DataLossError(
        "the masked slice's image is constant (standard deviation 0): "
        "normalising it would divide by zero");
  }
  for (size_t i = 0; i < kPixels; ++i) {
    out->inputs[i] = Clip6((s.magnitude[i] - mean) / std);
    out->targets[i] = Clip6((target[i] - mean) / std);
  }
  out->mean = mean;
  out->std = std;
  return absl::OkStatus();
}

}  // namespace batchd

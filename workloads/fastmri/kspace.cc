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
  fftwf_plan p = fftwf_plan_dft_1d(n, scratch, scratch, FFTW_BACKWARD,
                                   FFTW_ESTIMATE);
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
  FftwBuffer column{fftwf_alloc_complex(kFastMriRows)};
  FftwBuffer row{fftwf_alloc_complex(kFastMriMaxWidth)};
  // The kept columns after the first pass: [kept][320] (rows of the crop).
  std::vector<std::complex<float>> kept;
  std::vector<int> shifted;  // each kept column's index after ifftshift
  std::vector<float> magnitude;
};

Scratch& LocalScratch() {
  thread_local Scratch s;
  return s;
}

bool Finite(float x) {
  uint32_t bits;
  memcpy(&bits, &x, 4);
  return (bits & 0x7f800000u) != 0x7f800000u;
}

}  // namespace

void StatelessUniform(int64_t s0, int64_t s1, int n, float* out) {
  const uint64_t a = uint64_t(s0), b = uint64_t(s1);
  const std::array<uint32_t, 4> m =
      Philox4x32({uint32_t(a), uint32_t(a >> 32), uint32_t(b),
                  uint32_t(b >> 32)},
                 kSeedKey);
  const uint64_t key = uint64_t(m[0]) | (uint64_t(m[1]) << 32);
  std::array<uint32_t, 4> counter = {0, 0, m[2], m[3]};
  for (int i = 0; i < n; i += 4) {
    const std::array<uint32_t, 4> block = Philox4x32(counter, key);
    Increment(counter);
    for (int j = 0; j < 4 && i + j < n; ++j) out[i + j] = WordToUniform(block[j]);
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

absl::Status TransformSlice(const float* kspace, int width,
                            const uint8_t* mask, const float* target,
                            SliceOut* out) {
  constexpr int kRows = kFastMriRows, kCrop = kFastMriCrop;
  const size_t floats = size_t(kRows) * size_t(width) * 2;
  bool finite = true;
  for (size_t i = 0; i < floats; ++i) finite &= Finite(kspace[i]);
  if (!finite) {
    for (size_t i = 0; i < floats; ++i) {
      if (!Finite(kspace[i])) {
        return absl::DataLossError(absl::StrCat(
            "k-space value at row ", i / 2 / size_t(width), " column ",
            i / 2 % size_t(width), " is not finite"));
      }
    }
  }
  for (size_t i = 0; i < size_t(kCrop) * kCrop; ++i) {
    if (!Finite(target[i])) {
      return absl::DataLossError(
          absl::StrCat("reconstruction_esc value at row ", i / kCrop,
                       " column ", i % kCrop, " is not finite"));
    }
  }

  // image = fftshift(ifft2(ifftshift(masked))) * sqrt(rows * width), then
  // the centre crop: ifftshift moves input index i + n/2 (mod n) to i,
  // fftshift output index i - n/2 (mod n) to i (n/2 rounded down). A
  // masked-out column is zero, so its column transform is zero: the first
  // pass transforms the kept columns only and keeps the 320 rows the crop
  // takes; the second transforms those rows.
  Scratch& s = LocalScratch();
  const int half_rows = kRows / 2, half_width = width / 2;
  const int row_from = (kRows - kCrop) / 2, col_from = (width - kCrop) / 2;
  s.shifted.clear();
  for (int c = 0; c < width; ++c) {
    if (mask[c]) s.shifted.push_back(((c - half_width) % width + width) % width);
  }
  const size_t kept = s.shifted.size();
  s.kept.resize(kept * kCrop);
  fftwf_plan column_plan = PlanFor(kRows);
  fftwf_complex* col = s.column.get();
  for (size_t k = 0; k < kept; ++k) {
    const int c = (s.shifted[k] + half_width) % width;  // the stored column
    for (int i = 0; i < kRows; ++i) {
      const float* v = kspace + 2 * (size_t((i + half_rows) % kRows) * width + c);
      // "* mask + 0.0": a kept value times 1, plus 0 (which makes -0 +0).
      col[i][0] = v[0] + 0.0f;
      col[i][1] = v[1] + 0.0f;
    }
    fftwf_execute_dft(column_plan, col, col);
    std::complex<float>* dst = &s.kept[k * kCrop];
    for (int p = 0; p < kCrop; ++p) {
      const int r = ((p + row_from - half_rows) % kRows + kRows) % kRows;
      dst[p] = {col[r][0], col[r][1]};
    }
  }
  fftwf_plan row_plan = PlanFor(width);
  fftwf_complex* row = s.row.get();
  // TF: ifft2d divides by rows * width; the image is multiplied by its
  // square root.
  const float scale = 1.0f / std::sqrt(float(kRows) * float(width));
  s.magnitude.resize(size_t(kCrop) * kCrop);
  double sum = 0;
  for (int p = 0; p < kCrop; ++p) {
    memset(row, 0, sizeof(fftwf_complex) * size_t(width));
    for (size_t k = 0; k < kept; ++k) {
      const std::complex<float> v = s.kept[k * kCrop + size_t(p)];
      row[s.shifted[k]][0] = v.real();
      row[s.shifted[k]][1] = v.imag();
    }
    fftwf_execute_dft(row_plan, row, row);
    float* mag = &s.magnitude[size_t(p) * kCrop];
    for (int q = 0; q < kCrop; ++q) {
      const int y = ((q + col_from - half_width) % width + width) % width;
      const float re = row[y][0] * scale, im = row[y][1] * scale;
      mag[q] = std::sqrt(re * re + im * im);
      sum += mag[q];
    }
  }
  const double n = double(kCrop) * kCrop;
  const float mean = float(sum / n);
  double squares = 0;
  for (float m : s.magnitude) {
    const double d = double(m) - double(mean);
    squares += d * d;
  }
  const float std = float(std::sqrt(squares / n));
  if (!(std > 0)) {
    return absl::DataLossError(
        "the masked slice's image is constant (standard deviation 0): "
        "normalising it would divide by zero");
  }
  for (size_t i = 0; i < s.magnitude.size(); ++i) {
    out->inputs[i] = std::fmin(std::fmax((s.magnitude[i] - mean) / std, -6.0f), 6.0f);
    out->targets[i] = std::fmin(std::fmax((target[i] - mean) / std, -6.0f), 6.0f);
  }
  out->mean = mean;
  out->std = std;
  return absl::OkStatus();
}

}  // namespace batchd

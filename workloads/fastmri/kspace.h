// fastMRI's per-slice transform, as AlgoPerf's knee single-coil pipeline
// defines it (docs/fastmri.md): a column mask over the k-space, the centred
// orthonormal inverse 2-D FFT, a 320 x 320 centre crop, the magnitude, and
// the instance normalisation of input and target with the input's mean and
// standard deviation, clipped to [-6, 6]. float32 throughout, the FFT by
// FFTW (single precision, FFTW_ESTIMATE plans: the same plan, and so the
// same bits, on every run of one machine).
//
// Thread safety: every function may be called from any number of threads
// at once (plans are made under a lock and executed with FFTW's new-array
// calls, which are thread-safe).
#ifndef BATCHD_WORKLOADS_FASTMRI_KSPACE_H_
#define BATCHD_WORKLOADS_FASTMRI_KSPACE_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"

namespace batchd {

// k-space rows (AlgoPerf's TensorSpec (640, None)) and the crop's side.
inline constexpr int kFastMriRows = 640;
inline constexpr int kFastMriCrop = 320;
// k-space columns: at least the crop; at most a bound that keeps one
// slice's read (rows x columns x 8 bytes) at 10 MiB. Knee volumes have 368
// or 372.
inline constexpr int kFastMriMinWidth = kFastMriCrop;
inline constexpr int kFastMriMaxWidth = 2048;

// tf.random.stateless_uniform((n,), seed=(s0, s1), dtype=float32) on the
// CPU: Philox-4x32-10, bit for bit (docs/fastmri.md).
void StatelessUniform(int64_t s0, int64_t s1, int n, float* out);

// The uniforms of a training slice's mask: batchd's counter-based stream
// (workloads/counter_rng.h) of (seed, slice), mapped to floats as TF maps
// Philox words, so the masks have AlgoPerf's distribution; a slice keeps
// its mask for the whole run, as AlgoPerf's do.
void TrainUniform(uint64_t seed, uint64_t slice, int n, float* out);

// AlgoPerf's mask of `width` columns (centre fraction 0.08, acceleration
// 4) from the uniforms u[width]: 1 where kept.
std::vector<uint8_t> ColumnMask(const float* u, int width);

struct SliceOut {
  float* inputs;   // [320 * 320]
  float* targets;  // [320 * 320]
  float mean = 0;
  float std = 0;
};

// kspace: complex64 [640, width] as interleaved float pairs; target:
// float32 [320, 320]; mask[width]. Fills out. DataLoss (naming the row and
// column) for a non-finite value, or an image whose standard deviation is
// 0 (AlgoPerf would hand NaN).
absl::Status TransformSlice(const float* kspace, int width, const uint8_t* mask,
                            const float* target, SliceOut* out);

}  // namespace batchd

#endif  // BATCHD_WORKLOADS_FASTMRI_KSPACE_H_

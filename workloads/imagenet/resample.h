// Antialiased bilinear resampling of 8-bit images, computed as Pillow's
// ImagingResample does (Resample.c: the triangle filter widened by the
// downscale factor, weights normalised per output pixel, fixed point, a
// horizontal pass rounded to 8 bits, then a vertical pass), so that a
// resize here gives the pixels torchvision's PIL transforms give: the same
// up to 1 at a few pixels, as the taps have 14 bits, not Pillow's 22.
//
// One axis of a resize is a ResampleAxis: it maps the source interval
// [in0, in1) onto out_size pixels and produces outputs
// [out_first, out_first + out_count) of them; the filter reads only source
// pixels in [lo, hi). A crop followed by a resize (torchvision's
// resized_crop) is in0 = lo = crop start, in1 = hi = crop end; a resize
// followed by a centre crop is in0 = lo = 0, in1 = hi = size, out_first =
// the crop's offset. `reverse` writes the outputs right to left (a
// mirrored image: a horizontal flip that costs nothing).
//
// Thread safety: plain functions and values.
#ifndef BATCHD_WORKLOADS_IMAGENET_RESAMPLE_H_
#define BATCHD_WORKLOADS_IMAGENET_RESAMPLE_H_

#include <cstddef>
#include <cstdint>
#include <vector>

namespace batchd {

struct ResampleAxis {
  double in0 = 0;
  double in1 = 0;
  int lo = 0;
  int hi = 0;
  int out_size = 0;
  int out_first = 0;
  int out_count = 0;
  bool reverse = false;
};

// Fixed-point filter taps of one axis: output o reads source pixels
// [first[o], first[o] + count[o]) with weights taps[o * ksize + k].
struct ResampleTaps {
  int ksize = 0;
  std::vector<int> first;
  std::vector<int> count;
  std::vector<int32_t> taps;
  // The taps two by two as int16 pairs (low: even tap, high: odd tap),
  // npairs per output, for SIMD code.
  int npairs = 0;
  std::vector<int32_t> pairs;
  // The same for outputs 2i and 2i + 1 side by side, as 8 int32 per pair
  // (4 copies of 2i's, then 4 of 2i + 1's): one load per step of the AVX2
  // code, which computes two outputs at a time.
  std::vector<int32_t> pairs2;
  // ComputeTaps' scratch (kept, so that a resize allocates nothing once
  // the buffers have grown).
  std::vector<double> weights;
  // The source pixels any output reads: [src_begin, src_end).
  int src_begin = 0;
  int src_end = 0;
};

// Taps for `axis`, with source coordinates scaled by `scale` (a DCT-scaled
// decode at scale k/8 sees pixel x of the full image at x * k / 8) and
// clamped to [0, scaled_size).
void ComputeTaps(const ResampleAxis& axis, double scale, int scaled_size,
                 ResampleTaps* taps);

// Horizontal pass of one row: src holds pixels [src_x0, ...) of the row,
// `channels` bytes each, followed by at least ResampleRowSlack(taps)
// readable bytes (read, multiplied by 0); writes taps.first.size() pixels to
// dst.
inline size_t ResampleRowSlack(const ResampleTaps& taps) {
  return size_t(taps.ksize) * 3 + 16;
}
void ResampleRow(const uint8_t* src, int src_x0, int channels,
                 const ResampleTaps& taps, uint8_t* dst);

// Vertical pass: rows[r] is source row src_y0 + r (each `row_bytes` bytes);
// writes the vertical taps' outputs, one row of row_bytes each, to dst.
void ResampleColumns(const uint8_t* src, int src_y0, size_t row_bytes,
                     const ResampleTaps& taps, uint8_t* dst);

}  // namespace batchd

#endif  // BATCHD_WORKLOADS_IMAGENET_RESAMPLE_H_

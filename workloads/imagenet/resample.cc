// Pillow-compatible antialiased bilinear resampling; see resample.h.
#include "workloads/imagenet/resample.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace batchd {
namespace {

// Pillow's taps have 22 bits (PRECISION_BITS); 14 bits let every tap fit an
// int16, so that SIMD code multiplies two taps with one madd. Results differ
// from Pillow's by at most 1, at the few pixels where rounding tips over.
// Every code path computes the same integers, so output never depends on
// the CPU.
constexpr int kPrecisionBits = 14;

double Triangle(double x) {
  if (x < 0.0) x = -x;
  return x < 1.0 ? 1.0 - x : 0.0;
}

inline uint8_t Clip8(int32_t v) {
  v >>= kPrecisionBits;
  return uint8_t(v < 0 ? 0 : (v > 255 ? 255 : v));
}

}  // namespace

void ComputeTaps(const ResampleAxis& axis, double scale, int scaled_size,
                 ResampleTaps* t) {
  // The source, as the filter sees it, is [lo_s, hi_s) of the scaled axis:
  // coordinates below are relative to lo_s, as Pillow's are relative to the
  // cropped image it resizes.
  const int lo_s = std::max(0, int(std::floor(axis.lo * scale)));
  const int hi_s =
      std::min(scaled_size, int(std::ceil(axis.hi * scale - 1e-9)));
  const int in_size = std::max(1, hi_s - lo_s);
  const double in0 = axis.in0 * scale - lo_s;
  const double in1 = axis.in1 * scale - lo_s;
  const double step = (in1 - in0) / axis.out_size;
  const double filterscale = std::max(1.0, step);
  const double support = 1.0 * filterscale;  // bilinear: support 1
  const double ss = 1.0 / filterscale;
  t->ksize = int(std::ceil(support)) * 2 + 1;
  const int n = axis.out_count;
  t->first.assign(n, 0);
  t->count.assign(n, 0);
  t->taps.assign(size_t(n) * t->ksize, 0);
  std::vector<double>& w = t->weights;
  w.resize(t->ksize);
  t->src_begin = hi_s;
  t->src_end = lo_s;
  for (int o = 0; o < n; ++o) {
    const int xx = axis.out_first + (axis.reverse ? n - 1 - o : o);
    const double center = in0 + (xx + 0.5) * step;
    int xmin = int(center - support + 0.5);  // truncates, as Pillow does
    if (xmin < 0) xmin = 0;
    int xmax = int(center + support + 0.5);
    if (xmax > in_size) xmax = in_size;
    xmax -= xmin;
    xmax = std::max(0, std::min(xmax, t->ksize));
    double ww = 0.0;
    for (int x = 0; x < xmax; ++x) {
      w[x] = Triangle((x + xmin - center + 0.5) * ss);
      ww += w[x];
    }
    for (int x = 0; x < xmax; ++x) {
      const double k = ww != 0.0 ? w[x] / ww : w[x];
      const double f = k * (1 << kPrecisionBits);
      t->taps[size_t(o) * t->ksize + x] = int32_t(f < 0 ? f - 0.5 : f + 0.5);
    }
    if (xmax == 0) {  // an empty window (degenerate box): read one pixel
      xmin = std::min(std::max(0, int(center)), in_size - 1);
      xmax = 1;
      t->taps[size_t(o) * t->ksize] = 1 << kPrecisionBits;
    }
    t->first[o] = lo_s + xmin;
    t->count[o] = xmax;
    t->src_begin = std::min(t->src_begin, lo_s + xmin);
    t->src_end = std::max(t->src_end, lo_s + xmin + xmax);
  }
  t->npairs = (t->ksize + 1) / 2;
  t->pairs.assign(size_t(n) * t->npairs, 0);
  for (int o = 0; o < n; ++o) {
    const int32_t* k = &t->taps[size_t(o) * t->ksize];
    for (int j = 0; j < t->npairs; ++j) {
      const int32_t lo = k[2 * j];
      const int32_t hi = 2 * j + 1 < t->ksize ? k[2 * j + 1] : 0;
      t->pairs[size_t(o) * t->npairs + j] =
          int32_t(uint32_t(uint16_t(lo)) | (uint32_t(uint16_t(hi)) << 16));
    }
  }
  t->pairs2.assign(size_t((n + 1) / 2) * t->npairs * 8, 0);
  for (int o = 0; o < n; ++o) {
    int32_t* dst = &t->pairs2[size_t(o / 2) * t->npairs * 8 + (o % 2) * 4];
    for (int j = 0; j < t->npairs; ++j, dst += 8) {
      const int32_t pair = t->pairs[size_t(o) * t->npairs + j];
      dst[0] = dst[1] = dst[2] = dst[3] = pair;
    }
  }
  if (n == 0) t->src_begin = t->src_end = lo_s;
}

#if defined(__x86_64__)
// The RGB horizontal pass with SSSE3, two taps a step: pixels x and x + 1
// shuffled into (r0 r1 | g0 g1 | b0 b1) 16-bit pairs, multiplied by the
// taps' pair and summed by one madd into three 32-bit lanes. The same
// integers as the scalar code. Reads up to ResampleRowSlack bytes past a
// row's last pixel (multiplied by 0).
__attribute__((target("ssse3"))) void ResampleRowRgbSsse3(const uint8_t* src,
                                                          int src_x0,
                                                          const ResampleTaps& t,
                                                          uint8_t* dst) {
  const int n = int(t.first.size());
  const __m128i half = _mm_set1_epi32(1 << (kPrecisionBits - 1));
  const __m128i shuffle =
      _mm_setr_epi8(0, -1, 3, -1, 1, -1, 4, -1, 2, -1, 5, -1, -1, -1, -1, -1);
  for (int o = 0; o < n; ++o) {
    const uint8_t* p = src + size_t(t.first[o] - src_x0) * 3;
    const int32_t* pair = &t.pairs[size_t(o) * t.npairs];
    __m128i acc = half;
    for (int j = 0; j < t.npairs; ++j, p += 6) {
      const __m128i px = _mm_shuffle_epi8(
          _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)), shuffle);
      acc = _mm_add_epi32(acc, _mm_madd_epi16(px, _mm_set1_epi32(pair[j])));
    }
    acc = _mm_srai_epi32(acc, kPrecisionBits);
    const __m128i packed = _mm_packus_epi16(_mm_packs_epi32(acc, acc), acc);
    const int32_t rgbx = _mm_cvtsi128_si32(packed);
    memcpy(dst, &rgbx, 3);
    dst += 3;
  }
}

// The same with AVX2, two outputs at a time (one per 128-bit half).
__attribute__((target("avx2"))) void ResampleRowRgbAvx2(const uint8_t* src,
                                                        int src_x0,
                                                        const ResampleTaps& t,
                                                        uint8_t* dst) {
  const int n = int(t.first.size());
  const __m256i half = _mm256_set1_epi32(1 << (kPrecisionBits - 1));
  const __m256i shuffle = _mm256_setr_epi8(
      0, -1, 3, -1, 1, -1, 4, -1, 2, -1, 5, -1, -1, -1, -1, -1,  //
      0, -1, 3, -1, 1, -1, 4, -1, 2, -1, 5, -1, -1, -1, -1, -1);
  const __m128i pack =
      _mm_setr_epi8(0, 1, 2, 4, 5, 6, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
  int o = 0;
  for (; o + 1 < n; o += 2) {
    const uint8_t* p0 = src + size_t(t.first[o] - src_x0) * 3;
    const uint8_t* p1 = src + size_t(t.first[o + 1] - src_x0) * 3;
    const int32_t* w = &t.pairs2[size_t(o / 2) * t.npairs * 8];
    __m256i acc = half;
    for (int j = 0; j < t.npairs; ++j, p0 += 6, p1 += 6, w += 8) {
      const __m256i px = _mm256_shuffle_epi8(
          _mm256_inserti128_si256(
              _mm256_castsi128_si256(
                  _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p0))),
              _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p1)), 1),
          shuffle);
      acc = _mm256_add_epi32(
          acc, _mm256_madd_epi16(px, _mm256_loadu_si256(
                                         reinterpret_cast<const __m256i*>(w))));
    }
    acc = _mm256_srai_epi32(acc, kPrecisionBits);
    const __m128i lo = _mm256_castsi256_si128(acc);
    const __m128i hi = _mm256_extracti128_si256(acc, 1);
    const __m128i words = _mm_packs_epi32(lo, hi);  // r0 g0 b0 0 r1 g1 b1 0
    // r0 g0 b0 r1 g1 b1, then bytes the next outputs overwrite.
    const __m128i bytes =
        _mm_shuffle_epi8(_mm_packus_epi16(words, words), pack);
    if (o + 3 < n) {
      _mm_storel_epi64(reinterpret_cast<__m128i*>(dst), bytes);
    } else {  // the row's last pair: no byte past it is written
      alignas(16) uint8_t out[16];
      _mm_store_si128(reinterpret_cast<__m128i*>(out), bytes);
      memcpy(dst, out, 6);
    }
    dst += 6;
  }
  if (o < n) {  // the last output alone, as the scalar code does it
    const uint8_t* p = src + size_t(t.first[o] - src_x0) * 3;
    const int32_t* k = &t.taps[size_t(o) * t.ksize];
    for (int c = 0; c < 3; ++c) {
      int32_t acc = 1 << (kPrecisionBits - 1);
      for (int x = 0; x < t.count[o]; ++x) acc += p[3 * x + c] * k[x];
      dst[c] = Clip8(acc);
    }
  }
}

bool HaveAvx2() {
  static const bool have = __builtin_cpu_supports("avx2");
  return have;
}

bool HaveSsse3() {
  static const bool have = __builtin_cpu_supports("ssse3");
  return have;
}
#endif

void ResampleRow(const uint8_t* src, int src_x0, int channels,
                 const ResampleTaps& t, uint8_t* dst) {
  const int n = int(t.first.size());
  const int32_t half = 1 << (kPrecisionBits - 1);
#if defined(__x86_64__)
  if (channels == 3 && HaveAvx2()) {
    return ResampleRowRgbAvx2(src, src_x0, t, dst);
  }
  if (channels == 3 && HaveSsse3()) {
    return ResampleRowRgbSsse3(src, src_x0, t, dst);
  }
#endif
  if (channels == 3) {
    for (int o = 0; o < n; ++o) {
      const uint8_t* p = src + size_t(t.first[o] - src_x0) * 3;
      const int32_t* k = &t.taps[size_t(o) * t.ksize];
      int32_t r = half, g = half, b = half;
      for (int x = 0; x < t.count[o]; ++x, p += 3) {
        r += p[0] * k[x];
        g += p[1] * k[x];
        b += p[2] * k[x];
      }
      dst[0] = Clip8(r);
      dst[1] = Clip8(g);
      dst[2] = Clip8(b);
      dst += 3;
    }
    return;
  }
  for (int o = 0; o < n; ++o) {
    const uint8_t* p = src + size_t(t.first[o] - src_x0) * channels;
    const int32_t* k = &t.taps[size_t(o) * t.ksize];
    for (int c = 0; c < channels; ++c) {
      int32_t acc = half;
      for (int x = 0; x < t.count[o]; ++x) acc += p[x * channels + c] * k[x];
      *dst++ = Clip8(acc);
    }
  }
}

#if defined(__x86_64__)
// The vertical pass with AVX2: 32 bytes of a row at a time, two source rows
// a step (their bytes interleaved as 16-bit pairs, multiplied by the two
// rows' taps and summed by one madd). Every operation stays within its
// 128-bit half, so the packs at the end give the bytes back in order. The
// same integers as the scalar code; the row's last row_bytes % 32 bytes
// are left to it.
__attribute__((target("avx2"))) size_t ResampleColumnsAvx2(const uint8_t* rows,
                                                           size_t row_bytes,
                                                           const int32_t* k,
                                                           int count,
                                                           uint8_t* dst) {
  const __m256i zero = _mm256_setzero_si256();
  const __m256i half = _mm256_set1_epi32(1 << (kPrecisionBits - 1));
  size_t i = 0;
  for (; i + 32 <= row_bytes; i += 32) {
    __m256i acc0 = half, acc1 = half, acc2 = half, acc3 = half;
    for (int y = 0; y < count; y += 2) {
      const uint8_t* row = rows + size_t(y) * row_bytes + i;
      const __m256i a =
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row));
      const bool two = y + 1 < count;
      const __m256i b =
          two ? _mm256_loadu_si256(
                    reinterpret_cast<const __m256i*>(row + row_bytes))
              : zero;
      const __m256i w = _mm256_set1_epi32(
          int32_t(uint32_t(uint16_t(k[y])) |
                  (uint32_t(uint16_t(two ? k[y + 1] : 0)) << 16)));
      const __m256i al = _mm256_unpacklo_epi8(a, zero);
      const __m256i ah = _mm256_unpackhi_epi8(a, zero);
      const __m256i bl = _mm256_unpacklo_epi8(b, zero);
      const __m256i bh = _mm256_unpackhi_epi8(b, zero);
      acc0 = _mm256_add_epi32(
          acc0, _mm256_madd_epi16(_mm256_unpacklo_epi16(al, bl), w));
      acc1 = _mm256_add_epi32(
          acc1, _mm256_madd_epi16(_mm256_unpackhi_epi16(al, bl), w));
      acc2 = _mm256_add_epi32(
          acc2, _mm256_madd_epi16(_mm256_unpacklo_epi16(ah, bh), w));
      acc3 = _mm256_add_epi32(
          acc3, _mm256_madd_epi16(_mm256_unpackhi_epi16(ah, bh), w));
    }
    const __m256i lo =
        _mm256_packs_epi32(_mm256_srai_epi32(acc0, kPrecisionBits),
                           _mm256_srai_epi32(acc1, kPrecisionBits));
    const __m256i hi =
        _mm256_packs_epi32(_mm256_srai_epi32(acc2, kPrecisionBits),
                           _mm256_srai_epi32(acc3, kPrecisionBits));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i),
                        _mm256_packus_epi16(lo, hi));
  }
  return i;
}
#endif

void ResampleColumns(const uint8_t* src, int src_y0, size_t row_bytes,
                     const ResampleTaps& t, uint8_t* dst) {
  constexpr size_t kBlock = 32;
  const int n = int(t.first.size());
  const int32_t half = 1 << (kPrecisionBits - 1);
  for (int o = 0; o < n; ++o) {
    const int32_t* k = &t.taps[size_t(o) * t.ksize];
    const uint8_t* rows = src + size_t(t.first[o] - src_y0) * row_bytes;
    const int count = t.count[o];
    size_t i = 0;
#if defined(__x86_64__)
    if (HaveAvx2()) i = ResampleColumnsAvx2(rows, row_bytes, k, count, dst);
#endif
    for (; i + kBlock <= row_bytes; i += kBlock) {
      int32_t acc[kBlock];
      for (size_t j = 0; j < kBlock; ++j) acc[j] = half;
      for (int y = 0; y < count; ++y) {
        const uint8_t* row = rows + size_t(y) * row_bytes + i;
        const int32_t w = k[y];
        for (size_t j = 0; j < kBlock; ++j) acc[j] += row[j] * w;
      }
      for (size_t j = 0; j < kBlock; ++j) dst[i + j] = Clip8(acc[j]);
    }
    for (; i < row_bytes; ++i) {
      int32_t acc = half;
      for (int y = 0; y < count; ++y) {
        acc += rows[size_t(y) * row_bytes + i] * k[y];
      }
      dst[i] = Clip8(acc);
    }
    dst += row_bytes;
  }
}

}  // namespace batchd

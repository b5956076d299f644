// Decodes one encoded image (JPEG through libjpeg-turbo, or PNG through
// libpng: ImageNet has a PNG named .JPEG) straight to the pixels a resize
// needs, resized. A JPEG is decoded only over the rows and columns the
// resize reads (jpeg_skip_scanlines, jpeg_crop_scanline, and stopping after
// the last needed row) and at the smallest DCT scale k/8, k in {1, 2, 4, 8}
// (the scales libjpeg-turbo has SIMD code for), that keeps at least the
// output's resolution across the resized box (times a headroom, see
// set_dct_headroom); the result is then resampled as Pillow does
// (resample.h).
//
// Colour, as PIL's Image.convert("RGB") gives it: grayscale is replicated,
// CMYK and YCCK are read as Adobe-inverted CMYK (PIL always assumes that) and
// converted with PIL's formula, PNG palettes / alpha / 16 bits are expanded,
// dropped and reduced.
//
// Errors (never crashes, never exits, on any input): InvalidArgument for
// data that is not an image, DataLoss for a corrupt or truncated one, both
// with libjpeg's / libpng's message. A JPEG that ends early is an error when
// the decode reaches the missing part (PIL refuses truncated files); a decode
// that stops above it does not see it.
//
// Thread safety: an ImageDecoder is used by one thread at a time; use one
// per thread. It keeps its buffers between images.
#ifndef BATCHD_WORKLOADS_IMAGENET_IMAGE_DECODER_H_
#define BATCHD_WORKLOADS_IMAGENET_IMAGE_DECODER_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "workloads/imagenet/resample.h"

namespace batchd {

enum class ImageCodec { kJpeg, kPng };

struct ImageHeader {
  ImageCodec codec = ImageCodec::kJpeg;
  int width = 0;
  int height = 0;
  int components = 0;  // in the file: 1 gray, 3 colour, 4 CMYK / YCCK
};

// What one DecodeResized did, for tests and benchmarks.
struct DecodeStats {
  int scale_num = 8;  // the DCT scale was scale_num / 8
  int rows = 0;       // decoded rows and columns at that scale
  int cols = 0;
};

class ImageDecoder {
 public:
  // Images with more pixels than this are refused (a corrupt header must not
  // make a worker allocate gigabytes). Default: 2^28 (e.g. 16384 x 16384).
  static constexpr uint64_t kMaxPixels = uint64_t(1) << 28;

  ImageDecoder();
  ~ImageDecoder();
  ImageDecoder(const ImageDecoder&) = delete;
  ImageDecoder& operator=(const ImageDecoder&) = delete;

  // The DCT scale k/8 is the smallest that keeps at least `headroom` scaled
  // pixels per output pixel across the resized box (1: exactly the output
  // resolution). A DCT-scaled decode low-passes unlike Pillow's triangle
  // filter; headroom keeps the triangle filter doing part of the reduction,
  // which brings the result closer to Pillow's. Default: 1.
  void set_dct_headroom(double headroom) { dct_headroom_ = headroom; }

  // Reads the header of data[0, size). `data` must outlive the Decode* calls
  // that follow.
  absl::Status Open(const uint8_t* data, size_t size);
  const ImageHeader& header() const { return header_; }

  // Writes outputs y.out_count rows x x.out_count columns of RGB (HWC,
  // 3 bytes a pixel) of the resize described by the two axes (full-image
  // pixel coordinates) to `out`. Once per Open.
  absl::Status DecodeResized(const ResampleAxis& x, const ResampleAxis& y,
                             uint8_t* out, DecodeStats* stats = nullptr);

  // The whole image at DCT scale scale_num / 8 (1..8; PNG: 8 only), RGB.
  // Once per Open. For tests and the benchmark.
  absl::Status DecodeFull(int scale_num, std::vector<uint8_t>* rgb, int* width,
                          int* height);

 private:
  struct Jpeg;
  absl::Status DecodeJpeg(const ResampleAxis& x, const ResampleAxis& y,
                          uint8_t* out, DecodeStats* stats);
  absl::Status DecodePng(const ResampleAxis& x, const ResampleAxis& y,
                         uint8_t* out);
  // The whole PNG, 1 or 3 bytes a pixel, plus `slack` bytes.
  absl::Status ReadPng(std::vector<uint8_t>* pixels, int* channels,
                       size_t slack);

  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  ImageHeader header_;
  double dct_headroom_ = 1.0;
  std::unique_ptr<Jpeg> jpeg_;
  ResampleTaps taps_x_, taps_y_;
  std::vector<uint8_t> rows_;   // decoded scanlines
  std::vector<uint8_t> rgb_;    // one scanline converted to the output model
  std::vector<uint8_t> tmp_;    // horizontal pass output
  std::vector<uint8_t> small_;  // vertical pass output before RGB expansion
};

}  // namespace batchd

#endif  // BATCHD_WORKLOADS_IMAGENET_IMAGE_DECODER_H_

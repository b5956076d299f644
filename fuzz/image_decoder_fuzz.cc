// libFuzzer target for ImageDecoder: any bytes, through Open and both decode
// paths (a crop resize and a resize + centre crop), must give a Status,
// never a crash, a leak or a sanitizer report. Seeds: JPEGs (colour,
// grayscale, CMYK, progressive, 4:4:4) and PNGs from make_seeds.py.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "workloads/imagenet/image_decoder.h"
#include "workloads/imagenet/transforms.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static batchd::ImageDecoder* decoder = new batchd::ImageDecoder;
  static std::vector<uint8_t> out(64 * 64 * 3);
  if (!decoder->Open(data, size).ok()) return 0;
  const int w = decoder->header().width, h = decoder->header().height;
  // Keep the fuzzer fast: huge (valid) headers are legal but slow.
  if (uint64_t(w) * uint64_t(h) > (uint64_t(1) << 22)) return 0;
  batchd::ResampleAxis x, y;
  if (size % 2 == 0) {
    batchd::CropResizeAxes(batchd::CropBox{w / 4, h / 3, w - w / 4, h - h / 3},
                           64, &x, &y);
  } else {
    batchd::ResizeCenterCropAxes(w, h, 73, 64, &x, &y);
  }
  (void)decoder->DecodeResized(x, y, out.data());
  return 0;
}

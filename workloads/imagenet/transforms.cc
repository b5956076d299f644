// torchvision's transform geometry; see transforms.h.
#include "workloads/imagenet/transforms.h"

#include <algorithm>
#include <cmath>

namespace batchd {

int RoundHalfEven(double v) { return int(std::nearbyint(v)); }

namespace {

// Uniform integer in [0, n), as torch.randint(0, n).
int UniformInt(ExampleRng* rng, int n) {
  return int(rng->NextU64() % uint64_t(n));
}

}  // namespace

CropBox SampleRandomResizedCrop(int width, int height,
                                const RandomResizedCropParams& p,
                                ExampleRng* rng) {
  const double area = double(height) * double(width);
  const double log_lo = std::log(p.ratio_lo), log_hi = std::log(p.ratio_hi);
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target_area = area * rng->Uniform(p.scale_lo, p.scale_hi);
    const double aspect_ratio = std::exp(rng->Uniform(log_lo, log_hi));
    const int w = RoundHalfEven(std::sqrt(target_area * aspect_ratio));
    const int h = RoundHalfEven(std::sqrt(target_area / aspect_ratio));
    if (0 < w && w <= width && 0 < h && h <= height) {
      CropBox box;
      box.w = w;
      box.h = h;
      box.y = UniformInt(rng, height - h + 1);
      box.x = UniformInt(rng, width - w + 1);
      return box;
    }
  }
  // Fallback to a centre crop, its ratio clamped into [ratio_lo, ratio_hi].
  const double in_ratio = double(width) / double(height);
  const double min_ratio = std::min(p.ratio_lo, p.ratio_hi);
  const double max_ratio = std::max(p.ratio_lo, p.ratio_hi);
  CropBox box;
  if (in_ratio < min_ratio) {
    box.w = width;
    box.h = RoundHalfEven(box.w / min_ratio);
  } else if (in_ratio > max_ratio) {
    box.h = height;
    box.w = RoundHalfEven(box.h * max_ratio);
  } else {
    box.w = width;
    box.h = height;
  }
  box.y = (height - box.h) / 2;
  box.x = (width - box.w) / 2;
  return box;
}

void CropResizeAxes(const CropBox& box, int size, ResampleAxis* x,
                    ResampleAxis* y) {
  *x = ResampleAxis{
      double(box.x), double(box.x + box.w), box.x, box.x + box.w, size, 0,
      size};
  *y = ResampleAxis{
      double(box.y), double(box.y + box.h), box.y, box.y + box.h, size, 0,
      size};
}

void ResizeCenterCropAxes(int width, int height, int resize_size, int crop_size,
                          ResampleAxis* x, ResampleAxis* y) {
  // _compute_resized_output_size: the shorter side becomes resize_size, the
  // longer int(resize_size * long / short).
  int new_w, new_h;
  if (width <= height) {
    new_w = resize_size;
    new_h = int(double(resize_size) * height / width);
  } else {
    new_h = resize_size;
    new_w = int(double(resize_size) * width / height);
  }
  // center_crop: int(round((size - crop) / 2.0)).
  const int top = RoundHalfEven((new_h - crop_size) / 2.0);
  const int left = RoundHalfEven((new_w - crop_size) / 2.0);
  *x = ResampleAxis{0.0, double(width), 0, width, new_w, left, crop_size};
  *y = ResampleAxis{0.0, double(height), 0, height, new_h, top, crop_size};
}

}  // namespace batchd

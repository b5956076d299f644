// The geometry of AlgoPerf's ImageNet transforms, as torchvision computes
// it: RandomResizedCrop's box (get_params: 10 tries of a uniform area
// fraction and a log-uniform aspect ratio, then a centre crop with the ratio
// clamped) and Resize(shorter side) + CenterCrop. Randomness comes from the
// example's ExampleRng, so a box depends on (seed, epoch, position) only.
//
// Thread safety: plain functions.
#ifndef BATCHD_WORKLOADS_IMAGENET_TRANSFORMS_H_
#define BATCHD_WORKLOADS_IMAGENET_TRANSFORMS_H_

#include "workloads/counter_rng.h"
#include "workloads/imagenet/resample.h"

namespace batchd {

// A box in image pixels; torchvision's (i, j, h, w) is (y, x, h, w).
struct CropBox {
  int x = 0;
  int y = 0;
  int w = 0;
  int h = 0;
};

struct RandomResizedCropParams {
  double scale_lo = 0.08;
  double scale_hi = 1.0;
  double ratio_lo = 3.0 / 4.0;
  double ratio_hi = 4.0 / 3.0;
};

// torchvision.transforms.RandomResizedCrop.get_params for a width x height
// image. Draws, per try: area fraction, then log-ratio; on success y, then x.
CropBox SampleRandomResizedCrop(int width, int height,
                                const RandomResizedCropParams& params,
                                ExampleRng* rng);

// The resize axes of "crop `box`, resize it to size x size" (torchvision's
// resized_crop on a PIL image): x first, then y.
void CropResizeAxes(const CropBox& box, int size, ResampleAxis* x,
                    ResampleAxis* y);

// The resize axes of Resize(resize_size) (shorter side, torchvision's
// rounding) followed by CenterCrop(crop_size) (torchvision's rounding; the
// resized image must be at least crop_size on both sides, which holds when
// resize_size >= crop_size).
void ResizeCenterCropAxes(int width, int height, int resize_size, int crop_size,
                          ResampleAxis* x, ResampleAxis* y);

// Python's round() for the values torchvision rounds: halves to even.
int RoundHalfEven(double v);

}  // namespace batchd

#endif  // BATCHD_WORKLOADS_IMAGENET_TRANSFORMS_H_

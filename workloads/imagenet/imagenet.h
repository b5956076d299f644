// The imagenet workload: AlgoPerf's imagenet_resnet input pipeline.
//
// Data: `data` is the data set's root and `split` picks the files:
//   1. <data>/<split>/ as an ImageFolder tree (<class>/<image>, torchvision's
//      order and labels), if that directory exists; else
//   2. the TFRecord shards <data>/*-<split>.tfrecord-NNNNN-of-NNNNN (TFDS
//      imagenet2012: `image` JPEG bytes, `label` int64), sorted by name.
//   "val" and "validation" stand for each other when only the other exists
//   (AlgoPerf's folders say val, TFDS says validation).
//   "eval_train" reads the train files (see below). "test", when neither
//   exists, falls back to ImageNet-v2 in its TFDS layout, AlgoPerf's test
//   set: <data>/imagenet_v2/matched-frequency/3.0.0/
//   imagenet_v2-test.tfrecord-NNNNN-of-NNNNN (`image`, `label`), i.e.
//   `data` is the TFDS data_dir AlgoPerf's imagenet_v2_data_dir names.
// Split "train" shuffles, repeats and augments with
// RandomResizedCrop(image_size, scale (0.08, 1), ratio (3/4, 4/3)) and a
// horizontal flip with p = 0.5; any other split is an evaluation split: one
// pass in order, Resize(resize_size) then CenterCrop(image_size), the last
// batch padded (zeros, label 0) and marked by `weights`.
// Split "eval_train" is AlgoPerf's: the evaluation transform over the subset
// of train that its PyTorch workload draws, indices = list(range(N));
// random.Random(seed).shuffle(indices); indices[:eval_train_examples], in
// that order (CPython's generator, bit for bit; see python_random.h). N is
// the train split's size (AlgoPerf hard-codes 1,281,167, the same on the
// real data set).
//
// Tensors: inputs uint8 [B, S, S, 3] (layout=nchw: [B, 3, S, S]), targets
// int64 [B]; evaluation splits add weights float32 [B] (1 real, 0 padding).
//
// Options (kImageNetWorkload's table holds each one's default and bounds;
// batchd --help prints them):
//   image_size       S, the output side
//   resize_size      evaluation's shorter side before the crop (at least
//                    image_size)
//   layout           nhwc or nchw
//   on_decode_error  substitute: an image that cannot be decoded is
//                    replaced by another example of the epoch, chosen from
//                    the example's random stream (so deterministically),
//                    counted in decode_errors and logged (the first 10, then
//                    every 1000th); fail: the stream fails, naming the file
//   progress         1: report indexing of large trees on stderr
//   with_ids         1: add ids int64 [B], each example's global id (-1 on
//                    padding), for checks of which examples a rank got
//                    (eval_train: the example's id in the train split)
//   eval_train_examples  size of the eval_train subset (AlgoPerf's
//                    num_eval_train_examples; at most N)
//   max_file_bytes   the largest image file read (judged from fstat); a
//                    larger one is a decode error
//   dct_headroom     H: JPEGs decode at the smallest DCT scale k/8, k in
//                    {1, 2, 4, 8}, that keeps at least H scaled pixels per
//                    output pixel across the resized box. A DCT-scaled image
//                    low-passes unlike Pillow's triangle filter: at 1 (the
//                    smallest scale that keeps the output resolution)
//                    pixels land ~2-3 per channel value from torchvision's
//                    on grainy photos, at 1.25 within ~1.5; at 8/8 (large
//                    H) they match torchvision's up to 1 at a few pixels
//                    (the resampler's rounding, see resample.h)
//   debug_fixed_crop x,y,w,h,flip: a test hook that replaces the random crop
//                    box and flip of every training example (the box is
//                    clipped to each image). Refused unless the server runs
//                    with BATCHD_TEST_HOOKS=1 in its environment.
#ifndef BATCHD_WORKLOADS_IMAGENET_IMAGENET_H_
#define BATCHD_WORKLOADS_IMAGENET_IMAGENET_H_

#include <memory>

#include "workloads/workload_entry.h"

namespace batchd {

extern const WorkloadEntry kImageNetWorkload;

}  // namespace batchd

#endif  // BATCHD_WORKLOADS_IMAGENET_IMAGENET_H_

// The fastmri workload: AlgoPerf's knee single-coil fastMRI (its U-Net
// workload), read from the HDF5 volumes as the fastMRI release lays them
// out under data: knee_singlecoil_train/*.h5 and knee_singlecoil_val/*.h5
// (workloads/fastmri/volume.h), one example per slice, transformed as
// AlgoPerf's input pipeline transforms it (workloads/fastmri/kspace.h;
// docs/fastmri.md).
//
// Splits: "train" (every slice of the train volumes, batchd's seeded
// shuffle, each slice's mask from batchd's counter-based stream of (seed,
// slice)); "eval_train" (the first eval_train_examples slices of the train
// volumes in file order, with the masks train gives them); "validation"
// (the first validation_files of the sorted val volumes, slices in order)
// and "test" (the rest), both with AlgoPerf's fixed eval mask (seed (0,
// 0)). Volumes are taken in sorted name order.
//
// Tensors: inputs, targets float32 [B, 320, 320]; mean, std, volume_max
// float32 [B]; weights float32 [B] on the evaluation splits (1 real, 0 on
// the zero rows that pad the last batch).
//
// Options (kFastMriWorkload's table holds each one's default and bounds):
//   eval_train_examples  slices of eval_train (AlgoPerf's: 3,554 rounded up
//                        to its eval batch of 256)
//   validation_files     val volumes of the validation split (AlgoPerf's
//                        100); test has the rest
//
// A volume that is not what the fastMRI release writes (not HDF5, a dataset
// missing or of another shape or type, truncated) refuses the stream naming
// the file; a slice with a non-finite value, or that changed on disk,
// counts a decode error and fails the stream naming the file and slice.
#ifndef BATCHD_WORKLOADS_FASTMRI_FASTMRI_H_
#define BATCHD_WORKLOADS_FASTMRI_FASTMRI_H_

#include <memory>

#include "absl/status/statusor.h"
#include "workloads/workload_entry.h"

namespace batchd {

extern const WorkloadEntry kFastMriWorkload;

}  // namespace batchd

#endif  // BATCHD_WORKLOADS_FASTMRI_FASTMRI_H_

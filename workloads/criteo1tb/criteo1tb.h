// The criteo1tb workload (AlgoPerf's DLRM data): Criteo 1TB's TSV day
// files read as they lie (`day_{D}_{NN}`, no extension), every line turned
// into AlgoPerf's values (criteo_line.h). docs/criteo1tb.md has the
// details.
//
// Splits (files relative to data_path, sorted by day then index):
//   train       day_0_* .. day_22_*: the files cut into block_kib blocks,
//               the blocks permuted per epoch (seeded), the lines of each
//               window of window_blocks consecutive blocks of that order
//               shuffled (seeded); every line once per epoch, the epoch's
//               remainder dropped; a batch's cursor carries the rows
//               before its window, so resuming from it counts only the
//               windows served (O(1) in the data).
//   eval_train  the first eval_train_examples lines of the train files, in
//               file order; validation day_23_19 .. day_23_35; test
//               day_23_00 .. day_23_18: one pass in file order, the last
//               batch padded with zero rows of weight 0.
// Options (kCriteo1TbWorkload's table holds each one's default and bounds;
// batchd --help prints them):
//   ids           float32 or int64: int64 adds tensor `ids` int64 [26], the
//                 hashed ids before AlgoPerf's cast to float32 (which
//                 merges ids above 2^24).
//   block_kib     block size in KiB.
//   window_blocks blocks whose lines are shuffled together.
//   max_line_bytes  longer lines are damaged.
//   eval_train_examples  AlgoPerf's num_eval_train_examples by default.
// Tensors: inputs float32 [39] (13 dense, then 26 ids as float32), targets
// float32 [], weights float32 [] (1 real, 0 padding or a damaged line).
#ifndef BATCHD_WORKLOADS_CRITEO1TB_CRITEO1TB_H_
#define BATCHD_WORKLOADS_CRITEO1TB_CRITEO1TB_H_

#include <memory>

#include "absl/status/statusor.h"
#include "workloads/workload_entry.h"

namespace batchd {

extern const WorkloadEntry kCriteo1TbWorkload;

}  // namespace batchd

#endif  // BATCHD_WORKLOADS_CRITEO1TB_CRITEO1TB_H_

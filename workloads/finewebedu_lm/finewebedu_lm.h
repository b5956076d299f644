// The finewebedu_lm workload (AlgoPerf's decoder-only LM data): `train/` and
// `val/` under data_path, each a Hugging Face `Dataset.save_to_disk` folder
// read as it lies (`data-XXXXX-of-NNNNN.arrow` Arrow IPC stream files,
// column `input_ids`, list<int32> or list<int64>; arrow_stream.h).
// docs/finewebedu_lm.md has the details.
//
// Each split is its rows in shard order as one flat token stream, cut into
// windows of 1,025 tokens (the last partial window dropped): example w is
// tokens [1025w, 1025w + 1025), inputs its first 1,024, targets its last.
// Opening reads metadata only; a window is found by binary search over the
// cumulative token counts of the record batches.
//   train       train/, windows shuffled per epoch by the sampler.
//   eval_train  train/ from its start, in order, the first
//               eval_train_examples windows (AlgoPerf's
//               num_eval_train_examples by default).
//   validation  val/, in order.
// Eval splits pad the last global batch with rows of -1 (inputs and
// targets) of weight 0.
// Tensors: inputs int32 [1024], targets int32 [1024]; eval splits add
// weights float32 [1024] (1 real, 0 padding).
#ifndef BATCHD_WORKLOADS_FINEWEBEDU_LM_FINEWEBEDU_LM_H_
#define BATCHD_WORKLOADS_FINEWEBEDU_LM_FINEWEBEDU_LM_H_

#include <memory>

#include "absl/status/statusor.h"
#include "workloads/workload_entry.h"

namespace batchd {

extern const WorkloadEntry kFineWebEduLmWorkload;

}  // namespace batchd

#endif  // BATCHD_WORKLOADS_FINEWEBEDU_LM_FINEWEBEDU_LM_H_

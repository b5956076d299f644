// The wmt workload's eval splits (validation, test, eval_train): one kept
// pair a row, padded to max_length, with `weights` (targets > 0 on real
// rows, 0 on the padding rows of the last batch); items are the sampler's
// examples, one pass in order. Which pairs are kept is learnt once, at
// Create, by tokenizing the split in file order (eval_train: only as far
// as its first eval_train_examples kept pairs of train).
//
// Thread safety: as Workload. Nothing changes after Create but the
// read-ahead pointer, which the server sets once before the first FillItem.
#ifndef BATCHD_WORKLOADS_WMT_WMT_EVAL_H_
#define BATCHD_WORKLOADS_WMT_WMT_EVAL_H_

#include <memory>

#include "absl/status/statusor.h"
#include "workloads/split.h"
#include "workloads/wmt/pair_reader.h"
#include "workloads/workload.h"

namespace batchd {
namespace wmt {

// The eval workload of `reader`'s pairs; `split` is not kTrain.
absl::StatusOr<std::unique_ptr<Workload>> CreateWmtEvalWorkload(
    std::shared_ptr<const PairReader> reader, Split split);

}  // namespace wmt
}  // namespace batchd

#endif  // BATCHD_WORKLOADS_WMT_WMT_EVAL_H_

// The wmt workload: the options and split parsed once, the stream's one
// pair source and tokenizer opened, then the train workload (packed rows,
// wmt_train.h) or the eval workload (padded pairs, wmt_eval.h) built from
// them; see wmt.h.
#include "workloads/wmt/wmt.h"

#include "workloads/split.h"
#include "workloads/wmt/pair_reader.h"
#include "workloads/wmt/wmt_eval.h"
#include "workloads/wmt/wmt_options.h"
#include "workloads/wmt/wmt_train.h"

namespace batchd {

absl::StatusOr<std::unique_ptr<Workload>> CreateWmtWorkload(
    const WorkloadConfig& config) {
  absl::StatusOr<wmt::Options> options = wmt::ParseOptions(config);
  if (!options.ok()) return options.status();
  absl::StatusOr<Split> split =
      ParseSplit("wmt", config.split,
                 {Split::kTrain, Split::kEvalTrain, Split::kValidation,
                  Split::kTest});
  if (!split.ok()) return split.status();
  // eval_train reads the head of the train files.
  const Split files = *split == Split::kEvalTrain ? Split::kTrain : *split;
  absl::StatusOr<std::shared_ptr<const wmt::PairReader>> reader =
      wmt::PairReader::Create(config, *options, SplitName(files));
  if (!reader.ok()) return reader.status();
  if (*split == Split::kTrain) {
    return wmt::CreateWmtTrainWorkload(*std::move(reader), config);
  }
  return wmt::CreateWmtEvalWorkload(*std::move(reader), *split);
}

}  // namespace batchd

// The wmt workload: its entry (splits, options), and its factory: the
// stream's one pair source and tokenizer opened, then the train workload
// (packed rows, wmt_train.h) or the eval workload (padded pairs,
// wmt_eval.h) built from them; see wmt.h.
#include "workloads/wmt/wmt.h"

#include "workloads/split.h"
#include "workloads/wmt/pair_reader.h"
#include "workloads/wmt/wmt_constants.h"
#include "workloads/wmt/wmt_eval.h"
#include "workloads/wmt/wmt_options.h"
#include "workloads/wmt/wmt_train.h"

namespace batchd {
namespace {

absl::StatusOr<std::unique_ptr<Workload>> Create(const WorkloadContext& c) {
  const wmt::Options options = wmt::OptionsOf(c.options);
  // eval_train reads the head of the train files.
  const Split files = c.split == Split::kEvalTrain ? Split::kTrain : c.split;
  absl::StatusOr<std::shared_ptr<const wmt::PairReader>> reader =
      wmt::PairReader::Create(c, options, SplitName(files));
  if (!reader.ok()) return reader.status();
  if (c.split == Split::kTrain) {
    return wmt::CreateWmtTrainWorkload(*std::move(reader), c.config);
  }
  return wmt::CreateWmtEvalWorkload(*std::move(reader), c.split);
}

constexpr const char* kSources[] = {"auto", "tfds", "text"};
constexpr const char* kDTypes[] = {"int32", "int64"};
constexpr const char* kInvalidUtf8[] = {"encode", "drop"};
constexpr OptionSpec kOptions[] = {
    TextOption("vocab", "wmt_sentencepiece_model",
               "the SentencePiece model, relative to the data path"),
    ChoiceOption("source", "auto", kSources,
                 "TFDS shards or text files (auto: TFDS when present)"),
    ChoiceOption("dtype", "int32", kDTypes, "of the token tensors"),
    UintOption("max_length", 256, 1, wmt::kMaxLength,
               "row length, length filter and packing window"),
    UintOption("skip_empty", 0, 0, 1,
               "1: drop pairs with an empty side (counted as skipped)"),
    IndexThreads(),
    // AlgoPerf's wmt: 3000 validation pairs rounded up to 128.
    EvalTrainExamples(3072),
    ChoiceOption("invalid_utf8", "encode", kInvalidUtf8,
                 "a pair with bytes that are not UTF-8: tokenized as "
                 "AlgoPerf's op does, or dropped as a decode error"),
};

}  // namespace

const WorkloadEntry kWmtWorkload = {
    "wmt",
    "TFDS wmt17/wmt14 de-en or text, SentencePiece, AlgoPerf's packing",
    kEverySplit,
    kOptions,
    Create,
};

}  // namespace batchd

// The split vocabulary every workload shares, parsed in one place: a
// stream's split names one of four kinds, and each workload serves the
// kinds it lists. "train" is shuffled and repeated; the others are one
// pass in order, the last global batch padded and weighted (eval splits).
//
//   train       the training examples (train streams)
//   eval_train  an evaluation pass over part of the training examples
//   validation  the held-out validation examples; also spelled "val" (an
//               ImageFolder tree's usual name) and "eval"
//   test        the test examples
//
// Thread safety: the functions are pure.
#ifndef BATCHD_WORKLOADS_SPLIT_H_
#define BATCHD_WORKLOADS_SPLIT_H_

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace batchd {

enum class Split { kTrain, kEvalTrain, kValidation, kTest };

// Every kind, train first: the splits of a workload that serves them all.
inline constexpr Split kEverySplit[] = {Split::kTrain, Split::kEvalTrain,
                                        Split::kValidation, Split::kTest};

// The canonical name: "train", "eval_train", "validation", "test".
absl::string_view SplitName(Split split);

// Whether streams of `split` are evaluation passes (every split but train).
inline bool IsEvalSplit(Split split) { return split != Split::kTrain; }

// The kind `name` spells, if workload `workload` serves it (one of
// `supported`). InvalidArgument otherwise, naming the workload, the name and
// the names it serves: "wmt: unknown split 'x' (known: train, eval_train,
// validation, test)".
absl::StatusOr<Split> ParseSplit(absl::string_view workload,
                                 absl::string_view name,
                                 absl::Span<const Split> supported);

}  // namespace batchd

#endif  // BATCHD_WORKLOADS_SPLIT_H_

// The split vocabulary; see split.h.
#include "workloads/split.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace batchd {
namespace {

struct SplitSpelling {
  absl::string_view name;
  Split split;
};

// Canonical names first, then the other spellings.
constexpr SplitSpelling kSpellings[] = {
    {"train", Split::kTrain},           {"eval_train", Split::kEvalTrain},
    {"validation", Split::kValidation}, {"test", Split::kTest},
    {"val", Split::kValidation},        {"eval", Split::kValidation},
};

}  // namespace

absl::string_view SplitName(Split split) {
  for (const SplitSpelling& s : kSpellings) {
    if (s.split == split) return s.name;
  }
  return "unknown";
}

absl::StatusOr<Split> ParseSplit(absl::string_view workload,
                                 absl::string_view name,
                                 absl::Span<const Split> supported) {
  auto served = [&](Split split) {
    for (Split s : supported) {
      if (s == split) return true;
    }
    return false;
  };
  for (const SplitSpelling& s : kSpellings) {
    if (s.name == name && served(s.split)) return s.split;
  }
  std::vector<std::string> known;
  for (Split s : supported) known.emplace_back(SplitName(s));
  return absl::InvalidArgumentError(
      absl::StrCat(workload, ": unknown split '", name, "' (known: ",
                   absl::StrJoin(known, ", "), ")"));
}

}  // namespace batchd

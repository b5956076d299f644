// The table of workloads; see registry.h.
#include "workloads/registry.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "workloads/criteo1tb/criteo1tb.h"
#include "workloads/fastmri/fastmri.h"
#include "workloads/finewebedu_lm/finewebedu_lm.h"
#include "workloads/imagenet/imagenet.h"
#include "workloads/librispeech/librispeech.h"
#include "workloads/ogbg/ogbg.h"
#include "workloads/synthetic.h"
#include "workloads/wmt/wmt.h"

namespace batchd {
namespace {

// Appends `text` wrapped at 78 columns, every line indented by `indent`
// spaces.
void AppendWrapped(std::string* out, const std::string& text, size_t indent) {
  const std::string pad(indent, ' ');
  std::string line = pad;
  for (absl::string_view word : absl::StrSplit(text, ' ', absl::SkipEmpty())) {
    if (line.size() > indent && line.size() + 1 + word.size() > 78) {
      absl::StrAppend(out, line, "\n");
      line = pad + "  ";
    } else if (line.size() > indent) {
      line += ' ';
    }
    absl::StrAppend(&line, word);
  }
  absl::StrAppend(out, line, "\n");
}

}  // namespace

absl::Span<const WorkloadEntry> Workloads() {
  // Each entry is declared in its workload's folder.
  static const WorkloadEntry kWorkloads[] = {
      kSyntheticWorkload, kImageNetWorkload,     kWmtWorkload,
      kCriteo1TbWorkload, kFineWebEduLmWorkload, kLibriSpeechWorkload,
      kOgbgWorkload,      kFastMriWorkload,
  };
  return kWorkloads;
}

absl::StatusOr<const WorkloadEntry*> FindWorkload(
    const std::string& name, absl::Span<const WorkloadEntry> table) {
  for (const WorkloadEntry& e : table) {
    if (name == e.name) return &e;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown workload '", name,
      "' (known: ", absl::StrJoin(WorkloadNames(table), ", "), ")"));
}

absl::StatusOr<std::unique_ptr<Workload>> CreateWorkload(
    const std::string& name, const WorkloadConfig& config,
    absl::Span<const WorkloadEntry> table) {
  absl::StatusOr<const WorkloadEntry*> entry = FindWorkload(name, table);
  if (!entry.ok()) return entry.status();
  return CreateWorkload(**entry, config);
}

std::vector<std::string> WorkloadNames(absl::Span<const WorkloadEntry> table) {
  std::vector<std::string> names;
  for (const WorkloadEntry& e : table) names.emplace_back(e.name);
  return names;
}

std::string WorkloadHelp(absl::Span<const WorkloadEntry> table) {
  size_t width = 0;
  for (const WorkloadEntry& e : table) {
    width = std::max(width, std::string(e.name).size());
  }
  std::string out;
  for (const WorkloadEntry& e : table) {
    const std::string name = e.name;
    absl::StrAppend(&out, "  ", name, std::string(width - name.size() + 2, ' '),
                    e.help, "\n");
    std::vector<std::string> splits;
    for (Split s : e.splits) splits.emplace_back(SplitName(s));
    AppendWrapped(&out, absl::StrCat("splits: ", absl::StrJoin(splits, ", ")),
                  6);
    for (const OptionSpec& o : e.options) {
      const std::string bounds = OptionBounds(o);
      const std::string def = OptionDefault(o);
      AppendWrapped(
          &out,
          absl::StrCat(o.key, "=", def.empty() ? "\"\"" : def,
                       bounds.empty() ? "" : " (" + bounds + ")", ": ", o.help),
          6);
    }
  }
  return out;
}

}  // namespace batchd

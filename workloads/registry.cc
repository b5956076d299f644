// The table of workloads; see registry.h.
#include "workloads/registry.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
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

constexpr WorkloadEntry kWorkloads[] = {
    {"synthetic", CreateSyntheticWorkload,
     "examples that carry their id, epoch and position (tests, benches)"},
    {"imagenet", CreateImageNetWorkload,
     "ImageFolder or TFDS imagenet2012, AlgoPerf's transforms"},
    {"wmt", CreateWmtWorkload,
     "TFDS wmt17/wmt14 de-en or text, SentencePiece, AlgoPerf's packing"},
    {"criteo1tb", CreateCriteo1TbWorkload,
     "Criteo 1TB TSV day files, AlgoPerf's hashing and log transform"},
    {"finewebedu_lm", CreateFineWebEduLmWorkload,
     "Hugging Face save_to_disk Arrow token rows, AlgoPerf's LM windows"},
    {"librispeech", CreateLibriSpeechWorkload,
     "AlgoPerf's pre-processed LibriSpeech (.npy utterances, CSV indexes)"},
    {"ogbg", CreateOgbgWorkload,
     "TFDS ogbg_molpcba, AlgoPerf's jraph graph batching in fixed rows"},
    {"fastmri", CreateFastMriWorkload,
     "fastMRI knee single-coil HDF5 volumes, AlgoPerf's k-space transform"},
};

}  // namespace

absl::Span<const WorkloadEntry> Workloads() { return kWorkloads; }

absl::StatusOr<std::unique_ptr<Workload>> CreateWorkload(
    const std::string& name, const WorkloadConfig& config,
    absl::Span<const WorkloadEntry> table) {
  for (const WorkloadEntry& e : table) {
    if (name != e.name) continue;
    WorkScope work(config.work);  // what the factory does is the stream's
    return e.factory(config);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown workload '", name, "' (known: ",
                   absl::StrJoin(WorkloadNames(table), ", "), ")"));
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
  }
  return out;
}

}  // namespace batchd

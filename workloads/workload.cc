// The table of workloads.
#include "workloads/workload.h"

#include "absl/strings/str_cat.h"
#include "workloads/imagenet/imagenet.h"
#include "workloads/synthetic.h"
#include "workloads/wmt/wmt.h"

namespace batchd {

absl::StatusOr<std::unique_ptr<Workload>> CreateWorkload(
    const std::string& name, const WorkloadConfig& config) {
  // An explicit table rather than static registration: easy to find, and it
  // survives static linking.
  if (name == "synthetic") return CreateSyntheticWorkload(config);
  if (name == "imagenet") return CreateImageNetWorkload(config);
  if (name == "wmt") return CreateWmtWorkload(config);
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown workload '", name, "' (known: synthetic, imagenet, wmt)"));
}

}  // namespace batchd

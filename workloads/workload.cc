// The table of workloads and option parsing shared by all of them.
#include "workloads/workload.h"

#include "absl/strings/numbers.h"
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

absl::StatusOr<uint64_t> UintOption(const WorkloadConfig& config,
                                    const std::string& key, uint64_t def) {
  auto it = config.options.find(key);
  if (it == config.options.end()) return def;
  uint64_t value;
  if (!absl::SimpleAtoi(it->second, &value)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "option ", key, "='", it->second, "' is not an unsigned integer"));
  }
  return value;
}

}  // namespace batchd

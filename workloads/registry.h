// The table of workloads the daemon serves: each entry's name, factory and
// one line of help. The "unknown workload" error and the help text are made
// from the table, so a workload added to it (docs/workloads.md) is known
// everywhere at once. An explicit table rather than static registration:
// easy to find, and it survives static linking.
//
// Thread safety: the table is constant; the functions may be called from
// any thread.
#ifndef BATCHD_WORKLOADS_REGISTRY_H_
#define BATCHD_WORKLOADS_REGISTRY_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "workloads/workload.h"

namespace batchd {

using WorkloadFactory =
    absl::StatusOr<std::unique_ptr<Workload>> (*)(const WorkloadConfig&);

struct WorkloadEntry {
  const char* name;          // the spec's `workload`
  WorkloadFactory factory;   // builds one stream's workload
  const char* help;          // what it serves, in one line of ~66 chars
};

// The daemon's workloads: synthetic, imagenet, wmt.
absl::Span<const WorkloadEntry> Workloads();

// `name`'s workload from `table` (default: the daemon's), made under
// config.work. InvalidArgument naming the table's workloads for a name it
// lacks: "unknown workload 'x' (known: synthetic, imagenet, wmt)".
absl::StatusOr<std::unique_ptr<Workload>> CreateWorkload(
    const std::string& name, const WorkloadConfig& config,
    absl::Span<const WorkloadEntry> table = Workloads());

// The table's names, in its order.
std::vector<std::string> WorkloadNames(
    absl::Span<const WorkloadEntry> table = Workloads());

// One line per workload, "  name  help", for help text (batchd --help).
std::string WorkloadHelp(absl::Span<const WorkloadEntry> table = Workloads());

}  // namespace batchd

#endif  // BATCHD_WORKLOADS_REGISTRY_H_

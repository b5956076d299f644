// The table of workloads the daemon serves: each workload's entry
// (workloads/workload_entry.h: name, help, splits, options, factory),
// declared in its own folder and listed here. The "unknown workload" error,
// the help text (batchd --help) and what batchctl plan reports of a
// workload are made from the table, so a workload added to it
// (docs/workloads.md) is known everywhere at once. An explicit table rather
// than static registration: easy to find, and it survives static linking.
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
#include "workloads/workload_entry.h"

namespace batchd {

// The daemon's workloads, in the order batchd --help lists them.
absl::Span<const WorkloadEntry> Workloads();

// `name`'s entry in `table`, or InvalidArgument naming the table's
// workloads: "unknown workload 'x' (known: synthetic, imagenet, ...)".
absl::StatusOr<const WorkloadEntry*> FindWorkload(
    const std::string& name,
    absl::Span<const WorkloadEntry> table = Workloads());

// `name`'s workload from `table` (default: the daemon's): FindWorkload,
// then CreateWorkload(entry, config).
absl::StatusOr<std::unique_ptr<Workload>> CreateWorkload(
    const std::string& name, const WorkloadConfig& config,
    absl::Span<const WorkloadEntry> table = Workloads());

// The table's names, in its order.
std::vector<std::string> WorkloadNames(
    absl::Span<const WorkloadEntry> table = Workloads());

// For help text (batchd --help): per workload a line "  name  help", then
// its splits and one line per option ("key=default (bounds): help").
std::string WorkloadHelp(absl::Span<const WorkloadEntry> table = Workloads());

}  // namespace batchd

#endif  // BATCHD_WORKLOADS_REGISTRY_H_

// The prologue of every workload; see workload_entry.h.
#include "workloads/workload_entry.h"

namespace batchd {

absl::StatusOr<std::unique_ptr<Workload>> CreateWorkload(
    const WorkloadEntry& entry, const WorkloadConfig& config) {
  WorkScope work(config.work);  // what the factory does is the stream's
  absl::StatusOr<OptionValues> options =
      OptionValues::Parse(entry.name, entry.options, config.options);
  if (!options.ok()) return options.status();
  absl::StatusOr<Split> split =
      ParseSplit(entry.name, config.split, entry.splits);
  if (!split.ok()) return split.status();
  std::shared_ptr<const DataRoot> root;
  if (entry.reads_files) {
    // The one place a stream's data root is opened: the daemon's
    // --data-root (data_path where a tool or test gives no root), with
    // the owner's permissions and the daemon's size limit.
    absl::StatusOr<std::shared_ptr<const DataRoot>> opened = DataRoot::Open(
        config.data_root.empty() ? config.data_path : config.data_root,
        config.access, config.max_data_file_bytes);
    if (!opened.ok()) return opened.status();
    root = *std::move(opened);
  }
  return entry.factory(WorkloadContext{config, *options, *split, root});
}

}  // namespace batchd

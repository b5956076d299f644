// An ordered list of TFRecord shards as one record sequence; see
// tfrecord_shards.h.
#include "workloads/common/tfrecord_shards.h"

#include <algorithm>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "base/executor.h"
#include "base/work_context.h"

namespace batchd {

absl::StatusOr<TFRecordShards> TFRecordShards::Open(
    const std::vector<std::string>& paths, const TFRecordOptions& options,
    const OnShard& on_shard, size_t parallel, Executor* executor) {
  if (paths.size() > kMaxTFRecordShards) {
    return absl::InvalidArgumentError(absl::StrCat(
        "more than ", kMaxTFRecordShards, " TFRecord shards (", paths.size(),
        ", the first ", paths[0], "): each stays open while its stream lives"));
  }
  std::vector<std::unique_ptr<TFRecordFile>> opened(paths.size());
  std::vector<absl::Status> errors(paths.size());
  struct Progress {
    absl::Mutex mu;
    size_t done ABSL_GUARDED_BY(mu) = 0;
    uint64_t records ABSL_GUARDED_BY(mu) = 0;
  } progress;
  // Each shard's error is kept for its place in the order, not returned;
  // the loop's own error (its request cancelled) is.
  absl::Status loop = ParallelFor(
      executor, Priority::kServing, paths.size(), parallel,
      [&](uint64_t f) {
        absl::StatusOr<std::unique_ptr<TFRecordFile>> file =
            TFRecordFile::Open(paths[f], options);
        absl::MutexLock lock(&progress.mu);
        ++progress.done;
        if (file.ok()) {
          progress.records += (*file)->size();
          opened[f] = std::move(*file);
        } else {
          errors[f] = file.status();
        }
        if (on_shard) on_shard(progress.done, progress.records);
        ReportProgress("indexing TFRecord shards", progress.done, paths.size(),
                       "shards");
        return absl::OkStatus();
      },
      /*max_chunk=*/1);
  if (!loop.ok()) return loop;

  TFRecordShards shards;
  shards.first_.clear();
  uint64_t total = 0;
  for (size_t f = 0; f < paths.size(); ++f) {
    if (!errors[f].ok()) return errors[f];  // the first in shard order
    shards.first_.push_back(total);
    total += opened[f]->size();
    shards.files_.push_back(std::move(opened[f]));
  }
  shards.first_.push_back(total);
  return shards;
}

TFRecordShards::Location TFRecordShards::Locate(uint64_t i) const {
  // first_ is sorted; the shard is the last one starting at or before i
  // (empty shards start where the next one does and are passed over).
  Location at;
  at.shard = size_t(std::upper_bound(first_.begin(), first_.end(), i) -
                    first_.begin() - 1);
  at.record = i - first_[at.shard];
  return at;
}

absl::StatusOr<std::string> TFRecordShards::Read(uint64_t i) const {
  const Location at = Locate(i);
  return files_[at.shard]->Read(size_t(at.record));
}

}  // namespace batchd

// An ordered list of TFRecord shards as one record sequence; see
// tfrecord_shards.h.
#include "workloads/common/tfrecord_shards.h"

#include <algorithm>
#include <utility>

namespace batchd {

absl::StatusOr<TFRecordShards> TFRecordShards::Open(
    const std::vector<std::string>& paths, const TFRecordOptions& options,
    const OnShard& on_shard) {
  TFRecordShards shards;
  shards.first_.clear();
  uint64_t total = 0;
  for (const std::string& path : paths) {
    absl::StatusOr<std::unique_ptr<TFRecordFile>> file =
        TFRecordFile::Open(path, options);
    if (!file.ok()) return file.status();
    shards.first_.push_back(total);
    total += (*file)->size();
    shards.files_.push_back(std::move(*file));
    if (on_shard) on_shard(shards.files_.size(), total);
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

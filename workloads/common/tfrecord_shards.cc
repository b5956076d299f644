// An ordered list of TFRecord shards as one record sequence; see
// tfrecord_shards.h.
#include "workloads/common/tfrecord_shards.h"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <thread>
#include <utility>

namespace batchd {

absl::StatusOr<TFRecordShards> TFRecordShards::Open(
    const std::vector<std::string>& paths, const TFRecordOptions& options,
    const OnShard& on_shard, size_t threads) {
  std::vector<std::unique_ptr<TFRecordFile>> opened(paths.size());
  std::vector<absl::Status> errors(paths.size());
  std::mutex mu;
  size_t done = 0;
  uint64_t records = 0;
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t f = next++; f < paths.size(); f = next++) {
      absl::StatusOr<std::unique_ptr<TFRecordFile>> file =
          TFRecordFile::Open(paths[f], options);
      std::lock_guard<std::mutex> lock(mu);
      ++done;
      if (file.ok()) {
        records += (*file)->size();
        opened[f] = std::move(*file);
      } else {
        errors[f] = file.status();
      }
      if (on_shard) on_shard(done, records);
    }
  };
  std::vector<std::thread> pool;
  threads = std::max<size_t>(1, std::min(threads, paths.size()));
  for (size_t t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();

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

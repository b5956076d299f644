// A data set stored as an ordered list of TFRecord shards (TFDS's layout),
// seen as one sequence of records numbered from 0: record i of the set is
// record i - first(s) of the shard s that holds it.
//
// Thread safety: immutable after Open; Read may be called from any number of
// threads at once (TFRecordFile reads with pread).
#ifndef BATCHD_WORKLOADS_COMMON_TFRECORD_SHARDS_H_
#define BATCHD_WORKLOADS_COMMON_TFRECORD_SHARDS_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "workloads/common/tfrecord.h"

namespace batchd {

class Executor;  // base/executor.h

// The most shards a set may have: each stays open (a descriptor) while
// the set lives, and the daemon's descriptors serve every user, so that a
// folder of empty files named as shards must not take them all. TFDS
// writes ImageNet's train split in 1,024 shards.
inline constexpr size_t kMaxTFRecordShards = 2048;

class TFRecordShards {
 public:
  // Where record i of the set lives.
  struct Location {
    size_t shard = 0;     // index into the list given to Open
    uint64_t record = 0;  // record within that shard
  };

  // Called after each shard is indexed with the number of shards indexed
  // so far and the records they hold (for progress reports).
  using OnShard = std::function<void(size_t shards, uint64_t records)>;

  // Opens and indexes `paths` (TFRecordFile::Open with `options` for
  // each) on up to `parallel` threads at once, the caller's and those of
  // `executor`'s serving class (base/executor.h; null: the caller's
  // alone): on network storage every open and read waits for a round
  // trip, and the waits overlap. The set is in the order given whatever
  // the threads; the first error in that order is returned as is.
  // `on_shard` is called (serialised) as shards finish. An empty list is an
  // empty set; more than kMaxTFRecordShards is InvalidArgument, before any
  // is opened.
  static absl::StatusOr<TFRecordShards> Open(
      const std::vector<std::string>& paths, const TFRecordOptions& options,
      const OnShard& on_shard = nullptr, size_t parallel = 1,
      Executor* executor = nullptr);

  TFRecordShards(TFRecordShards&&) = default;
  TFRecordShards& operator=(TFRecordShards&&) = default;

  // Records in all shards together.
  uint64_t size() const { return first_.back(); }
  size_t shard_count() const { return files_.size(); }
  const TFRecordFile& shard(size_t s) const { return *files_[s]; }

  // Requires i < size().
  Location Locate(uint64_t i) const;
  // Record i's bytes; the shard's errors (DataLoss naming file and offset).
  // Requires i < size().
  absl::StatusOr<std::string> Read(uint64_t i) const;

 private:
  TFRecordShards() : first_{0} {}
  std::vector<std::unique_ptr<TFRecordFile>> files_;
  std::vector<uint64_t> first_;  // first record of each shard, then the total
};

}  // namespace batchd

#endif  // BATCHD_WORKLOADS_COMMON_TFRECORD_SHARDS_H_

// The files of a Criteo split cut into fixed-size byte blocks: the unit of
// criteo1tb's shuffle, counting and caching. A line belongs to the block
// its first byte lies in, so a block's lines are found by seeking to the
// block and skipping to the byte after the first '\n' (unless the block
// starts its file); nothing per line is ever kept but the lines of the
// blocks being served (BlockCache). A block's bytes are the workload's
// stored examples (ReadBlock), read through its items' FillContext.
//
// Thread safety: BlockTable is immutable after Create except for its
// per-block line counts (atomics); BlockCache is thread-safe.
#ifndef BATCHD_WORKLOADS_CRITEO1TB_CRITEO_BLOCKS_H_
#define BATCHD_WORKLOADS_CRITEO1TB_CRITEO_BLOCKS_H_

#include <atomic>
#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "storage/cache_dir.h"
#include "storage/data_file.h"
#include "workloads/criteo1tb/criteo_line.h"

namespace batchd {
namespace criteo {

// A block's lines, parsed: per line 40 floats (label, 13 dense, 26 ids cast
// to float32 as AlgoPerf does), whether it parsed, and when asked for, the
// exact ids and the dense fields' counts (ParsedLine::counts: the rows that
// AlgoPerf's TF computes with the scalar log1pf are written from them).
struct ParsedBlock {
  uint32_t lines = 0;
  std::vector<float> values;  // lines x 40
  std::vector<uint8_t> bad;   // lines: 1 = not an example (zeros)
  std::vector<int64_t> ids;   // lines x 26, when exact ids are kept
  std::vector<float> counts;  // lines x 13, when counts are kept
};

// Blocks of one split: its table keeps 4 bytes a block (the line counts),
// whatever the files hold, so the count is bounded before anything is
// kept. Criteo 1TB at the smallest block (64 KiB) has ~16 M; a split of
// sparse giants is refused (ResourceExhausted, naming the size).
inline constexpr uint64_t kMaxBlocks = uint64_t(1) << 25;

class BlockTable {
 public:
  // `files` (paths relative to the data root, in split order) with their
  // sizes from fstat, at most kMaxBlocks blocks of `block_bytes` in all.
  // Lines longer than `max_line` bytes are damaged.
  static absl::StatusOr<std::shared_ptr<BlockTable>> Create(
      std::shared_ptr<const DataRoot> root, std::vector<std::string> files,
      uint64_t block_bytes, uint64_t max_line);

  uint64_t num_blocks() const { return first_block_.back(); }
  size_t num_files() const { return files_.size(); }
  uint64_t total_bytes() const { return total_bytes_; }
  // Blocks [first_block(f), first_block(f + 1)) are file f's.
  uint64_t first_block(size_t f) const { return first_block_[f]; }

  // The lines of `block` (cached after the first count): reads only the
  // block's bytes and counts newlines.
  absl::StatusOr<uint32_t> Lines(uint64_t block) const;
  // Lines() if already known, else UINT32_MAX; never reads.
  uint32_t KnownLines(uint64_t block) const {
    return counts_[block].load(std::memory_order_relaxed);
  }
  // The block's stored bytes, its one entry of the workload's
  // ExampleSource: from the byte before it (unless it starts its file) to
  // the end of the last line starting in it (at most max_line bytes past
  // it; to the end of the file if that comes first).
  absl::Status ReadBlock(uint64_t block, std::string* bytes) const;
  // Parses ReadBlock's bytes into the block's lines (damaged lines logged
  // with their file and byte offset, and marked bad); DataLoss when they
  // cannot be the block's (the file changed).
  absl::StatusOr<std::shared_ptr<const ParsedBlock>> Parse(
      uint64_t block, const std::string& bytes, bool exact_ids,
      bool keep_counts = false) const;
  // "day_0_00 bytes [0, 1048576)", for messages.
  std::string Describe(uint64_t block) const;

  // The line counts learnt so far, kept in the daemon's cache (keyed by
  // every file's identity and the block size), so that a stream of a
  // restarted daemon resumes without counting again. Best effort: a
  // failure to store is logged and forgotten.
  void LoadCounts(const CacheDir& cache) const;
  void StoreCounts(const CacheDir& cache) const;
  // Blocks counted since the last StoreCounts (or LoadCounts).
  uint64_t counted_since_store() const { return counted_.load(); }

 private:
  struct File {
    std::string path;
    uint64_t size = 0;
  };
  BlockTable() = default;
  size_t FileOf(uint64_t block) const;
  absl::Status ReadRange(size_t file, uint64_t begin, uint64_t end,
                         std::string* out) const;

  std::shared_ptr<const DataRoot> root_;
  std::vector<File> files_;
  std::vector<uint64_t> first_block_;  // files + 1
  uint64_t block_bytes_ = 0, max_line_ = 0, total_bytes_ = 0;
  mutable std::unique_ptr<std::atomic<uint32_t>[]> counts_;
  mutable std::atomic<uint64_t> counted_{0};
  std::string identity_;  // the cache key: files, sizes, mtimes, block size
};

// The parsed blocks being served, least recently used dropped beyond
// `capacity`. A block not parsed is read by `read` (the item's context:
// no entry is held while it reads, since the read may be pending); a block
// another thread is parsing is waited for (CPU work, never I/O).
class BlockCache {
 public:
  BlockCache(std::shared_ptr<const BlockTable> table, size_t capacity,
             bool exact_ids, bool keep_counts = false)
      : table_(std::move(table)),
        capacity_(capacity),
        exact_ids_(exact_ids),
        keep_counts_(keep_counts) {}
  absl::StatusOr<std::shared_ptr<const ParsedBlock>> Get(
      uint64_t block, absl::FunctionRef<absl::Status(std::string*)> read) const;

 private:
  struct Entry {
    absl::Notification ready;
    absl::StatusOr<std::shared_ptr<const ParsedBlock>> result;
    std::list<uint64_t>::iterator lru;
  };
  const std::shared_ptr<const BlockTable> table_;
  const size_t capacity_;
  const bool exact_ids_, keep_counts_;
  mutable absl::Mutex mu_;
  mutable std::unordered_map<uint64_t, std::shared_ptr<Entry>> entries_
      ABSL_GUARDED_BY(mu_);
  mutable std::list<uint64_t> lru_ ABSL_GUARDED_BY(mu_);  // front: newest
};

}  // namespace criteo
}  // namespace batchd

#endif  // BATCHD_WORKLOADS_CRITEO1TB_CRITEO_BLOCKS_H_

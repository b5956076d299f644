// A bounds-checked reader of the metadata of an Arrow IPC stream file (what
// Hugging Face `datasets` writes as `data-XXXXX-of-NNNNN.arrow`): the Schema
// and the RecordBatch messages, parsed by hand from their flatbuffers
// (vtable lookups, every offset checked against the message), to locate one
// list-of-integers column's values in the file. It reads metadata only
// (each message's header, and the first and last list offset of each
// batch); the tokens stay in the file, read later by whoever needs them.
// docs/finewebedu_lm.md says why there is no libarrow.
//
// Accepted: little-endian streams (with or without the 0xFFFFFFFF
// continuation marker), metadata version V4 or V5, the column as list or
// large_list of int32 or int64 (signed), no null lists or values, no body
// compression. Refused, naming the file and the byte offset of the message:
// anything out of bounds (a truncated file included), a file that ends
// without the end-of-stream marker, dictionary batches, other message
// kinds, a column of another type, or a type whose buffers it cannot count
// before the column.
//
// What a file claims is bounded before it costs anything (the file is
// another user's): a message's metadata is read only when it lies inside
// the file and is at most kMaxMetadataBytes; the schema is walked as the
// tree it must be, each field table once (a table reached twice, a DAG
// whose walk would double per level, is refused) and at most
// kMaxNestingDepth deep, so that time is linear in the metadata; the
// record batches of an index are counted against a BatchBudget (a split's
// shards share one), so that its memory is bounded however small the
// batches are. Bodies are never read whole (two offsets per batch), so a
// sparse giant costs what its metadata costs.
//
// Thread safety: the functions are pure (pread on a descriptor); a
// BatchBudget may be shared by any number of threads.
#ifndef BATCHD_WORKLOADS_FINEWEBEDU_LM_ARROW_STREAM_H_
#define BATCHD_WORKLOADS_FINEWEBEDU_LM_ARROW_STREAM_H_

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace batchd {
namespace arrow {

// Metadata longer than this is refused unread. Hugging Face's shards carry
// a few KB (the schema with `datasets`' features JSON; a record batch's
// nodes and buffers, a few hundred bytes); 1 MiB is far above any real
// one, and is what one indexing thread may allocate per message.
inline constexpr uint64_t kMaxMetadataBytes = uint64_t(1) << 20;
// Nesting of the schema's types: Arrow's own readers refuse deeper.
inline constexpr int kMaxNestingDepth = 64;
// Record batches one split's index may hold (kept ~50 bytes each). The
// FineWeb-Edu train split saved with `datasets`' default of 1,000 rows per
// batch has ~4,400; 2^20 allows batches of ~4 rows of 2,049 tokens.
inline constexpr uint64_t kMaxBatches = uint64_t(1) << 20;

// How many more record batches an index may take.
class BatchBudget {
 public:
  explicit BatchBudget(uint64_t batches) : limit_(batches), left_(batches) {}
  BatchBudget(const BatchBudget&) = delete;
  BatchBudget& operator=(const BatchBudget&) = delete;
  // Takes one; false (taking nothing) when none is left.
  bool Take() {
    uint64_t left = left_.load(std::memory_order_relaxed);
    while (left > 0 && !left_.compare_exchange_weak(
                           left, left - 1, std::memory_order_relaxed)) {
    }
    return left > 0;
  }
  uint64_t limit() const { return limit_; }

 private:
  const uint64_t limit_;
  std::atomic<uint64_t> left_;
};

// One record batch's column: its values are `values` elements of
// `element_bytes` each from byte `values_offset` of the file, contiguous
// (the rows of the batch, in order, with nothing between them).
struct ColumnBatch {
  uint64_t rows = 0;
  uint64_t values_offset = 0;  // file byte offset of the batch's first value
  uint64_t values = 0;         // values of all its rows
};

struct ColumnIndex {
  int element_bytes = 4;  // 4 (int32) or 8 (int64)
  std::vector<ColumnBatch> batches;
};

// The record batches of the Arrow IPC stream open as `fd` (`size` bytes;
// `path` for messages) and where column `column` lies in each. Each batch
// is taken from `budget` (null: a budget of kMaxBatches of its own); one
// over it is ResourceExhausted, naming the file, the offset and the limit.
absl::StatusOr<ColumnIndex> IndexListColumn(int fd, uint64_t size,
                                            const std::string& path,
                                            const std::string& column,
                                            BatchBudget* budget = nullptr);

// pread of exactly out->size() bytes at `offset`; DataLoss naming `path`
// and the offset when the file ends first.
absl::Status ReadExact(int fd, const std::string& path, uint64_t offset,
                       std::string* out);

}  // namespace arrow
}  // namespace batchd

#endif  // BATCHD_WORKLOADS_FINEWEBEDU_LM_ARROW_STREAM_H_

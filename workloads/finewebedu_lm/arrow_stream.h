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
// Thread safety: the functions are pure (pread on a descriptor).
#ifndef BATCHD_WORKLOADS_FINEWEBEDU_LM_ARROW_STREAM_H_
#define BATCHD_WORKLOADS_FINEWEBEDU_LM_ARROW_STREAM_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace batchd {
namespace arrow {

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
// `path` for messages) and where column `column` lies in each.
absl::StatusOr<ColumnIndex> IndexListColumn(int fd, uint64_t size,
                                            const std::string& path,
                                            const std::string& column);

// pread of exactly out->size() bytes at `offset`; DataLoss naming `path`
// and the offset when the file ends first.
absl::Status ReadExact(int fd, const std::string& path, uint64_t offset,
                       std::string* out);

}  // namespace arrow
}  // namespace batchd

#endif  // BATCHD_WORKLOADS_FINEWEBEDU_LM_ARROW_STREAM_H_

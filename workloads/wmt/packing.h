// AlgoPerf's pack_dataset for translation pairs, as pure functions: which
// examples of a window share a row (from token lengths alone), and the
// contents of one row.
//
// The rule (algorithmic_efficiency/workloads/wmt/input_pipeline.py,
// pack_dataset and _pack_with_tf_ops, which come from mesh-tensorflow):
//   - The stream is cut into windows of `window` consecutive examples
//     (AlgoPerf: padded_batch(max_length), so window = max_length = 256).
//   - Each sequence is first cut to max_length, then to its count of
//     non-zero tokens: AlgoPerf treats id 0 as padding, so an example that
//     holds k zeros (SentencePiece's unk is 0) loses its last k tokens.
//   - Within a window, a row takes the examples in order while both its
//     inputs and its targets still fit in max_length; otherwise the row is
//     emitted and a new one begun with that example. The partial row is
//     emitted at the end of every window.
//   - positions restart at 0 for each example; segmentation is the running
//     count of position-0 entries, times (token != 0). Padding is 0 in all
//     six arrays.
//
// Example (pack_dataset's docstring, max_length 10):
//   {inputs: [8, 7, 1, 0], targets: [4, 1, 0]}
//   {inputs: [2, 3, 4, 1], targets: [5, 6, 1]}
// make one row:
//   inputs               [8, 7, 1, 2, 3, 4, 1, 0, 0, 0]
//   inputs_segmentation  [1, 1, 1, 2, 2, 2, 2, 0, 0, 0]
//   inputs_position      [0, 1, 2, 0, 1, 2, 3, 0, 0, 0]
//   targets              [4, 1, 5, 6, 1, 0, 0, 0, 0, 0]
//   targets_segmentation [1, 1, 2, 2, 2, 0, 0, 0, 0, 0]
//   targets_position     [0, 1, 0, 1, 2, 0, 0, 0, 0, 0]
//
// Thread safety: pure functions.
#ifndef BATCHD_WORKLOADS_WMT_PACKING_H_
#define BATCHD_WORKLOADS_WMT_PACKING_H_

#include <cstddef>
#include <cstdint>
#include <vector>

namespace batchd {
namespace wmt {

// One tokenized translation pair (EOS already appended).
struct TokenPair {
  std::vector<int32_t> inputs;
  std::vector<int32_t> targets;
};

// The lengths packing sees for one example (after the two cuts above).
struct PackedLengths {
  uint16_t inputs = 0;
  uint16_t targets = 0;
};

// The length a sequence occupies in a row: its non-zero count among its
// first max_length tokens.
uint16_t PackedLength(const std::vector<int32_t>& tokens, size_t max_length);
PackedLengths PackedLengthsOf(const TokenPair& pair, size_t max_length);

// Plans one window: the index (within the window) of the first example of
// each row, in order. An empty window has no rows; any other has at least
// one. Lengths must be at most max_length (PackedLength guarantees it).
std::vector<uint32_t> PlanWindow(const std::vector<PackedLengths>& lengths,
                                 size_t max_length);

// One packed row; every array is max_length long.
struct PackedRow {
  std::vector<int32_t> inputs, targets;
  std::vector<int32_t> inputs_position, inputs_segmentation;
  std::vector<int32_t> targets_position, targets_segmentation;
};

// Writes the row made of `examples` (the examples PlanWindow put in it, in
// order) into *row, resizing its arrays to max_length.
void FillPackedRow(const std::vector<const TokenPair*>& examples,
                   size_t max_length, PackedRow* row);

// As FillPackedRow, for examples whose sequences are already cut as
// PackedLength cuts them (each is copied whole): the rows of stored token
// ids (WMT's token cache) are FillPackedRow's rows.
void FillCutRow(const std::vector<const TokenPair*>& examples,
                size_t max_length, PackedRow* row);

// The whole rule over a stream: windows of `window` examples, each planned
// and filled. For tests and tools; the workload plans and fills row by row.
std::vector<PackedRow> PackStream(const std::vector<TokenPair>& examples,
                                  size_t max_length, size_t window);

}  // namespace wmt
}  // namespace batchd

#endif  // BATCHD_WORKLOADS_WMT_PACKING_H_

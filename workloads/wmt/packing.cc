// AlgoPerf's row packing; see packing.h.
#include "workloads/wmt/packing.h"

#include <algorithm>

namespace batchd {
namespace wmt {

uint16_t PackedLength(const std::vector<int32_t>& tokens, size_t max_length) {
  const size_t n = std::min(tokens.size(), max_length);
  size_t nonzero = 0;
  for (size_t i = 0; i < n; ++i) nonzero += tokens[i] != 0;
  return uint16_t(nonzero);
}

PackedLengths PackedLengthsOf(const TokenPair& pair, size_t max_length) {
  return {PackedLength(pair.inputs, max_length),
          PackedLength(pair.targets, max_length)};
}

std::vector<uint32_t> PlanWindow(const std::vector<PackedLengths>& lengths,
                                 size_t max_length) {
  std::vector<uint32_t> row_starts;
  if (lengths.empty()) return row_starts;
  row_starts.push_back(0);
  size_t used_inputs = 0, used_targets = 0;
  for (size_t j = 0; j < lengths.size(); ++j) {
    const PackedLengths& l = lengths[j];
    if (used_inputs + l.inputs > max_length ||
        used_targets + l.targets > max_length) {
      // AlgoPerf emits the partial row here even when it is empty (it cannot
      // be: every example fits an empty row after the cut to max_length).
      if (j != row_starts.back()) row_starts.push_back(uint32_t(j));
      used_inputs = used_targets = 0;
    }
    used_inputs += l.inputs;
    used_targets += l.targets;
  }
  return row_starts;
}

namespace {

// Appends one sequence (cut as PackedLength cuts it, unless `cut` says it
// is already) with its positions.
void AppendSequence(const std::vector<int32_t>& tokens, size_t max_length,
                    bool cut, std::vector<int32_t>* out,
                    std::vector<int32_t>* positions, size_t* used) {
  const size_t n = cut ? PackedLength(tokens, max_length) : tokens.size();
  for (size_t i = 0; i < n && *used < max_length; ++i, ++*used) {
    (*out)[*used] = tokens[i];
    (*positions)[*used] = int32_t(i);
  }
}

// segmentation = cumsum(position == 0) * (token != 0), over the whole row:
// padding (position 0, token 0) advances the count but is itself 0, which
// cannot show since padding only follows the examples.
void Segment(const std::vector<int32_t>& tokens,
             const std::vector<int32_t>& positions,
             std::vector<int32_t>* segmentation) {
  int32_t count = 0;
  for (size_t i = 0; i < tokens.size(); ++i) {
    count += positions[i] == 0;
    (*segmentation)[i] = tokens[i] != 0 ? count : 0;
  }
}

void FillRow(const std::vector<const TokenPair*>& examples, size_t max_length,
             bool cut, PackedRow* row) {
  for (std::vector<int32_t>* v :
       {&row->inputs, &row->targets, &row->inputs_position,
        &row->inputs_segmentation, &row->targets_position,
        &row->targets_segmentation}) {
    v->assign(max_length, 0);
  }
  size_t used_inputs = 0, used_targets = 0;
  for (const TokenPair* p : examples) {
    AppendSequence(p->inputs, max_length, cut, &row->inputs,
                   &row->inputs_position, &used_inputs);
    AppendSequence(p->targets, max_length, cut, &row->targets,
                   &row->targets_position, &used_targets);
  }
  Segment(row->inputs, row->inputs_position, &row->inputs_segmentation);
  Segment(row->targets, row->targets_position, &row->targets_segmentation);
}

}  // namespace

void FillPackedRow(const std::vector<const TokenPair*>& examples,
                   size_t max_length, PackedRow* row) {
  FillRow(examples, max_length, /*cut=*/true, row);
}

void FillCutRow(const std::vector<const TokenPair*>& examples,
                size_t max_length, PackedRow* row) {
  FillRow(examples, max_length, /*cut=*/false, row);
}

std::vector<PackedRow> PackStream(const std::vector<TokenPair>& examples,
                                  size_t max_length, size_t window) {
  std::vector<PackedRow> rows;
  for (size_t w0 = 0; w0 < examples.size(); w0 += window) {
    const size_t w1 = std::min(examples.size(), w0 + window);
    std::vector<PackedLengths> lengths;
    for (size_t i = w0; i < w1; ++i) {
      lengths.push_back(PackedLengthsOf(examples[i], max_length));
    }
    const std::vector<uint32_t> starts = PlanWindow(lengths, max_length);
    for (size_t r = 0; r < starts.size(); ++r) {
      const size_t end = r + 1 < starts.size() ? starts[r + 1] : w1 - w0;
      std::vector<const TokenPair*> members;
      for (size_t i = starts[r]; i < end; ++i) {
        members.push_back(&examples[w0 + i]);
      }
      rows.emplace_back();
      FillPackedRow(members, max_length, &rows.back());
    }
  }
  return rows;
}

}  // namespace wmt
}  // namespace batchd

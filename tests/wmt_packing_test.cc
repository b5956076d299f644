// AlgoPerf's pack_dataset rule (workloads/wmt/packing.h): its docstring
// example, properties over random streams, and rows equal to a plain
// implementation written here from the rule, step by step as AlgoPerf's
// TensorFlow code does it.
#include <algorithm>
#include <map>
#include <random>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "workloads/wmt/packing.h"

namespace batchd {
namespace wmt {
namespace {

using ::testing::ElementsAreArray;
using Seq = std::vector<int32_t>;

// --- The plain implementation -----------------------------------------------
// A transcription of _pack_with_tf_ops: per window, a dict of partial lists;
// an example is cut to its non-zero count, appended if both keys fit,
// otherwise the partial is padded and written first; the partial is written
// at the end of the window; segmentation is cumsum(position == 0) masked by
// token != 0, computed on the whole padded row.
struct PlainRow {
  std::map<std::string, Seq> k;
};

std::vector<PlainRow> PlainPack(const std::vector<TokenPair>& stream,
                                int length, int window) {
  const std::vector<std::string> keys = {"inputs", "targets"};
  std::vector<PlainRow> out;
  for (size_t w0 = 0; w0 < stream.size(); w0 += window) {
    std::map<std::string, Seq> partial;
    auto write = [&] {
      PlainRow row;
      for (const std::string& key : keys) {
        for (const char* suffix : {"", "_position"}) {
          Seq s = partial[key + suffix];
          s.resize(length, 0);
          row.k[key + suffix] = s;
        }
        Seq seg(length);
        int running = 0;
        for (int i = 0; i < length; ++i) {
          running += row.k[key + "_position"][i] == 0 ? 1 : 0;
          seg[i] = running * (row.k[key][i] != 0 ? 1 : 0);
        }
        row.k[key + "_segmentation"] = seg;
      }
      out.push_back(row);
      partial.clear();
    };
    for (size_t i = w0; i < std::min(stream.size(), w0 + window); ++i) {
      std::map<std::string, Seq> one;
      one["inputs"] = stream[i].inputs;
      one["targets"] = stream[i].targets;
      bool can_append = true;
      for (const std::string& key : keys) {
        Seq v = one[key];
        if (int(v.size()) > length) v.resize(length);  // trim to length
        const int nonzero = int(std::count_if(
            v.begin(), v.end(), [](int32_t t) { return t != 0; }));
        v.resize(nonzero);
        one[key] = v;
        can_append =
            can_append && int(partial[key].size() + v.size()) <= length;
      }
      if (!can_append) write();
      for (const std::string& key : keys) {
        for (size_t p = 0; p < one[key].size(); ++p) {
          partial[key].push_back(one[key][p]);
          partial[key + "_position"].push_back(int32_t(p));
        }
      }
    }
    write();
  }
  return out;
}

void ExpectSameRows(const std::vector<PackedRow>& rows,
                    const std::vector<PlainRow>& plain) {
  ASSERT_EQ(rows.size(), plain.size());
  for (size_t r = 0; r < rows.size(); ++r) {
    SCOPED_TRACE(r);
    const auto& p = plain[r].k;
    EXPECT_EQ(rows[r].inputs, p.at("inputs"));
    EXPECT_EQ(rows[r].targets, p.at("targets"));
    EXPECT_EQ(rows[r].inputs_position, p.at("inputs_position"));
    EXPECT_EQ(rows[r].targets_position, p.at("targets_position"));
    EXPECT_EQ(rows[r].inputs_segmentation, p.at("inputs_segmentation"));
    EXPECT_EQ(rows[r].targets_segmentation, p.at("targets_segmentation"));
  }
}

// WMT-like lengths: mostly short, a tail to the limit; EOS (2) last; a few
// unk (0) tokens inside, as SentencePiece gives for unseen characters.
std::vector<TokenPair> RandomStream(std::mt19937_64& rng, size_t n, int max_len,
                                    double unk_rate) {
  std::lognormal_distribution<double> len(std::log(28.0), 0.7);
  std::uniform_real_distribution<double> u(0, 1);
  std::vector<TokenPair> s(n);
  for (TokenPair& p : s) {
    for (Seq* side : {&p.inputs, &p.targets}) {
      const int l = std::clamp(int(len(rng)), 1, max_len);
      for (int i = 0; i + 1 < l; ++i) {
        side->push_back(u(rng) < unk_rate ? 0 : 3 + int32_t(rng() % 997));
      }
      side->push_back(2);
    }
  }
  return s;
}

// --- Tests
// ---------------------------------------------------------------------

TEST(WmtPacking, DocstringExampleMakesOneRow) {
  const std::vector<TokenPair> stream = {{{8, 7, 1, 0}, {4, 1, 0}},
                                         {{2, 3, 4, 1}, {5, 6, 1}}};
  const std::vector<PackedRow> rows = PackStream(stream, 10, 10);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_THAT(rows[0].inputs, ElementsAreArray({8, 7, 1, 2, 3, 4, 1, 0, 0, 0}));
  EXPECT_THAT(rows[0].inputs_segmentation,
              ElementsAreArray({1, 1, 1, 2, 2, 2, 2, 0, 0, 0}));
  EXPECT_THAT(rows[0].inputs_position,
              ElementsAreArray({0, 1, 2, 0, 1, 2, 3, 0, 0, 0}));
  EXPECT_THAT(rows[0].targets,
              ElementsAreArray({4, 1, 5, 6, 1, 0, 0, 0, 0, 0}));
  EXPECT_THAT(rows[0].targets_segmentation,
              ElementsAreArray({1, 1, 2, 2, 2, 0, 0, 0, 0, 0}));
  EXPECT_THAT(rows[0].targets_position,
              ElementsAreArray({0, 1, 0, 1, 2, 0, 0, 0, 0, 0}));
  ExpectSameRows(rows, PlainPack(stream, 10, 10));
}

TEST(WmtPacking, RowClosesWhenEitherSideOverflows) {
  // Inputs fit (3 + 3 <= 6), targets do not (4 + 3 > 6): two rows.
  const std::vector<TokenPair> stream = {{{5, 5, 2}, {6, 6, 6, 2}},
                                         {{7, 7, 2}, {8, 8, 2}}};
  const std::vector<PackedRow> rows = PackStream(stream, 6, 256);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_THAT(rows[0].inputs, ElementsAreArray({5, 5, 2, 0, 0, 0}));
  EXPECT_THAT(rows[1].targets, ElementsAreArray({8, 8, 2, 0, 0, 0}));
  EXPECT_THAT(rows[1].targets_segmentation,
              ElementsAreArray({1, 1, 1, 0, 0, 0}));
  // Exactly full is still a fit.
  const std::vector<PackedRow> full =
      PackStream({{{5, 5, 2}, {6, 2}}, {{7, 7, 2}, {8, 8, 8, 2}}}, 6, 256);
  ASSERT_EQ(full.size(), 1u);
  EXPECT_THAT(full[0].inputs, ElementsAreArray({5, 5, 2, 7, 7, 2}));
}

TEST(WmtPacking, WindowsFlushTheirPartialRow) {
  // Four tiny examples, window 2: two rows although all fit in one.
  std::vector<TokenPair> stream(4, TokenPair{{9, 2}, {9, 2}});
  EXPECT_EQ(PackStream(stream, 256, 2).size(), 2u);
  EXPECT_EQ(PackStream(stream, 256, 4).size(), 1u);
  EXPECT_EQ(PackStream(stream, 256, 3).size(), 2u);  // 3 + a partial window
}

TEST(WmtPacking, ZeroTokensFollowAlgoPerfsQuirks) {
  // [5, 0, 7, 2] has 3 non-zero tokens: it is cut to [5, 0, 7] (the EOS is
  // lost), the 0 keeps its position and gets segment 0.
  const std::vector<TokenPair> stream = {{{5, 0, 7, 2}, {4, 2}},
                                         {{6, 2}, {0, 3, 2}}};
  const std::vector<PackedRow> rows = PackStream(stream, 8, 8);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_THAT(rows[0].inputs, ElementsAreArray({5, 0, 7, 6, 2, 0, 0, 0}));
  EXPECT_THAT(rows[0].inputs_position,
              ElementsAreArray({0, 1, 2, 0, 1, 0, 0, 0}));
  EXPECT_THAT(rows[0].inputs_segmentation,
              ElementsAreArray({1, 0, 1, 2, 2, 0, 0, 0}));
  EXPECT_THAT(rows[0].targets, ElementsAreArray({4, 2, 0, 3, 0, 0, 0, 0}));
  EXPECT_THAT(rows[0].targets_segmentation,
              ElementsAreArray({1, 1, 0, 2, 0, 0, 0, 0}));
  ExpectSameRows(rows, PlainPack(stream, 8, 8));
  EXPECT_EQ(PackedLength({5, 0, 7, 2}, 256), 3);
  EXPECT_EQ(PackedLength({5, 0, 7, 2}, 2), 1);  // cut to max_length first
}

TEST(WmtPacking, PlanWindowMatchesFilledRows) {
  EXPECT_TRUE(PlanWindow({}, 256).empty());
  EXPECT_THAT(PlanWindow({{200, 10}, {56, 10}, {1, 1}, {256, 256}}, 256),
              ElementsAreArray({0u, 2u, 3u}));
}

TEST(WmtPacking, EqualsThePlainImplementationOnRandomStreams) {
  std::mt19937_64 rng(2024);
  for (int trial = 0; trial < 12; ++trial) {
    SCOPED_TRACE(trial);
    const int length = trial % 3 == 0 ? 64 : 256;
    const size_t n = 1 + rng() % 900;
    const std::vector<TokenPair> stream =
        RandomStream(rng, n, length, trial % 2 ? 0.03 : 0.0);
    ExpectSameRows(PackStream(stream, length, length),
                   PlainPack(stream, length, length));
  }
}

TEST(WmtPacking, EveryTokenOnceInOrderAndRowsConsistent) {
  std::mt19937_64 rng(7);
  const std::vector<TokenPair> stream = RandomStream(rng, 3000, 256, 0.0);
  const std::vector<PackedRow> rows = PackStream(stream, 256, 256);
  // Rebuild the examples from the rows by segment: they must come back
  // whole, in order, each exactly once.
  std::vector<Seq> inputs, targets;
  for (const PackedRow& row : rows) {
    for (auto [tok, pos, seg, out] :
         {std::make_tuple(&row.inputs, &row.inputs_position,
                          &row.inputs_segmentation, &inputs),
          std::make_tuple(&row.targets, &row.targets_position,
                          &row.targets_segmentation, &targets)}) {
      ASSERT_EQ(tok->size(), 256u);
      int32_t last_seg = 0;
      bool padding = false;
      for (size_t i = 0; i < 256; ++i) {
        if ((*tok)[i] == 0) {
          padding = true;  // no zeros inside examples here
          EXPECT_EQ((*pos)[i], 0);
          EXPECT_EQ((*seg)[i], 0);
          continue;
        }
        ASSERT_FALSE(padding) << "a token after padding";
        if ((*seg)[i] != last_seg) {
          ASSERT_EQ((*seg)[i], last_seg + 1);  // segments count from 1
          ASSERT_EQ((*pos)[i], 0);
          out->emplace_back();
          last_seg = (*seg)[i];
        } else {
          ASSERT_EQ((*pos)[i], (*pos)[i - 1] + 1);
        }
        out->back().push_back((*tok)[i]);
      }
    }
  }
  ASSERT_EQ(inputs.size(), stream.size());
  ASSERT_EQ(targets.size(), stream.size());
  for (size_t i = 0; i < stream.size(); ++i) {
    EXPECT_EQ(inputs[i], stream[i].inputs);
    EXPECT_EQ(targets[i], stream[i].targets);
  }
  // Windows of 256 examples: a row never mixes two windows.
  size_t examples_seen = 0;
  for (const PackedRow& row : rows) {
    const int32_t segs = *std::max_element(row.inputs_segmentation.begin(),
                                           row.inputs_segmentation.end());
    EXPECT_EQ(examples_seen / 256, (examples_seen + segs - 1) / 256);
    examples_seen += segs;
  }
}

}  // namespace
}  // namespace wmt
}  // namespace batchd

// The wmt eval splits: padded pairs with weights, their drops counted, bad
// records and bytes (workloads/wmt/wmt_eval.h).
#include "tests/wmt_fixture.h"

namespace batchd {
namespace {

// The fixture, with HasSubstr, PackedRow and TokenPair.
using namespace wmt_test;  // NOLINT: the suites' shared fixture

class WmtEvalTest : public WmtFixture {
 protected:
  // Fills eval item `id` of `w` into `row`, counting into `counters`.
  static absl::Status Fill(const Workload& w, uint64_t id, EvalRow* row,
                           WorkloadCounters* counters) {
    ItemRef item;
    item.id = id;
    return w.FillItem(item, row->out(), counters);
  }
};

TEST_F(WmtEvalTest, EvalRowsArePaddedPairsWithWeights) {
  const std::string d = NewDataDir();
  WriteTfds(d, "validation", *eval_pairs_, 1);
  auto w = Create(d, "validation");
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_FALSE(PacksRows(**w));
  EXPECT_FALSE((*w)->shuffle());
  ASSERT_EQ((*w)->tensors().size(), 3u);
  EXPECT_EQ((*w)->tensors()[2].name, "weights");
  EXPECT_EQ((*w)->tensors()[2].dtype, DType::kFloat32);
  auto tok = LoadTokenizer();
  std::vector<TokenPair> kept;
  for (const Pair& p : *eval_pairs_) {
    TokenPair t;
    if (*tok->TokenizePair(p.de, p.en, 256, false, &t) ==
        wmt::PairFate::kKept) {
      kept.push_back(t);
    }
  }
  ASSERT_LT(kept.size(), eval_pairs_->size());  // long pairs are dropped
  ASSERT_EQ((*w)->num_examples(), kept.size());
  WorkloadCounters counters;
  EvalRow row;
  for (uint64_t i = 0; i < kept.size(); ++i) {
    ItemRef ex;
    ex.id = ex.position = i;
    ASSERT_TRUE((*w)->FillItem(ex, row.out(), &counters).ok());
    std::vector<int32_t> want_in = kept[i].inputs, want_tg = kept[i].targets;
    want_in.resize(256, 0);
    want_tg.resize(256, 0);
    EXPECT_EQ(row.inputs, want_in);
    EXPECT_EQ(row.targets, want_tg);
    for (size_t k = 0; k < 256; ++k) {
      EXPECT_EQ(row.weights[k], row.targets[k] > 0 ? 1.0f : 0.0f);
    }
  }
  EXPECT_EQ(counters.skipped_examples.load(),
            eval_pairs_->size() - kept.size());
  ItemRef pad;
  pad.valid = false;
  ASSERT_TRUE((*w)->FillItem(pad, row.out(), &counters).ok());
  EXPECT_EQ(row.inputs, std::vector<int32_t>(256, 0));
  EXPECT_EQ(row.targets, std::vector<int32_t>(256, 0));
  EXPECT_EQ(row.weights, std::vector<float>(256, 0.0f));
  // The train path is not the eval path: an eval workload packs no rows
  // (it is no RowPacking at all, so no train call can reach it).
  EXPECT_EQ(dynamic_cast<const RowPacking*>(w->get()), nullptr);
}

TEST_F(WmtEvalTest, ExampleWithoutDeIsADecodeError) {
  const std::string d = NewDataDir();
  std::vector<std::string> records;
  for (int i = 0; i < 5; ++i) {
    ExampleFeatures f;
    if (i != 2) f.bytes["de"] = {"der Rat"};
    f.bytes["en"] = {"the council"};
    if (i == 3) f.bytes["de"] = {"a", "b"};  // two values: also unusable
    records.push_back(SerializeExample(f));
  }
  records.push_back("\x0a\xff garbage");  // not an Example at all
  ASSERT_TRUE(
      WriteTFRecordFile(TfdsDir(d, "wmt14_translate") +
                            "/wmt14_translate-test.tfrecord-00000-of-00001",
                        records)
          .ok());
  auto w = Create(d, "test");
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ((*w)->num_examples(), 3u);
  WorkloadCounters counters;
  EvalRow row;
  for (uint64_t i = 0; i < 3; ++i) {
    ASSERT_TRUE(Fill(**w, i, &row, &counters).ok());
  }
  EXPECT_EQ(counters.decode_errors.load(), 3u);
}

TEST_F(WmtEvalTest, InvalidUtf8IsADecodeErrorWhenAskedAndEmptyLinesKept) {
  const std::string d = NewDataDir();
  WriteFile(d + "/validation.de",
            "der Rat\n\xc3\x28 kaputt\n\nHäuser\r\nüber\xed\xa0\x80\n");
  WriteFile(d + "/validation.en", "the council\nbroken\nempty\n\nover\n");
  auto w = Create(d, "validation", {{"invalid_utf8", "drop"}});
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ((*w)->num_examples(), 3u);  // lines 0, 2 and 3
  WorkloadCounters counters;
  EvalRow row;
  // Line 2: an empty German side is EOS alone, as in AlgoPerf.
  ASSERT_TRUE(Fill(**w, 1, &row, &counters).ok());
  EXPECT_EQ(row.inputs[0], 2);
  EXPECT_EQ(row.inputs[1], 0);
  // Line 3: "Häuser\r" reads as "Häuser"; the English is empty.
  ASSERT_TRUE(Fill(**w, 2, &row, &counters).ok());
  EXPECT_EQ(row.targets[0], 2);
  ASSERT_TRUE(Fill(**w, 0, &row, &counters).ok());
  EXPECT_EQ(counters.decode_errors.load(), 2u);  // lines 1 and 4

  auto skip =
      Create(d, "validation", {{"skip_empty", "1"}, {"invalid_utf8", "drop"}});
  ASSERT_TRUE(skip.ok());
  EXPECT_EQ((*skip)->num_examples(), 1u);
  WorkloadCounters c2;
  ASSERT_TRUE(Fill(**skip, 0, &row, &c2).ok());
  EXPECT_EQ(c2.skipped_examples.load(), 2u);
  EXPECT_EQ(c2.decode_errors.load(), 2u);
}

TEST_F(WmtEvalTest, InvalidUtf8IsEncodedAsSentencePieceDoesByDefault) {
  const std::string d = NewDataDir();
  const std::string bad[] = {"\xc3\x28 kaputt", "\xff\xfe\xfd", "Rat \x80"};
  WriteFile(d + "/validation.de",
            bad[0] + "\n" + bad[1] + "\n" + bad[2] + "\n");
  WriteFile(d + "/validation.en", "broken\nbytes\ncouncil\n");
  auto w = Create(d, "validation");
  ASSERT_TRUE(w.ok()) << w.status();
  ASSERT_EQ((*w)->num_examples(), 3u);
  std::string error;
  auto model = wmt::SentencePieceModel::Load(*root_ + "/spm.model", &error);
  ASSERT_NE(model, nullptr) << error;
  WorkloadCounters counters;
  EvalRow row;
  for (uint64_t i = 0; i < 3; ++i) {
    ASSERT_TRUE(Fill(**w, i, &row, &counters).ok());
    std::vector<int> want;
    ASSERT_TRUE(model->Encode(bad[i], &want, &error)) << error;
    want.push_back(2);
    EXPECT_THAT(want, ::testing::Contains(model->unk_id()));
    EXPECT_EQ(
        std::vector<int>(row.inputs.begin(), row.inputs.begin() + want.size()),
        want);
    EXPECT_EQ(row.inputs[want.size()], 0);
  }
  EXPECT_EQ(counters.decode_errors.load(), 0u);
  EXPECT_FALSE(Create(d, "validation", {{"invalid_utf8", "keep"}}).ok());
}

}  // namespace
}  // namespace batchd

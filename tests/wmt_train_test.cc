// The wmt train split: packed rows equal the packing rule applied to the
// tokenizer's output, whatever the source, thread or order of calls;
// cursors; int64 tensors (workloads/wmt/wmt_train.h).
#include "tests/wmt_fixture.h"

namespace batchd {
namespace {

// The fixture, with HasSubstr, PackedRow and TokenPair.
using namespace wmt_test;  // NOLINT: the suites' shared fixture

class WmtTrainTest : public WmtFixture {};

TEST_F(WmtTrainTest, TrainRowsArePackStreamOfTheTokenizedEpoch) {
  const std::string d = NewDataDir();
  WriteText(d, "train", *pairs_);
  auto w = Create(d, "train");
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_TRUE(PacksRows(**w));
  EXPECT_TRUE((*w)->shuffle());
  EXPECT_EQ((*w)->num_examples(), kTrainPairs);
  ASSERT_EQ((*w)->tensors().size(), 6u);
  EXPECT_EQ((*w)->tensors()[3].name, "inputs_segmentation");
  EXPECT_EQ((*w)->tensors()[0].ExampleBytes(), 256u * 4);

  for (uint64_t epoch : {0, 1}) {
    const std::vector<uint64_t> ids = Shuffled(kTrainPairs, 100 + epoch);
    size_t dropped;
    const std::vector<PackedRow> expected =
        ExpectedRows(*pairs_, ids, &dropped);
    ASSERT_GT(dropped, 3u);  // the long pairs
    ASSERT_GT(expected.size(), 4u);
    WorkloadCounters counters;
    ExpectRowsEqual(AllRows(**w, Order(ids, epoch), &counters, nullptr),
                    expected);
    EXPECT_EQ(counters.skipped_examples.load(), dropped);
    EXPECT_EQ(counters.decode_errors.load(), 0u);
  }
  // Some rows hold unk (0) tokens inside examples: AlgoPerf's quirk path.
  const std::vector<uint64_t> ids = Shuffled(kTrainPairs, 100);
  size_t dropped;
  bool zero_inside = false;
  for (const PackedRow& row : ExpectedRows(*pairs_, ids, &dropped)) {
    for (size_t i = 0; i < 256; ++i) {
      zero_inside |= row.inputs[i] == 0 && row.inputs_segmentation[i] == 0 &&
                     i + 1 < 256 && row.inputs[i + 1] != 0;
    }
  }
  EXPECT_TRUE(zero_inside);
}

TEST_F(WmtTrainTest, TfdsShardsGiveTheRowsOfTheSamePairs) {
  const std::string d = NewDataDir();
  WriteTfds(d, "train", *pairs_, 3);
  auto w = Create(d, "train");
  ASSERT_TRUE(w.ok()) << w.status();
  const std::vector<Pair> stored = TfdsOrder(*pairs_, 3);
  const std::vector<uint64_t> ids = Shuffled(kTrainPairs, 9);
  size_t dropped;
  ExpectRowsEqual(AllRows(**w, Order(ids, 0), nullptr, nullptr),
                  ExpectedRows(stored, ids, &dropped));
  // source=text on a TFDS-only directory names what it looked for.
  auto text = Create(d, "train", {{"source", "text"}});
  EXPECT_EQ(text.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(text.status().message(), HasSubstr("train.de"));
}

TEST_F(WmtTrainTest, CursorsNameWindowAndRowAndInvert) {
  const std::string d = NewDataDir();
  WriteText(d, "train", *pairs_);
  auto w = Create(d, "train");
  ASSERT_TRUE(w.ok());
  const EpochOrder order = Order(Shuffled(kTrainPairs, 3), 4);
  std::vector<RowCursor> cursors;
  const std::vector<PackedRow> rows = AllRows(**w, order, nullptr, &cursors);
  ASSERT_FALSE(rows.empty());
  uint64_t window = 0, row_in_window = 0;
  for (size_t r = 0; r < cursors.size(); ++r) {
    SCOPED_TRACE(r);
    EXPECT_EQ(cursors[r].epoch, 4u);
    if (cursors[r].window != window) {
      EXPECT_EQ(cursors[r].window, window + 1);
      window = cursors[r].window;
      row_in_window = 0;
    }
    EXPECT_EQ(cursors[r].row, row_in_window++);
    auto back = Rows(**w).RowAtCursor(order, cursors[r], nullptr);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(*back, r);
  }
  // (kTrainPairs - dropped) kept pairs make ceil(kept / 256) windows.
  EXPECT_EQ(window + 1, 3u);
  EXPECT_FALSE(Rows(**w).RowAtCursor(order, {4, 99, 0}, nullptr).ok());
  EXPECT_FALSE(Rows(**w).RowAtCursor(order, {3, 0, 0}, nullptr).ok());
  EXPECT_EQ(Rows(**w).RowsInEpoch(order).value(), rows.size());
  uint8_t* none[6] = {};
  EXPECT_EQ(Rows(**w).FillRow(order, rows.size(), none, nullptr).code(),
            absl::StatusCode::kOutOfRange);
  EXPECT_EQ(Rows(**w).CursorOfRow(order, rows.size()).status().code(),
            absl::StatusCode::kOutOfRange);
}

TEST_F(WmtTrainTest, RowsDoNotDependOnThreadsOrCallOrder) {
  const std::string d = NewDataDir();
  WriteText(d, "train", *pairs_);
  auto w = Create(d, "train");
  ASSERT_TRUE(w.ok());
  // Several epochs at once exercise the per-epoch table cache and its LRU.
  std::vector<EpochOrder> orders;
  std::vector<std::vector<PackedRow>> sequential;
  for (uint64_t e = 0; e < 6; ++e) {
    orders.push_back(Order(Shuffled(kTrainPairs, 50 + e), e));
    sequential.push_back(AllRows(**w, orders.back(), nullptr, nullptr));
  }
  auto fresh = Create(d, "train");  // lengths built from the threads below
  ASSERT_TRUE(fresh.ok());
  std::vector<std::vector<PackedRow>> parallel(orders.size());
  for (size_t e = 0; e < orders.size(); ++e) {
    parallel[e].resize(sequential[e].size());
  }
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (size_t e = 0; e < orders.size(); ++e) {
        const size_t n = parallel[e].size();
        for (size_t i = t; i < n; i += 4) {
          const size_t r = n - 1 - i;  // backwards, interleaved
          parallel[e][r] = FillOne(Rows(**fresh), orders[e], r);
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (size_t e = 0; e < orders.size(); ++e) {
    ExpectRowsEqual(parallel[e], sequential[e]);
  }
}

TEST_F(WmtTrainTest, Int64RowsHoldTheSameValues) {
  const std::string d = NewDataDir();
  WriteText(d, "train", *pairs_);
  auto w32 = Create(d, "train");
  auto w64 = Create(d, "train", {{"dtype", "int64"}});
  ASSERT_TRUE(w32.ok() && w64.ok());
  EXPECT_EQ((*w64)->tensors()[0].dtype, DType::kInt64);
  const EpochOrder order = Order(Shuffled(kTrainPairs, 1), 0);
  const std::vector<PackedRow> rows = AllRows(**w32, order, nullptr, nullptr);
  RowBuffers<int64_t> out64;
  ASSERT_TRUE(Rows(**w64).FillRow(order, 1, out64.out(), nullptr).ok());
  EXPECT_EQ(std::vector<int32_t>(out64.v[0].begin(), out64.v[0].end()),
            rows[1].inputs);
  EXPECT_EQ(std::vector<int32_t>(out64.v[5].begin(), out64.v[5].end()),
            rows[1].targets_segmentation);
}

}  // namespace
}  // namespace batchd

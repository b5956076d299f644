// The wmt train split's persistent cache: lengths, token ids, epoch row
// counts and line offsets, kept, invalidated, rebuilt and shared
// (workloads/wmt/length_index.h, length_cache.h, epoch_tables.h).
#include "tests/wmt_fixture.h"

namespace batchd {
namespace {

// The fixture, with HasSubstr, PackedRow and TokenPair.
using namespace wmt_test;  // NOLINT: the suites' shared fixture

class WmtCacheTest : public WmtFixture {
 protected:
  void SetUp() override {
    cache_path_ = *root_ + "/cache" + std::to_string(dirs_++);
  }
  // A workload as a freshly started daemon makes it: its own CacheDir.
  absl::StatusOr<std::unique_ptr<Workload>> CreateCached(
      const std::string& data, const std::string& threads = "2",
      std::map<std::string, std::string> options = {}) {
    auto cache = CacheDir::Open(cache_path_);
    EXPECT_TRUE(cache.ok()) << cache.status();
    WorkloadConfig c;
    c.data_path = data;
    c.split = "train";
    c.options = std::move(options);
    c.options["index_threads"] = threads;
    c.cache = cache.ok() ? *cache : nullptr;
    return CreateWorkload(kWmtWorkload, c);
  }
  // Pairs the length pass of `w` tokenizes for its first epoch, and its rows.
  static uint64_t Tokenized(const Workload& w, const EpochOrder& order,
                            std::vector<PackedRow>* rows) {
    const uint64_t before = wmt::LengthPassTokenizations();
    EXPECT_TRUE(Rows(w).RowsInEpoch(order).ok());
    const uint64_t tokenized = wmt::LengthPassTokenizations() - before;
    if (rows != nullptr) *rows = AllRows(w, order, nullptr, nullptr);
    return tokenized;
  }
  // A cached workload of `data` whose length pass tokenizes every pair of
  // `order`'s epoch (nothing is stored for it yet) and stores what it
  // learnt; its rows in *rows, if given.
  void FillCache(const std::string& data, const EpochOrder& order,
                 std::vector<PackedRow>* rows = nullptr) {
    auto first = CreateCached(data);
    ASSERT_TRUE(first.ok()) << first.status();
    EXPECT_EQ(Tokenized(**first, order, rows), kTrainPairs);
  }
  // After a change to what the lengths depend on: a cached workload of
  // `data` tokenizes every pair again, and its rows are an uncached one's.
  void ExpectTokenizedAgain(const std::string& data, const EpochOrder& order) {
    auto plain = Create(data, "train");
    ASSERT_TRUE(plain.ok());
    std::vector<PackedRow> expected, got;
    Tokenized(**plain, order, &expected);
    auto second = CreateCached(data);
    ASSERT_TRUE(second.ok());
    EXPECT_EQ(Tokenized(**second, order, &got), kTrainPairs);
    ExpectRowsEqual(got, expected);
  }
  std::string EntryOf(const std::string& kind,
                      const std::string& suffix = ".entry") {
    for (const auto& e : fs::directory_iterator(cache_path_)) {
      const std::string name = e.path().filename().string();
      if (name.rfind(kind + "-", 0) == 0 && name.size() > suffix.size() &&
          name.substr(name.size() - suffix.size()) == suffix) {
        return e.path().string();
      }
    }
    return "";
  }
  std::string cache_path_;
};

TEST_F(WmtCacheTest, RestartLoadsLengthsWithoutTokenizingAndRowsAreTheSame) {
  const std::string d = NewDataDir();
  WriteText(d, "train", *pairs_);
  const EpochOrder order = Order(Shuffled(kTrainPairs, 21), 0);
  auto plain = Create(d, "train");  // no cache
  ASSERT_TRUE(plain.ok());
  std::vector<PackedRow> expected;
  Tokenized(**plain, order, &expected);
  for (const char* threads : {"1", "2"}) {
    SCOPED_TRACE(threads);
    cache_path_ += "x";  // a cold cache for each thread count
    std::vector<PackedRow> cold, warm;
    auto first = CreateCached(d, threads);
    ASSERT_TRUE(first.ok()) << first.status();
    EXPECT_EQ(Tokenized(**first, order, &cold), kTrainPairs);
    EXPECT_NE(EntryOf("wmt-lengths"), "");
    EXPECT_NE(EntryOf("wmt-lines"), "");
    first->reset();
    auto restarted = CreateCached(d, threads);
    ASSERT_TRUE(restarted.ok()) << restarted.status();
    EXPECT_EQ(Tokenized(**restarted, order, &warm), 0u);
    ExpectRowsEqual(cold, expected);
    ExpectRowsEqual(warm, expected);
    // Other epochs too: the table is the pairs', not the epoch's.
    const EpochOrder other = Order(Shuffled(kTrainPairs, 22), 1);
    std::vector<PackedRow> a, b;
    Tokenized(**plain, other, &a);
    EXPECT_EQ(Tokenized(**restarted, other, &b), 0u);
    ExpectRowsEqual(b, a);
  }
}

TEST_F(WmtCacheTest, RestartReadsEpochRowCountsWithoutPackingTheEpochs) {
  const std::string d = NewDataDir();
  WriteText(d, "train", *pairs_);
  auto plain = Create(d, "train");  // no cache
  ASSERT_TRUE(plain.ok());
  const RowPacking& uncached = dynamic_cast<const RowPacking&>(**plain);
  std::vector<EpochOrder> orders;
  std::vector<uint64_t> expected;
  for (uint64_t e = 0; e < 3; ++e) {
    orders.push_back(Order(Shuffled(kTrainPairs, 30 + e), e));
    absl::StatusOr<uint64_t> rows = uncached.RowsInEpoch(orders.back());
    ASSERT_TRUE(rows.ok()) << rows.status();
    expected.push_back(*rows);
  }
  auto first = CreateCached(d);
  ASSERT_TRUE(first.ok()) << first.status();
  uint64_t before = wmt::EpochsCounted();
  for (uint64_t e = 0; e < 3; ++e) {
    EXPECT_EQ(*dynamic_cast<const RowPacking&>(**first).RowsInEpoch(orders[e]),
              expected[e]);
  }
  EXPECT_EQ(wmt::EpochsCounted() - before, 3u);
  EXPECT_NE(EntryOf("wmt-epoch-rows"), "");
  first->reset();
  // A restarted daemon resuming far ahead: every earlier epoch's count is
  // read, none is packed again, and the rows are those of the uncached run.
  auto restarted = CreateCached(d);
  ASSERT_TRUE(restarted.ok()) << restarted.status();
  const RowPacking& warm = dynamic_cast<const RowPacking&>(**restarted);
  before = wmt::EpochsCounted();
  for (uint64_t e = 0; e < 3; ++e) {
    EXPECT_EQ(*warm.RowsInEpoch(orders[e]), expected[e]);
  }
  EXPECT_EQ(wmt::EpochsCounted() - before, 0u);
  ExpectRowsEqual(AllRows(**restarted, orders[2], nullptr, nullptr),
                  AllRows(**plain, orders[2], nullptr, nullptr));
}

TEST_F(WmtCacheTest, ChangedTextFileInvalidatesTheLengths) {
  const std::string d = NewDataDir();
  WriteText(d, "train", *pairs_);
  const EpochOrder order = Order(Shuffled(kTrainPairs, 23), 0);
  ASSERT_NO_FATAL_FAILURE(FillCache(d, order));
  // Same line count, one line longer: other rows.
  std::vector<Pair> changed = *pairs_;
  changed[3].en += " the council of europe must answer the question today.";
  WriteText(d, "train", changed);
  ASSERT_NO_FATAL_FAILURE(ExpectTokenizedAgain(d, order));
}

TEST_F(WmtCacheTest, ChangedModelInvalidatesTheLengths) {
  const std::string d = NewDataDir();
  WriteText(d, "train", *pairs_);
  const EpochOrder order = Order(Shuffled(kTrainPairs, 24), 0);
  ASSERT_NO_FATAL_FAILURE(FillCache(d, order));
  // Another model (a smaller vocabulary) at the same path.
  std::string error;
  ASSERT_TRUE(wmt::TrainSentencePiece(
      "--input=" + *root_ + "/corpus.txt --model_prefix=" + d +
          "/small --vocab_size=200 --model_type=unigram "
          "--character_coverage=1.0 --hard_vocab_limit=false "
          "--num_threads=1 --minloglevel=2",
      &error))
      << error;
  fs::copy_file(d + "/small.model", d + "/wmt_sentencepiece_model",
                fs::copy_options::overwrite_existing);
  ASSERT_NO_FATAL_FAILURE(ExpectTokenizedAgain(d, order));
  // An option that changes the lengths is another entry too.
  auto other_length = CreateCached(d, "2", {{"max_length", "128"}});
  ASSERT_TRUE(other_length.ok());
  EXPECT_EQ(Tokenized(**other_length, order, nullptr), kTrainPairs);
}

TEST_F(WmtCacheTest, CorruptEntriesAreRebuiltWithAWarning) {
  const std::string d = NewDataDir();
  WriteText(d, "train", *pairs_);
  const EpochOrder order = Order(Shuffled(kTrainPairs, 25), 0);
  std::vector<PackedRow> expected, got;
  ASSERT_NO_FATAL_FAILURE(FillCache(d, order, &expected));
  for (const char* kind : {"wmt-lengths", "wmt-lines"}) {
    SCOPED_TRACE(kind);
    const std::string entry = EntryOf(kind);
    ASSERT_NE(entry, "");
    std::string bytes = ReadFile(entry);
    bytes[bytes.size() / 2] ^= 0x01;
    WriteFile(entry, bytes);
    testing::internal::CaptureStderr();
    auto again = CreateCached(d);
    ASSERT_TRUE(again.ok()) << again.status();
    const uint64_t tokenized = Tokenized(**again, order, &got);
    const std::string log = testing::internal::GetCapturedStderr();
    EXPECT_THAT(log,
                HasSubstr("event=cache_corrupt kind=" + std::string(kind)));
    EXPECT_EQ(tokenized, std::string(kind) == "wmt-lengths" ? kTrainPairs : 0);
    ExpectRowsEqual(got, expected);
    EXPECT_NE(EntryOf(kind), "");  // rebuilt and stored again
  }
}

TEST_F(WmtCacheTest, TwoStreamsShareOneBuild) {
  const std::string d = NewDataDir();
  WriteText(d, "train", *pairs_);
  const EpochOrder order = Order(Shuffled(kTrainPairs, 26), 0);
  auto a = CreateCached(d);
  auto b = CreateCached(d);
  ASSERT_TRUE(a.ok() && b.ok());
  const uint64_t before = wmt::LengthPassTokenizations();
  std::thread ta([&] { EXPECT_TRUE(Rows(**a).RowsInEpoch(order).ok()); });
  std::thread tb([&] { EXPECT_TRUE(Rows(**b).RowsInEpoch(order).ok()); });
  ta.join();
  tb.join();
  EXPECT_EQ(wmt::LengthPassTokenizations() - before, kTrainPairs);
  ExpectRowsEqual(AllRows(**a, order, nullptr, nullptr),
                  AllRows(**b, order, nullptr, nullptr));
}

TEST_F(WmtCacheTest, FirstRowsComeBeforeTheLengthPassEndsAndAreTheSame) {
  const std::string d = NewDataDir();
  WriteText(d, "train", *pairs_);
  // Windows of 64 pairs: the first rows need ~70 pairs' lengths, the pass
  // all 700 (at 4 ms each: 2.8 s with one thread).
  const std::map<std::string, std::string> opts = {{"max_length", "64"}};
  const EpochOrder order = Order(Shuffled(kTrainPairs, 31), 0);
  auto plain = Create(d, "train", opts);
  ASSERT_TRUE(plain.ok());
  const std::vector<PackedRow> expected =
      AllRows(**plain, order, nullptr, nullptr);
  ASSERT_GT(expected.size(), 40u);
  SlowLengths slow("4000");
  for (const char* threads : {"1", "2"}) {
    for (bool cached : {false, true}) {
      SCOPED_TRACE(testing::Message()
                   << threads << " threads, cache " << cached);
      cache_path_ += "x";  // a cold cache each time
      std::map<std::string, std::string> o = opts;
      o["index_threads"] = threads;
      auto w = cached ? CreateCached(d, threads, opts) : Create(d, "train", o);
      ASSERT_TRUE(w.ok()) << w.status();
      const PackedWorkload& rows = Rows(**w);
      const uint64_t before = wmt::LengthPassTokenizations();
      absl::StatusOr<RowPacking::KnownRows> known =
          rows.RowsUpTo(order, 4, nullptr);
      ASSERT_TRUE(known.ok()) << known.status();
      EXPECT_FALSE(known->complete);
      EXPECT_GE(known->rows, 4u);
      EXPECT_LT(known->rows, expected.size());
      EXPECT_LT(wmt::LengthPassTokenizations() - before, kTrainPairs / 2);
      // Before the pass ends: the rows known are the complete table's.
      for (uint64_t r = 0; r < known->rows; ++r) {
        ExpectRowsEqual({FillOne(rows, order, r)}, {expected[r]});
        EXPECT_TRUE(rows.CursorOfRow(order, r).ok());
      }
      std::vector<ExampleKey> keys;
      EXPECT_TRUE(rows.ExamplesOfRows(order, 0, known->rows, &keys));
      EXPECT_FALSE(rows.ExamplesOfRows(order, 0, known->rows + 64, &keys));
      // After it: all of them.
      absl::StatusOr<uint64_t> total = rows.RowsInEpoch(order);
      ASSERT_TRUE(total.ok()) << total.status();
      EXPECT_EQ(*total, expected.size());
      ExpectRowsEqual(AllRows(**w, order, nullptr, nullptr), expected);
      absl::StatusOr<RowPacking::KnownRows> all =
          rows.RowsUpTo(order, 4, nullptr);
      ASSERT_TRUE(all.ok());
      EXPECT_TRUE(all->complete);
      EXPECT_EQ(all->rows, expected.size());
    }
  }
}

TEST_F(WmtCacheTest, AStoppedLengthPassKeepsWhatItLearnt) {
  const std::string d = NewDataDir();
  WriteText(d, "train", *pairs_);
  const EpochOrder order = Order(Shuffled(kTrainPairs, 32), 0);
  const std::map<std::string, std::string> opts = {{"max_length", "64"}};
  auto plain = Create(d, "train", opts);
  ASSERT_TRUE(plain.ok());
  const std::vector<PackedRow> expected =
      AllRows(**plain, order, nullptr, nullptr);
  {
    SlowLengths slow("10000");  // 7 s for the pass with one thread
    auto w = CreateCached(d, "1", opts);
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE(Rows(**w).RowsUpTo(order, 1, nullptr).ok());
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }  // the daemon stops: the pass is stopped and stores what it has
  ASSERT_NE(EntryOf("wmt-lengths"), "");
  auto again = CreateCached(d, "1", opts);
  ASSERT_TRUE(again.ok());
  std::vector<PackedRow> got;
  const uint64_t tokenized = Tokenized(**again, order, &got);
  EXPECT_GT(tokenized, 0u);
  EXPECT_LT(tokenized, kTrainPairs - 100);
  ExpectRowsEqual(got, expected);
  auto third = CreateCached(d, "1", opts);
  ASSERT_TRUE(third.ok());
  EXPECT_EQ(Tokenized(**third, order, nullptr), 0u);
}

TEST_F(WmtCacheTest, StoredTokenIdsServeTheSameRowsWithoutTokenizing) {
  const std::string d = NewDataDir();
  std::vector<Pair> pairs = *pairs_;
  // Unknown pieces (id 0) inside kept sequences: packing cuts a sequence by
  // its count of non-zero ids, and the stored ids must be cut alike.
  pairs[5].de += " \u6f22\u5b57 \u2603 \u2708";
  pairs[9].en = "\u2603 \u2708 " + pairs[9].en;
  auto tok = LoadTokenizer();
  ASSERT_NE(tok, nullptr);
  std::vector<int32_t> ids;
  ASSERT_TRUE(tok->Encode(pairs[9].en, &ids).ok());
  ASSERT_NE(std::find(ids.begin(), ids.end(), 0), ids.end());
  WriteText(d, "train", pairs);
  const EpochOrder order = Order(Shuffled(kTrainPairs, 33), 0);
  auto plain = Create(d, "train");
  ASSERT_TRUE(plain.ok());
  const std::vector<PackedRow> expected =
      AllRows(**plain, order, nullptr, nullptr);
  ASSERT_NO_FATAL_FAILURE(FillCache(d, order));  // its pass stores the ids
  const std::string blob = EntryOf("wmt-tokens", ".blob");
  ASSERT_NE(blob, "");
  auto restarted = CreateCached(d);
  ASSERT_TRUE(restarted.ok());
  const uint64_t before = wmt::RowsFromStoredTokens();
  std::vector<PackedRow> got;
  EXPECT_EQ(Tokenized(**restarted, order, &got), 0u);
  EXPECT_EQ(wmt::RowsFromStoredTokens() - before, expected.size());
  ExpectRowsEqual(got, expected);
  // Nothing to read ahead: the rows read no text.
  std::vector<ExampleKey> keys;
  EXPECT_TRUE(Rows(**restarted).ExamplesOfRows(order, 0, 4, &keys));
  EXPECT_TRUE(keys.empty());
  restarted->reset();

  // A damaged blob is discarded with a warning, rows are tokenized the
  // while, and the pass stores the ids again.
  std::string bytes = ReadFile(blob);
  bytes[bytes.size() / 3] ^= 0x01;
  WriteFile(blob, bytes);
  testing::internal::CaptureStderr();
  auto again = CreateCached(d);
  ASSERT_TRUE(again.ok());
  const uint64_t from_before = wmt::RowsFromStoredTokens();
  ExpectRowsEqual(AllRows(**again, order, nullptr, nullptr), expected);
  EXPECT_LT(wmt::RowsFromStoredTokens() - from_before, expected.size());
  testutil::WaitFor([&] { return !EntryOf("wmt-tokens", ".blob").empty(); }, 30,
                    100);
  const std::string log = testing::internal::GetCapturedStderr();
  EXPECT_THAT(log, HasSubstr("event=cache_corrupt kind=wmt-tokens"));
  EXPECT_NE(EntryOf("wmt-tokens", ".blob"), "");
  again->reset();
  auto third = CreateCached(d);
  ASSERT_TRUE(third.ok());
  const uint64_t third_before = wmt::RowsFromStoredTokens();
  ExpectRowsEqual(AllRows(**third, order, nullptr, nullptr), expected);
  EXPECT_EQ(wmt::RowsFromStoredTokens() - third_before, expected.size());
}

TEST_F(WmtCacheTest, TfdsLengthsAreCachedByShardIdentity) {
  const std::string d = NewDataDir();
  WriteTfds(d, "train", *pairs_, 3);
  const EpochOrder order = Order(Shuffled(kTrainPairs, 27), 0);
  ASSERT_NO_FATAL_FAILURE(FillCache(d, order));
  auto again = CreateCached(d);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(Tokenized(**again, order, nullptr), 0u);
  WriteTfds(d, "train", TfdsOrder(*pairs_, 3), 3);  // rewritten shards
  auto changed = CreateCached(d);
  ASSERT_TRUE(changed.ok());
  EXPECT_EQ(Tokenized(**changed, order, nullptr), kTrainPairs);
}

TEST(WmtLengthCache, EncodingRoundTripsAndRefusesWhatCannotBeALength) {
  std::vector<wmt::PackedLengths> t = {
      {3, 4},
      {256, 1},
      {0xffff, 0xffff},
      {wmt::kLengthUnknown, wmt::kLengthUnknown}};
  std::vector<wmt::PackedLengths> back;
  ASSERT_TRUE(wmt::DecodeLengths(wmt::EncodeLengths(t), 4, 256, &back));
  ASSERT_EQ(back.size(), 4u);
  EXPECT_EQ(back[1].inputs, 256);
  EXPECT_EQ(back[2].targets, 0xffff);
  EXPECT_FALSE(wmt::DecodeLengths(wmt::EncodeLengths(t), 5, 256, &back));
  EXPECT_FALSE(wmt::DecodeLengths(wmt::EncodeLengths(t), 4, 128, &back));
  t[0] = {0xffff, 3};  // a mark on one side only
  EXPECT_FALSE(wmt::DecodeLengths(wmt::EncodeLengths(t), 4, 256, &back));
}

}  // namespace
}  // namespace batchd

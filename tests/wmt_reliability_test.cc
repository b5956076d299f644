// The wmt workload against hostile models, a daemon's shared work and a
// cache that fails: a model SentencePiece would crash on or bloat on is
// refused before it sees it (in a forked child, so that a crash is a test
// failure, not the end of the suite); a model of AlgoPerf's size loads;
// streams of one model share it and its charge to the budget; the length
// pass of a daemon (SharedWork) runs to its end after its stream closes,
// and a second stream joins it; a cache directory removed under the daemon
// only warns; a file rewritten with its mtime restored, and a stored token
// id outside the vocabulary, are never served from the cache.
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "base/crc32c.h"
#include "base/executor.h"
#include "base/files.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "storage/cache_dir.h"
#include "tests/testutil.h"
#include "tests/wmt_fixture.h"
#include "workloads/packed_schedule.h"
#include "workloads/shared_work.h"
#include "workloads/wmt/length_cache.h"
#include "workloads/wmt/length_index.h"
#include "workloads/wmt/packing.h"
#include "workloads/wmt/sentencepiece_model.h"
#include "workloads/wmt/sentencepiece_vocab.h"
#include "workloads/wmt/tokenizer.h"
#include "workloads/wmt/wmt.h"

namespace batchd {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using wmt::PackedRow;
using wmt_test::FillOne;  // one train row, as wmt_workload_test fills it
using wmt_test::SlowLengths;

constexpr size_t kPairs = 600;

using testutil::ReadFile;
using testutil::WriteFile;
using wmt_test::MakePairs;
using wmt_test::Pair;
using wmt_test::TrainTestModel;

// A piece of a ModelProto (field 1): text, score, NORMAL.
void AppendPiece(const std::string& text, float score, std::string* model) {
  auto varint = [](uint64_t v, std::string* out) {
    while (v >= 0x80) {
      out->push_back(char(uint8_t(v) | 0x80));
      v >>= 7;
    }
    out->push_back(char(v));
  };
  std::string piece;
  piece.push_back('\x0a');
  varint(text.size(), &piece);
  piece += text;
  piece.push_back('\x15');
  uint32_t bits;
  memcpy(&bits, &score, 4);
  for (int i = 0; i < 4; ++i) piece.push_back(char(bits >> (8 * i)));
  model->push_back('\x0a');
  varint(piece.size(), model);
  *model += piece;
}

// `count` pieces nobody else has, of 2 to 16 letters after "ʘ".
void AppendPieces(size_t count, std::string* model) {
  for (size_t i = 0; i < count; ++i) {
    std::string text = "\xca\x98";
    size_t v = i;
    do {
      text.push_back(char('a' + v % 26));
      v /= 26;
    } while (v > 0 || text.size() < 2 + 1 + i % 15);
    AppendPiece(text, -12.0f - float(i % 1000) / 100.0f, model);
  }
}

const PackedWorkload& Rows(const Workload& w) {
  return dynamic_cast<const PackedWorkload&>(w);
}

std::vector<PackedRow> AllRows(const Workload& w, const EpochOrder& order) {
  std::vector<PackedRow> rows;
  absl::StatusOr<uint64_t> n = Rows(w).RowsInEpoch(order);
  EXPECT_TRUE(n.ok()) << n.status();
  for (uint64_t r = 0; n.ok() && r < *n; ++r) {
    rows.push_back(FillOne(Rows(w), order, r));
  }
  return rows;
}

bool SameRows(const std::vector<PackedRow>& a,
              const std::vector<PackedRow>& b) {
  if (a.size() != b.size()) return false;
  for (size_t r = 0; r < a.size(); ++r) {
    if (a[r].inputs != b[r].inputs || a[r].targets != b[r].targets ||
        a[r].inputs_segmentation != b[r].inputs_segmentation ||
        a[r].targets_position != b[r].targets_position) {
      return false;
    }
  }
  return true;
}

EpochOrder Order(uint64_t seed) {
  std::vector<uint64_t> ids(kPairs);
  for (uint64_t i = 0; i < kPairs; ++i) ids[i] = i;
  std::shuffle(ids.begin(), ids.end(), std::mt19937_64(seed));
  EpochOrder o;
  o.seed = seed;
  o.epoch = 0;
  o.num_examples = kPairs;
  o.id_at = [ids](uint64_t p) { return ids[p]; };
  return o;
}

class WmtReliabilityTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = new std::string(testutil::MakeTempDir("wmtrel"));
    std::string corpus;
    for (const Pair& p : MakePairs(400, 1)) corpus += p.de + "\n" + p.en + "\n";
    TrainTestModel(*root_, corpus, 200);
  }
  static void TearDownTestSuite() { testutil::RemoveTree(*root_); }

  void SetUp() override {
    StartExecutor();
    cache_path_ = *root_ + "/cache" + std::to_string(dirs_++);
  }
  // The daemon's executor, as a (re)started daemon makes it.
  void StartExecutor() {
    ExecutorOptions o;
    o.serving_threads = o.background_threads = 2;
    auto e = Executor::Create(o);
    ASSERT_TRUE(e.ok()) << e.status();
    executor_ = *std::move(e);
  }
  void TearDown() override {
    if (executor_ != nullptr) executor_->Shutdown();
  }

  // A data directory with the pairs and `model` (the trained one if empty).
  std::string NewDataDir(const std::string& model = "") {
    const std::string d = *root_ + "/data" + std::to_string(dirs_++);
    fs::create_directories(d);
    WriteFile(d + "/wmt_sentencepiece_model",
              model.empty() ? ReadFile(*root_ + "/spm.model") : model);
    wmt_test::WriteText(d, "train", MakePairs(kPairs, 2));
    return d;
  }

  // A workload as the daemon makes it: its executor, and `shared` (may be
  // null) and the cache when asked.
  absl::StatusOr<std::unique_ptr<Workload>> Create(
      const std::string& data, SharedWork* shared, bool cached,
      const std::string& split = "train", Executor* executor = nullptr) {
    WorkloadConfig c =
        testutil::StreamConfig(data, split, {{"index_threads", "2"}});
    c.executor = executor != nullptr ? executor : executor_.get();
    c.shared = shared;
    if (cached) {
      auto cache = CacheDir::Open(cache_path_);
      EXPECT_TRUE(cache.ok()) << cache.status();
      if (cache.ok()) c.cache = *cache;
    }
    return CreateWorkload(kWmtWorkload, c);
  }

  // The rows of a workload that shares nothing and caches nothing.
  std::vector<PackedRow> Expected(const std::string& data,
                                  const EpochOrder& order) {
    auto w = Create(data, nullptr, false);
    EXPECT_TRUE(w.ok()) << w.status();
    return w.ok() ? AllRows(**w, order) : std::vector<PackedRow>{};
  }

  // A fresh data directory, the first epoch of seed `seed` over it, and
  // the rows a stream that shares and caches nothing serves in that epoch.
  struct Epoch {
    std::string data;
    EpochOrder order;
    std::vector<PackedRow> rows;
  };
  Epoch NewEpoch(uint64_t seed) {
    Epoch e{NewDataDir(), Order(seed), {}};
    e.rows = Expected(e.data, e.order);
    return e;
  }

  std::string EntryOf(const std::string& kind, const std::string& suffix) {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(cache_path_, ec)) {
      const std::string name = e.path().filename().string();
      if (name.rfind(kind + "-", 0) == 0 && name.size() > suffix.size() &&
          name.substr(name.size() - suffix.size()) == suffix) {
        return e.path().string();
      }
    }
    return "";
  }

  size_t Entries(const std::string& kind) {
    size_t n = 0;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(cache_path_, ec)) {
      const std::string name = e.path().filename().string();
      n += name.rfind(kind + "-", 0) == 0 && name.size() > 6 &&
           name.substr(name.size() - 6) == ".entry";
    }
    return n;
  }

  // Waits (at most 60 s) until every pass of `shared` has ended (its index
  // is gone then): nothing reads or writes the cache any more.
  static bool PassesEndedWithin60s(const SharedWork& shared) {
    return testutil::WaitFor(
        [&] { return shared.Count("wmt-length-index") == 0; }, 60, 20);
  }

  // Waits (at most 60 s) until the cache holds the pass's token ids.
  bool TokensStoredWithin60s() {
    return testutil::WaitFor(
        [&] { return !EntryOf("wmt-tokens", ".blob").empty(); }, 60, 20);
  }

  // A cached stream of `data` on `shared` that asks for its first row and
  // closes at once, as a short job does (a smoke test, a crash at step
  // 50): its length pass runs on.
  void FirstRowThenClose(const std::string& data, const EpochOrder& order,
                         SharedWork* shared) {
    auto w = Create(data, shared, true);
    ASSERT_TRUE(w.ok()) << w.status();
    ASSERT_TRUE(Rows(**w).RowsUpTo(order, 1, nullptr).ok());
  }

  // Every row of a cached stream of `data`; once the stream has closed,
  // its passes end and the cache holds the token ids.
  void CacheEverything(const std::string& data, const EpochOrder& order) {
    SharedWork shared;
    auto w = Create(data, &shared, true);
    ASSERT_TRUE(w.ok()) << w.status();
    AllRows(**w, order);
    w->reset();
    ASSERT_TRUE(PassesEndedWithin60s(shared));
    ASSERT_TRUE(TokensStoredWithin60s());
  }

  std::unique_ptr<Executor> executor_;
  std::string cache_path_;
  static std::string* root_;
  static int dirs_;
};

std::string* WmtReliabilityTest::root_;
int WmtReliabilityTest::dirs_ = 0;

// ---------------------------------------------------------------------------
// Hostile models.

TEST_F(WmtReliabilityTest, AModelWithOne8MiBPieceIsRefusedAndNothingCrashes) {
  std::string model = ReadFile(*root_ + "/spm.model");
  const size_t pieces = wmt::SentencePieceVocab::Parse(model)->pieces.size();
  AppendPiece(std::string(size_t(8) << 20, 'a'), -20.0f, &model);
  const std::string d = NewDataDir(model);
  // SentencePiece's trie builder recursed once per byte of this piece and
  // overflowed the stack: run it where a crash cannot end the suite.
  int status = 0;
  const std::string report = testutil::RunInChild(
      [&] {
        ExecutorOptions o;  // the parent's threads are not in the child
        auto executor = Executor::Create(o);
        if (!executor.ok()) return std::string("no executor");
        SharedWork shared;
        auto w = Create(d, &shared, false, "train", executor->get());
        return w.ok() ? std::string("loaded")
                      : std::string(w.status().ToString());
      },
      &status);
  ASSERT_TRUE(WIFEXITED(status))
      << "the child died of signal "
      << (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  EXPECT_THAT(report, HasSubstr("INVALID_ARGUMENT"));
  EXPECT_THAT(report, HasSubstr("piece " + std::to_string(pieces) +
                                " is 8388608 bytes, over the limit of 1024"));
  EXPECT_THAT(report, HasSubstr("wmt_sentencepiece_model"));
}

TEST_F(WmtReliabilityTest, ModelsWithTooManyPiecesAreRefusedBeforeLoading) {
  std::string model = ReadFile(*root_ + "/spm.model");
  std::string more = model;
  AppendPieces(2000, &more);
  wmt::ModelLimits limits;
  limits.max_pieces = 1000;
  absl::StatusOr<wmt::SentencePieceVocab> few =
      wmt::SentencePieceVocab::Parse(more, limits);
  EXPECT_EQ(few.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(few.status().message(),
              HasSubstr("holds more than 1000 pieces, the limit"));
  // The red team's 3,000,000 pieces (60 MB) took 820 MB once loaded.
  AppendPieces(3000000, &model);
  const std::string d = NewDataDir(model);
  SharedWork shared;
  auto w = Create(d, &shared, false);
  EXPECT_EQ(w.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(w.status().message(), HasSubstr("over the limit of 16777216"));
  EXPECT_EQ(shared.model_bytes(), 0u);
}

TEST_F(WmtReliabilityTest, AModelOfAlgoPerfsSizeLoadsAndServes) {
  std::string model = ReadFile(*root_ + "/spm.model");
  const size_t trained = wmt::SentencePieceVocab::Parse(model)->pieces.size();
  AppendPieces(32000 - trained, &model);
  const std::string d = NewDataDir(model);
  SharedWork shared;
  auto w = Create(d, &shared, false);
  ASSERT_TRUE(w.ok()) << w.status();
  const EpochOrder order = Order(3);
  EXPECT_GT(AllRows(**w, order).size(), 10u);
  // Charged as what it takes: tens of bytes a piece and more.
  EXPECT_EQ((*w)->resident_bytes(), shared.model_bytes());
  EXPECT_GT(shared.model_bytes(), 32000u * 100);
  EXPECT_LT(shared.model_bytes(), uint64_t(64) << 20);
}

TEST_F(WmtReliabilityTest, StreamsOfOneModelShareItAndItsCharge) {
  const std::string d = NewDataDir();
  SharedWork shared;
  auto a = Create(d, &shared, false);
  ASSERT_TRUE(a.ok()) << a.status();
  const uint64_t one = shared.model_bytes();
  EXPECT_GT(one, 0u);
  auto b = Create(d, &shared, false);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(shared.model_bytes(), one);
  EXPECT_EQ(shared.Count("sentencepiece"), 1u);
  EXPECT_EQ(shared.Count("wmt-length-index"), 1u);
  EXPECT_EQ((*b)->resident_bytes(), one);
  a->reset();
  EXPECT_EQ(shared.model_bytes(), one);  // b holds it still
  b->reset();
  EXPECT_EQ(shared.model_bytes(), 0u);
  EXPECT_EQ(shared.Count("sentencepiece"), 0u);
}

TEST_F(WmtReliabilityTest, AModelOverTheBudgetIsRefusedNamingTheFlag) {
  const std::string d = NewDataDir();
  SharedWork shared(/*max_model_bytes=*/1000);
  auto w = Create(d, &shared, false);
  EXPECT_EQ(w.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(w.status().message(), HasSubstr("--max-model-bytes"));
  EXPECT_THAT(w.status().message(), HasSubstr("of the daemon's 1000"));
  EXPECT_EQ(shared.model_bytes(), 0u);
}

// ---------------------------------------------------------------------------
// The daemon's length pass.

TEST_F(WmtReliabilityTest, APassRunsToItsEndAfterItsStreamCloses) {
  const auto [d, order, expected] = NewEpoch(4);
  {
    SlowLengths slow("2000");  // ~0.6 s a pass on two threads
    SharedWork shared;
    ASSERT_NO_FATAL_FAILURE(FirstRowThenClose(d, order, &shared));
    EXPECT_EQ(EntryOf("wmt-tokens", ".blob"), "");
    ASSERT_TRUE(TokensStoredWithin60s());
    // Then the row counts of the first epochs of the stream's seed.
    ASSERT_TRUE(testutil::WaitFor(
        [&] {
          return Entries("wmt-epoch-rows") >= wmt::LengthIndex::kCountedEpochs;
        },
        60, 20));
  }
  // A restarted daemon: every length, token id and early epoch's row count
  // from the cache.
  SharedWork shared;
  auto again = Create(d, &shared, true);
  ASSERT_TRUE(again.ok()) << again.status();
  const uint64_t tokenized = wmt::LengthPassTokenizations();
  const uint64_t stored = wmt::RowsFromStoredTokens();
  EXPECT_TRUE(SameRows(AllRows(**again, order), expected));
  EXPECT_EQ(wmt::LengthPassTokenizations(), tokenized);
  EXPECT_EQ(wmt::RowsFromStoredTokens() - stored, expected.size());
  const uint64_t counted = wmt::EpochsCounted();
  for (uint64_t e = 0; e < wmt::LengthIndex::kCountedEpochs; ++e) {
    EXPECT_TRUE(Rows(**again).RowsInEpoch(ShuffledOrder(kPairs, 4, e)).ok());
  }
  EXPECT_EQ(wmt::EpochsCounted(), counted);
}

TEST_F(WmtReliabilityTest, ASecondStreamJoinsTheRunningPass) {
  const std::string d = NewDataDir();
  const EpochOrder order = Order(5);
  SharedWork shared;
  const uint64_t before = wmt::LengthPassTokenizations();
  auto a = Create(d, &shared, false);
  auto b = Create(d, &shared, false);
  ASSERT_TRUE(a.ok() && b.ok());
  std::vector<PackedRow> ra, rb;
  std::thread ta([&] { ra = AllRows(**a, order); });
  std::thread tb([&] { rb = AllRows(**b, order); });
  ta.join();
  tb.join();
  // One pass (and one set of first windows) for both streams.
  EXPECT_EQ(wmt::LengthPassTokenizations() - before, kPairs);
  EXPECT_TRUE(SameRows(ra, rb));
  EXPECT_TRUE(SameRows(ra, Expected(d, order)));
}

TEST_F(WmtReliabilityTest, ShutdownStopsThePassWhichKeepsWhatItLearnt) {
  const auto [d, order, expected] = NewEpoch(6);
  {
    SlowLengths slow("20000");  // ~6 s a pass on two threads
    SharedWork shared;
    ASSERT_NO_FATAL_FAILURE(FirstRowThenClose(d, order, &shared));
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    executor_->Shutdown();  // the daemon stops
  }
  ASSERT_NE(EntryOf("wmt-lengths", ".entry"), "");
  EXPECT_EQ(EntryOf("wmt-tokens", ".blob"), "");
  StartExecutor();  // a restarted daemon
  SharedWork shared;
  auto again = Create(d, &shared, true);
  ASSERT_TRUE(again.ok()) << again.status();
  const uint64_t before = wmt::LengthPassTokenizations();
  EXPECT_TRUE(SameRows(AllRows(**again, order), expected));
  const uint64_t tokenized = wmt::LengthPassTokenizations() - before;
  EXPECT_GT(tokenized, 0u);
  EXPECT_LT(tokenized, kPairs);
}

// ---------------------------------------------------------------------------
// The cache.

TEST_F(WmtReliabilityTest, ARemovedCacheDirectoryIsAWarningAndRowsAreTheSame) {
  const auto [d, order, expected] = NewEpoch(7);
  auto cache = CacheDir::Open(cache_path_);
  ASSERT_TRUE(cache.ok()) << cache.status();
  fs::remove_all(cache_path_);  // under the running daemon
  WorkloadConfig c = testutil::StreamConfig(d, "train");
  c.executor = executor_.get();
  c.cache = *cache;
  SharedWork shared;
  c.shared = &shared;
  testing::internal::CaptureStderr();
  auto w = CreateWorkload(kWmtWorkload, c);
  ASSERT_TRUE(w.ok()) << w.status();
  absl::StatusOr<RowPacking::KnownRows> first =
      Rows(**w).RowsUpTo(order, 1, nullptr);
  ASSERT_TRUE(first.ok()) << first.status();
  const std::vector<PackedRow> got = AllRows(**w, order);
  const std::string log = testing::internal::GetCapturedStderr();
  EXPECT_TRUE(SameRows(got, expected));
  EXPECT_THAT(log, HasSubstr("event=cache_unusable kind=wmt-lengths"));
}

TEST_F(WmtReliabilityTest, AFileRewrittenWithItsMtimeRestoredIsIndexedAgain) {
  const std::string d = NewDataDir();
  const EpochOrder order = Order(8);
  ASSERT_NO_FATAL_FAILURE(CacheEverything(d, order));
  // The same bytes count, inode and mtime: "the" becomes "not" in place.
  const std::string en = d + "/train.en";
  struct stat before;
  ASSERT_EQ(stat(en.c_str(), &before), 0);
  std::string text = ReadFile(en);
  for (size_t at = 0; (at = text.find("the ", at)) != std::string::npos;) {
    text.replace(at, 3, "not");
  }
  const int fd = open(en.c_str(), O_WRONLY);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(pwrite(fd, text.data(), text.size(), 0), ssize_t(text.size()));
  close(fd);
  const struct timespec times[2] = {before.st_atim, before.st_mtim};
  ASSERT_EQ(utimensat(AT_FDCWD, en.c_str(), times, 0), 0);
  struct stat after;
  ASSERT_EQ(stat(en.c_str(), &after), 0);
  ASSERT_EQ(after.st_ino, before.st_ino);
  ASSERT_EQ(after.st_size, before.st_size);
  ASSERT_EQ(Nanos(after.st_mtim), Nanos(before.st_mtim));
  const std::vector<PackedRow> expected = Expected(d, order);
  SharedWork shared;
  auto w = Create(d, &shared, true);
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_TRUE(SameRows(AllRows(**w, order), expected));
}

TEST_F(WmtReliabilityTest, AStoredTokenIdOutsideTheVocabularyIsNeverServed) {
  const auto [d, order, expected] = NewEpoch(9);
  ASSERT_NO_FATAL_FAILURE(CacheEverything(d, order));
  // A forged blob: one id (2 bytes each, the vocabulary is small) set past
  // the vocabulary, and the checksum made right again.
  const std::string blob = EntryOf("wmt-tokens", ".blob");
  std::string bytes = ReadFile(blob);
  bytes[100] = '\xff';
  bytes[101] = '\x7f';
  const uint32_t crc = Crc32c(bytes.data(), bytes.size() - 4);
  for (int i = 0; i < 4; ++i)
    bytes[bytes.size() - 4 + i] = char(crc >> (8 * i));
  WriteFile(blob, bytes);
  testing::internal::CaptureStderr();
  SharedWork shared;
  auto w = Create(d, &shared, true);
  ASSERT_TRUE(w.ok()) << w.status();
  const uint64_t stored = wmt::RowsFromStoredTokens();
  const std::vector<PackedRow> got = AllRows(**w, order);
  const bool rebuilt = TokensStoredWithin60s();
  const std::string log = testing::internal::GetCapturedStderr();
  EXPECT_TRUE(SameRows(got, expected));
  EXPECT_THAT(log, HasSubstr("event=cache_corrupt kind=wmt-tokens"));
  EXPECT_THAT(log, HasSubstr("outside the vocabulary"));
  EXPECT_LT(wmt::RowsFromStoredTokens() - stored, expected.size());
  EXPECT_TRUE(rebuilt);
  EXPECT_NE(ReadFile(EntryOf("wmt-tokens", ".blob")), bytes);
}

}  // namespace
}  // namespace batchd

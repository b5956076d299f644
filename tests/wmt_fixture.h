// What the wmt workload's suites share: tiny generated sentence pairs, a
// SentencePiece model trained on them once per suite (WmtFixture), writers
// of text and TFDS data sets, and the slot buffers rows are filled into.
#ifndef BATCHD_TESTS_WMT_FIXTURE_H_
#define BATCHD_TESTS_WMT_FIXTURE_H_

#include <link.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <random>
#include <sstream>
#include <thread>

#include "absl/strings/str_split.h"
#include "base/files.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testutil.h"
#ifdef BATCHD_TEST_WITH_PROTOBUF
#include "google/protobuf/stubs/common.h"
#endif
#include "storage/cache_dir.h"
#include "workloads/common/tf_example.h"
#include "workloads/common/tfrecord.h"
#include "workloads/packed_schedule.h"
#include "workloads/wmt/length_cache.h"
#include "workloads/wmt/packing.h"
#include "workloads/wmt/sentencepiece_model.h"
#include "workloads/wmt/sentencepiece_vocab.h"
#include "workloads/wmt/tokenizer.h"
#include "workloads/wmt/wmt.h"


namespace batchd {
namespace wmt_test {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using wmt::PackedRow;
using wmt::TokenPair;

struct Pair {
  std::string de, en;
};

inline constexpr size_t kTrainPairs = 700;
inline constexpr size_t kModelLines = 450;  // the model never sees the rest

// German- and English-like sentences with WMT's shape: mostly short, a few
// over 256 tokens; pairs past kModelLines may hold a character the model
// has not seen (SentencePiece's unk, id 0).
inline std::vector<Pair> MakePairs(size_t n, uint64_t seed) {
  static const char* const kDe[] = {
      "der",       "die",     "das",       "und",   "nicht",      "über",
      "Straße",    "Mädchen", "größer",    "schön", "Häuser",     "früh",
      "Regierung", "Europa",  "Parlament", "wir",   "müssen",     "heute",
      "Bürger",    "Frage",   "Antwort",   "weiß",  "Kommission", "Rat"};
  static const char* const kEn[] = {
      "the",        "and",      "not",        "over",   "street",
      "girl",       "bigger",   "beautiful",  "houses", "early",
      "government", "Europe",   "parliament", "we",     "must",
      "today",      "citizens", "question",   "answer", "white",
      "commission", "council",  "of",         "to"};
  std::mt19937_64 rng(seed);
  std::lognormal_distribution<double> words(std::log(10.0), 0.6);
  std::vector<Pair> pairs(n);
  for (size_t i = 0; i < n; ++i) {
    const int w = i % 97 == 13 ? 300 : std::clamp(int(words(rng)), 1, 80);
    for (int k = 0; k < w; ++k) {
      pairs[i].de += std::string(k ? " " : "") + kDe[rng() % 24];
      pairs[i].en += std::string(k ? " " : "") + kEn[rng() % 24];
    }
    if (i >= kModelLines && i % 5 == 0) pairs[i].de += " \u2603.";
    pairs[i].en += ".";
  }
  return pairs;
}

using testutil::ReadFile;
using testutil::WriteFile;

// Trains a unigram SentencePiece model of `vocab_size` pieces on `corpus`
// (lines), with default ids (unk 0, bos 1, eos 2) and character_coverage
// 1.0, as AlgoPerf trains its model: writes dir/corpus.txt and
// dir/spm.model.
inline void TrainTestModel(const std::string& dir, const std::string& corpus,
                           int vocab_size) {
  WriteFile(dir + "/corpus.txt", corpus);
  std::string error;
  ASSERT_TRUE(wmt::TrainSentencePiece(
      "--input=" + dir + "/corpus.txt --model_prefix=" + dir +
          "/spm --vocab_size=" + std::to_string(vocab_size) +
          " --model_type=unigram --character_coverage=1.0 "
          "--hard_vocab_limit=false --num_threads=1 --minloglevel=2",
      &error))
      << error;
}

inline void WriteText(const std::string& dir, const std::string& split,
               const std::vector<Pair>& pairs) {
  std::string de, en;
  for (const Pair& p : pairs) {
    de += p.de + "\n";
    en += p.en + "\n";
  }
  WriteFile(dir + "/" + split + ".de", de);
  WriteFile(dir + "/" + split + ".en", en);
}

inline std::string TfdsDir(const std::string& dir, const std::string& builder) {
  const std::string d = dir + "/" + builder + "/de-en/1.0.0";
  fs::create_directories(d);
  return d;
}

// Writes `pairs` as `shards` TFDS shards of split `split`.
inline void WriteTfds(const std::string& dir, const std::string& split,
               const std::vector<Pair>& pairs, int shards) {
  const std::string builder =
      split == "train" ? "wmt17_translate" : "wmt14_translate";
  const std::string d = TfdsDir(dir, builder);
  for (int s = 0; s < shards; ++s) {
    std::vector<std::string> records;
    for (size_t i = s; i < pairs.size(); i += shards) {
      ExampleFeatures f;
      f.bytes["de"] = {pairs[i].de};
      f.bytes["en"] = {pairs[i].en};
      records.push_back(SerializeExample(f));
    }
    char name[128];
    snprintf(name, sizeof(name), "/%s-%s.tfrecord-%05d-of-%05d",
             builder.c_str(), split.c_str(), s, shards);
    ASSERT_TRUE(WriteTFRecordFile(d + name, records).ok());
  }
}

// The order WriteTfds stores pairs in (round robin over shards).
inline std::vector<Pair> TfdsOrder(const std::vector<Pair>& pairs, int shards) {
  std::vector<Pair> out;
  for (int s = 0; s < shards; ++s) {
    for (size_t i = s; i < pairs.size(); i += shards) out.push_back(pairs[i]);
  }
  return out;
}

// One row of an epoch, as FillRow writes it (drops counted into
// `counters`, if given).
// The slot bytes of one train row: its six tensors of 256 T each, where
// FillRow writes them (out()).
template <typename T>
struct RowBuffers {
  RowBuffers() : v(6, std::vector<T>(256)) {
    for (int k = 0; k < 6; ++k) ptrs[k] = reinterpret_cast<uint8_t*>(v[k].data());
  }
  RowBuffers(const RowBuffers&) = delete;
  RowBuffers& operator=(const RowBuffers&) = delete;
  uint8_t* const* out() { return ptrs; }
  std::vector<std::vector<T>> v;
  uint8_t* ptrs[6];
};

// The slot bytes of one eval row: inputs and targets (int32), weights.
struct EvalRow {
  EvalRow() : inputs(256), targets(256), weights(256) {
    ptrs[0] = reinterpret_cast<uint8_t*>(inputs.data());
    ptrs[1] = reinterpret_cast<uint8_t*>(targets.data());
    ptrs[2] = reinterpret_cast<uint8_t*>(weights.data());
  }
  EvalRow(const EvalRow&) = delete;
  EvalRow& operator=(const EvalRow&) = delete;
  uint8_t* const* out() { return ptrs; }
  std::vector<int32_t> inputs, targets;
  std::vector<float> weights;
  uint8_t* ptrs[3];
};

inline PackedRow FillOne(const RowPacking& w, const EpochOrder& order,
                         uint64_t r, WorkloadCounters* counters = nullptr) {
  RowBuffers<int32_t> b;
  absl::Status s = w.FillRow(order, r, b.out(), counters);
  EXPECT_TRUE(s.ok()) << s;
  PackedRow row;
  row.inputs = b.v[0];
  row.targets = b.v[1];
  row.inputs_position = b.v[2];
  row.inputs_segmentation = b.v[3];
  row.targets_position = b.v[4];
  row.targets_segmentation = b.v[5];
  return row;
}

// Slows every tokenization of the length pass and first windows by `us`
// microseconds (a test hook, so BATCHD_TEST_HOOKS=1 too) while in scope.
struct SlowLengths {
  explicit SlowLengths(const char* us) {
    setenv("BATCHD_TEST_HOOKS", "1", 1);
    setenv("BATCHD_TEST_WMT_INDEX_DELAY_US", us, 1);
  }
  ~SlowLengths() {
    unsetenv("BATCHD_TEST_WMT_INDEX_DELAY_US");
    unsetenv("BATCHD_TEST_HOOKS");
  }
};

class WmtFixture : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = new std::string(testutil::MakeTempDir("wmt"));
    pairs_ = new std::vector<Pair>(MakePairs(kTrainPairs, 1));
    eval_pairs_ = new std::vector<Pair>(MakePairs(150, 2));
    std::string corpus;
    for (size_t i = 0; i < kModelLines; ++i) {
      corpus += (*pairs_)[i].de + "\n" + (*pairs_)[i].en + "\n";
    }
    TrainTestModel(*root_, corpus, 300);
  }
  static void TearDownTestSuite() { testutil::RemoveTree(*root_); }

  // A fresh data directory holding the model.
  std::string NewDataDir() {
    const std::string d = *root_ + "/data" + std::to_string(dirs_++);
    fs::create_directories(d);
    fs::copy_file(*root_ + "/spm.model", d + "/wmt_sentencepiece_model");
    return d;
  }

  static absl::StatusOr<std::unique_ptr<Workload>> Create(
      const std::string& data, const std::string& split,
      std::map<std::string, std::string> options = {}) {
    WorkloadConfig c;
    c.data_path = data;
    c.split = split;
    c.options = std::move(options);
    c.options.emplace("index_threads", "2");
    return CreateWmtWorkload(c);
  }

  static std::unique_ptr<wmt::Tokenizer> LoadTokenizer() {
    auto t = wmt::Tokenizer::Load(*root_ + "/spm.model");
    EXPECT_TRUE(t.ok()) << t.status();
    return t.ok() ? std::move(*t) : nullptr;
  }

  // The rule applied to the tokenizer's output: what the rows must be.
  static std::vector<PackedRow> ExpectedRows(const std::vector<Pair>& pairs,
                                             const std::vector<uint64_t>& order,
                                             size_t* dropped) {
    auto tok = LoadTokenizer();
    std::vector<TokenPair> kept;
    *dropped = 0;
    for (uint64_t id : order) {
      TokenPair p;
      auto fate = tok->TokenizePair(pairs[id].de, pairs[id].en, 256, false, &p);
      EXPECT_TRUE(fate.ok());
      if (*fate == wmt::PairFate::kKept) {
        kept.push_back(std::move(p));
      } else {
        ++*dropped;
      }
    }
    return wmt::PackStream(kept, 256, 256);
  }

  static EpochOrder Order(const std::vector<uint64_t>& ids, uint64_t epoch) {
    EpochOrder o;
    o.seed = 5;
    o.epoch = epoch;
    o.num_examples = ids.size();
    o.id_at = [ids](uint64_t p) { return ids[p]; };
    return o;
  }

  static std::vector<uint64_t> Shuffled(size_t n, uint64_t seed) {
    std::vector<uint64_t> ids(n);
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), std::mt19937_64(seed));
    return ids;
  }

  // The train split's rows: the workload as its PackedSchedule sees it.
  static const RowPacking& Rows(const Workload& w) {
    return dynamic_cast<const RowPacking&>(w);
  }

  // Whether the workload's batches are packed rows (its schedule's items).
  static bool PacksRows(const Workload& w) {
    auto sampler = Sampler::Create(w.num_examples(), 1, 1, 5, w.shuffle());
    EXPECT_TRUE(sampler.ok()) << sampler.status();
    return dynamic_cast<PackedSchedule*>(w.MakeSchedule(*sampler).get()) !=
           nullptr;
  }

  // Every row of the epoch, as PackedRows (int32 tensors).
  static std::vector<PackedRow> AllRows(const Workload& workload,
                                        const EpochOrder& order,
                                        WorkloadCounters* counters,
                                        std::vector<RowCursor>* cursors) {
    const RowPacking& w = Rows(workload);
    std::vector<PackedRow> rows;
    auto n = w.RowsInEpoch(order);
    EXPECT_TRUE(n.ok()) << n.status();
    if (!n.ok()) return rows;
    for (uint64_t r = 0; r < *n; ++r) {
      PackedRow row = FillOne(w, order, r, counters);
      if (cursors) {
        absl::StatusOr<RowCursor> cursor = w.CursorOfRow(order, r);
        EXPECT_TRUE(cursor.ok()) << cursor.status();
        cursors->push_back(cursor.value_or(RowCursor{}));
      }
      rows.push_back(std::move(row));
    }
    return rows;
  }

  static void ExpectRowsEqual(const std::vector<PackedRow>& a,
                              const std::vector<PackedRow>& b) {
    ASSERT_EQ(a.size(), b.size());
    for (size_t r = 0; r < a.size(); ++r) {
      SCOPED_TRACE(r);
      EXPECT_EQ(a[r].inputs, b[r].inputs);
      EXPECT_EQ(a[r].targets, b[r].targets);
      EXPECT_EQ(a[r].inputs_position, b[r].inputs_position);
      EXPECT_EQ(a[r].inputs_segmentation, b[r].inputs_segmentation);
      EXPECT_EQ(a[r].targets_position, b[r].targets_position);
      EXPECT_EQ(a[r].targets_segmentation, b[r].targets_segmentation);
    }
  }

  inline static std::string* root_;
  inline static std::vector<Pair>* pairs_;
  inline static std::vector<Pair>* eval_pairs_;
  inline static int dirs_ = 0;
};

}  // namespace wmt_test
}  // namespace batchd

#endif  // BATCHD_TESTS_WMT_FIXTURE_H_

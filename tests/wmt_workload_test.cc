// The wmt workload on tiny generated data: packed train rows equal the
// packing rule applied to the tokenizer's output, whatever the source,
// thread or order of calls; cursors; eval rows and weights; bad input;
// the persistent cache of lengths and line offsets.
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
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "base/files.h"
#ifdef BATCHD_TEST_WITH_PROTOBUF
#include "google/protobuf/stubs/common.h"
#endif
#include "workloads/common/cache_dir.h"
#include "workloads/common/tfrecord.h"
#include "workloads/packed_schedule.h"
#include "workloads/wmt/length_cache.h"
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
using wmt::TokenPair;

struct Pair {
  std::string de, en;
};

constexpr size_t kTrainPairs = 700;
constexpr size_t kModelLines = 450;  // the model never sees the rest

// German- and English-like sentences with WMT's shape: mostly short, a few
// over 256 tokens; pairs past kModelLines may hold a character the model
// has not seen (SentencePiece's unk, id 0).
std::vector<Pair> MakePairs(size_t n, uint64_t seed) {
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

void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary);
  f << bytes;
}

std::string ReadFile(const std::string& path) {
  return ReadFileToString(path).value_or("");
}

void WriteText(const std::string& dir, const std::string& split,
               const std::vector<Pair>& pairs) {
  std::string de, en;
  for (const Pair& p : pairs) {
    de += p.de + "\n";
    en += p.en + "\n";
  }
  WriteFile(dir + "/" + split + ".de", de);
  WriteFile(dir + "/" + split + ".en", en);
}

std::string TfdsDir(const std::string& dir, const std::string& builder) {
  const std::string d = dir + "/" + builder + "/de-en/1.0.0";
  fs::create_directories(d);
  return d;
}

// Writes `pairs` as `shards` TFDS shards of split `split`.
void WriteTfds(const std::string& dir, const std::string& split,
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
std::vector<Pair> TfdsOrder(const std::vector<Pair>& pairs, int shards) {
  std::vector<Pair> out;
  for (int s = 0; s < shards; ++s) {
    for (size_t i = s; i < pairs.size(); i += shards) out.push_back(pairs[i]);
  }
  return out;
}

// One row of an epoch, as FillRow writes it (drops counted into
// `counters`, if given).
PackedRow FillOne(const RowPacking& w, const EpochOrder& order, uint64_t r,
                  WorkloadCounters* counters = nullptr) {
  PackedRow row;
  std::vector<int32_t>* v[] = {
      &row.inputs,           &row.targets,
      &row.inputs_position,  &row.inputs_segmentation,
      &row.targets_position, &row.targets_segmentation};
  uint8_t* out[6];
  for (int k = 0; k < 6; ++k) {
    v[k]->resize(256);
    out[k] = reinterpret_cast<uint8_t*>(v[k]->data());
  }
  absl::Status s = w.FillRow(order, r, out, counters);
  EXPECT_TRUE(s.ok()) << s;
  return row;
}

class WmtWorkloadTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    char tmpl[] = "/tmp/batchd-wmt-XXXXXX";
    root_ = new std::string(mkdtemp(tmpl));
    pairs_ = new std::vector<Pair>(MakePairs(kTrainPairs, 1));
    eval_pairs_ = new std::vector<Pair>(MakePairs(150, 2));
    std::string corpus;
    for (size_t i = 0; i < kModelLines; ++i) {
      corpus += (*pairs_)[i].de + "\n" + (*pairs_)[i].en + "\n";
    }
    WriteFile(*root_ + "/corpus.txt", corpus);
    // Unigram, default ids (unk 0, bos 1, eos 2), character_coverage 1.0,
    // as AlgoPerf trains its model.
    std::string error;
    ASSERT_TRUE(wmt::TrainSentencePiece(
        "--input=" + *root_ + "/corpus.txt --model_prefix=" + *root_ +
            "/spm --vocab_size=300 --model_type=unigram "
            "--character_coverage=1.0 --hard_vocab_limit=false "
            "--num_threads=1 --minloglevel=2",
        &error))
        << error;
  }
  static void TearDownTestSuite() {
    std::error_code ec;
    fs::remove_all(*root_, ec);
  }

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

  static std::string* root_;
  static std::vector<Pair>* pairs_;
  static std::vector<Pair>* eval_pairs_;
  static int dirs_;
};

std::string* WmtWorkloadTest::root_;
std::vector<Pair>* WmtWorkloadTest::pairs_;
std::vector<Pair>* WmtWorkloadTest::eval_pairs_;
int WmtWorkloadTest::dirs_ = 0;

TEST_F(WmtWorkloadTest, TrainRowsArePackStreamOfTheTokenizedEpoch) {
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

TEST_F(WmtWorkloadTest, TfdsShardsGiveTheRowsOfTheSamePairs) {
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

TEST_F(WmtWorkloadTest, CursorsNameWindowAndRowAndInvert) {
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
    auto back = Rows(**w).RowAtCursor(order, cursors[r]);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(*back, r);
  }
  // (kTrainPairs - dropped) kept pairs make ceil(kept / 256) windows.
  EXPECT_EQ(window + 1, 3u);
  EXPECT_FALSE(Rows(**w).RowAtCursor(order, {4, 99, 0}).ok());
  EXPECT_FALSE(Rows(**w).RowAtCursor(order, {3, 0, 0}).ok());
  EXPECT_EQ(Rows(**w).RowsInEpoch(order).value(), rows.size());
  uint8_t* none[6] = {};
  EXPECT_EQ(Rows(**w).FillRow(order, rows.size(), none, nullptr).code(),
            absl::StatusCode::kOutOfRange);
  EXPECT_EQ(Rows(**w).CursorOfRow(order, rows.size()).status().code(),
            absl::StatusCode::kOutOfRange);
}

TEST_F(WmtWorkloadTest, RowsDoNotDependOnThreadsOrCallOrder) {
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

TEST_F(WmtWorkloadTest, Int64RowsHoldTheSameValues) {
  const std::string d = NewDataDir();
  WriteText(d, "train", *pairs_);
  auto w32 = Create(d, "train");
  auto w64 = Create(d, "train", {{"dtype", "int64"}});
  ASSERT_TRUE(w32.ok() && w64.ok());
  EXPECT_EQ((*w64)->tensors()[0].dtype, DType::kInt64);
  const EpochOrder order = Order(Shuffled(kTrainPairs, 1), 0);
  const std::vector<PackedRow> rows = AllRows(**w32, order, nullptr, nullptr);
  std::vector<std::vector<int64_t>> out64(6, std::vector<int64_t>(256));
  uint8_t* out[6];
  for (int k = 0; k < 6; ++k)
    out[k] = reinterpret_cast<uint8_t*>(out64[k].data());
  ASSERT_TRUE(Rows(**w64).FillRow(order, 1, out, nullptr).ok());
  EXPECT_EQ(std::vector<int32_t>(out64[0].begin(), out64[0].end()),
            rows[1].inputs);
  EXPECT_EQ(std::vector<int32_t>(out64[5].begin(), out64[5].end()),
            rows[1].targets_segmentation);
}

TEST_F(WmtWorkloadTest, EvalRowsArePaddedPairsWithWeights) {
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
  std::vector<int32_t> inputs(256), targets(256);
  std::vector<float> weights(256);
  uint8_t* out[3] = {reinterpret_cast<uint8_t*>(inputs.data()),
                     reinterpret_cast<uint8_t*>(targets.data()),
                     reinterpret_cast<uint8_t*>(weights.data())};
  for (uint64_t i = 0; i < kept.size(); ++i) {
    ItemRef ex;
    ex.id = ex.position = i;
    ASSERT_TRUE((*w)->FillItem(ex, out, &counters).ok());
    std::vector<int32_t> want_in = kept[i].inputs, want_tg = kept[i].targets;
    want_in.resize(256, 0);
    want_tg.resize(256, 0);
    EXPECT_EQ(inputs, want_in);
    EXPECT_EQ(targets, want_tg);
    for (size_t k = 0; k < 256; ++k) {
      EXPECT_EQ(weights[k], targets[k] > 0 ? 1.0f : 0.0f);
    }
  }
  EXPECT_EQ(counters.skipped_examples.load(),
            eval_pairs_->size() - kept.size());
  ItemRef pad;
  pad.valid = false;
  ASSERT_TRUE((*w)->FillItem(pad, out, &counters).ok());
  EXPECT_EQ(inputs, std::vector<int32_t>(256, 0));
  EXPECT_EQ(targets, std::vector<int32_t>(256, 0));
  EXPECT_EQ(weights, std::vector<float>(256, 0.0f));
  // The train path is not the eval path.
  EXPECT_EQ(Rows(**w).RowsInEpoch(Order({0}, 0)).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

#ifdef BATCHD_TEST_WITH_PROTOBUF
// The daemon has gRPC's libprotobuf loaded; Debian's libsentencepiece
// carries another protobuf. This suite runs with both, as the daemon does.
TEST_F(WmtWorkloadTest, SentencePieceLivesNextToLibprotobuf) {
  GOOGLE_PROTOBUF_VERIFY_VERSION;
  const bool loaded = dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void*) -> int {
        return info->dlpi_name != nullptr &&
               strstr(info->dlpi_name, "libprotobuf.so") != nullptr;
      },
      nullptr);
  EXPECT_TRUE(loaded);
  auto tok = LoadTokenizer();
  ASSERT_NE(tok, nullptr);
  std::vector<int32_t> ids;
  ASSERT_TRUE(tok->Encode("der Rat", &ids).ok());
  EXPECT_EQ(ids.back(), 2);
}
#endif

TEST(WmtUtf8, FindsTheFirstMalformedByte) {
  using wmt::FirstInvalidUtf8;
  constexpr size_t kNone = std::string_view::npos;
  EXPECT_EQ(FirstInvalidUtf8(""), kNone);
  EXPECT_EQ(FirstInvalidUtf8("Stra\xc3\x9f"
                             "e \xe2\x82\xac \xf0\x9f\x98\x80"),
            kNone);
  EXPECT_EQ(FirstInvalidUtf8("ab\x80"), 2u);            // stray continuation
  EXPECT_EQ(FirstInvalidUtf8("a\xc3"), 1u);             // cut short
  EXPECT_EQ(FirstInvalidUtf8("\xc0\xaf"), 0u);          // overlong '/'
  EXPECT_EQ(FirstInvalidUtf8("x\xe0\x80\xaf"), 1u);     // overlong, 3 bytes
  EXPECT_EQ(FirstInvalidUtf8("\xed\xa0\x80"), 0u);      // a surrogate
  EXPECT_EQ(FirstInvalidUtf8("\xf4\x90\x80\x80"), 0u);  // past U+10FFFF
  EXPECT_EQ(FirstInvalidUtf8("\xff"), 0u);
}

// --- Bad input
// -----------------------------------------------------------------

TEST_F(WmtWorkloadTest, MissingModelIsNotFoundNamingThePath) {
  const std::string d = NewDataDir();
  WriteText(d, "train", *pairs_);
  auto w = Create(d, "train", {{"vocab", "no_such_model"}});
  EXPECT_EQ(w.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(w.status().message(), HasSubstr(d + "/no_such_model"));
  WriteFile(d + "/garbage_model", "not a model");
  w = Create(d, "train", {{"vocab", "garbage_model"}});
  EXPECT_EQ(w.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(w.status().message(), HasSubstr("garbage_model"));
  for (const char* outside : {"../spm.model", "/etc/passwd", "a/../../x"}) {
    w = Create(d, "train", {{"vocab", outside}});
    EXPECT_EQ(w.status().code(), absl::StatusCode::kInvalidArgument) << outside;
  }
  symlink((*root_ + "/spm.model").c_str(), (d + "/link_model").c_str());
  w = Create(d, "train", {{"vocab", "link_model"}});
  EXPECT_EQ(w.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(w.status().message(), HasSubstr("outside the data path"));
}

TEST_F(WmtWorkloadTest, BadOptionsAndSplitsAreRefused) {
  const std::string d = NewDataDir();
  WriteText(d, "train", *pairs_);
  EXPECT_THAT(Create(d, "train", {{"colour", "blue"}}).status().message(),
              HasSubstr("unknown option 'colour'"));
  EXPECT_THAT(Create(d, "train", {{"dtype", "float16"}}).status().message(),
              HasSubstr("dtype"));
  EXPECT_THAT(Create(d, "train", {{"max_length", "0"}}).status().message(),
              HasSubstr("max_length"));
  EXPECT_THAT(Create(d, "bogus").status().message(),
              HasSubstr("unknown split 'bogus'"));
  EXPECT_EQ(Create(d, "test").status().code(), absl::StatusCode::kNotFound);
  auto w = Create(d, "train");
  ASSERT_TRUE(w.ok());
  // A train item is a row of the shuffled epoch; one past its rows is
  // refused.
  uint8_t* none[6] = {};
  ItemRef past;
  past.position = uint64_t(1) << 40;
  EXPECT_EQ((*w)->FillItem(past, none, nullptr).code(),
            absl::StatusCode::kOutOfRange);
}

TEST_F(WmtWorkloadTest, CorruptRecordIsCountedAndDropped) {
  const std::string d = NewDataDir();
  WriteTfds(d, "train", *pairs_, 1);
  const std::string shard = TfdsDir(d, "wmt17_translate") +
                            "/wmt17_translate-train.tfrecord-00000-of-00001";
  // Flip one byte inside record 1's data.
  std::string bytes = ReadFile(shard);
  ExampleFeatures first;
  first.bytes["de"] = {(*pairs_)[0].de};
  first.bytes["en"] = {(*pairs_)[0].en};
  const size_t record0 = 12 + SerializeExample(first).size() + 4;
  bytes[record0 + 12 + 5] ^= 0x40;
  WriteFile(shard, bytes);
  auto w = Create(d, "train");
  ASSERT_TRUE(w.ok()) << w.status();
  std::vector<uint64_t> ids(kTrainPairs);
  std::iota(ids.begin(), ids.end(), 0);
  std::vector<Pair> without1 = *pairs_;
  without1.erase(without1.begin() + 1);
  std::vector<uint64_t> ids_without1(kTrainPairs - 1);
  std::iota(ids_without1.begin(), ids_without1.end(), 0);
  size_t dropped;
  WorkloadCounters counters;
  ExpectRowsEqual(AllRows(**w, Order(ids, 0), &counters, nullptr),
                  ExpectedRows(without1, ids_without1, &dropped));
  EXPECT_EQ(counters.decode_errors.load(), 1u);
  EXPECT_EQ(counters.skipped_examples.load(), dropped);
}

TEST_F(WmtWorkloadTest, TruncatedShardFailsNamingFileAndOffset) {
  const std::string d = NewDataDir();
  WriteTfds(d, "train", *pairs_, 2);
  const std::string shard = TfdsDir(d, "wmt17_translate") +
                            "/wmt17_translate-train.tfrecord-00001-of-00002";
  const std::string bytes = ReadFile(shard);
  WriteFile(shard, bytes.substr(0, bytes.size() - 3));
  auto w = Create(d, "train");
  EXPECT_EQ(w.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(w.status().message(), HasSubstr(shard));
  EXPECT_THAT(w.status().message(), HasSubstr("truncated"));
  EXPECT_THAT(w.status().message(), HasSubstr("offset"));
}

TEST_F(WmtWorkloadTest, MissingShardFails) {
  const std::string d = NewDataDir();
  WriteTfds(d, "train", *pairs_, 3);
  fs::remove(TfdsDir(d, "wmt17_translate") +
             "/wmt17_translate-train.tfrecord-00001-of-00003");
  auto w = Create(d, "train");
  EXPECT_EQ(w.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(w.status().message(), HasSubstr("00001 of 00003"));
}

TEST_F(WmtWorkloadTest, ExampleWithoutDeIsADecodeError) {
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
  std::vector<int32_t> a(256), b(256);
  std::vector<float> c(256);
  uint8_t* out[3] = {reinterpret_cast<uint8_t*>(a.data()),
                     reinterpret_cast<uint8_t*>(b.data()),
                     reinterpret_cast<uint8_t*>(c.data())};
  for (uint64_t i = 0; i < 3; ++i) {
    ItemRef ex;
    ex.id = i;
    ASSERT_TRUE((*w)->FillItem(ex, out, &counters).ok());
  }
  EXPECT_EQ(counters.decode_errors.load(), 3u);
}

TEST_F(WmtWorkloadTest, InvalidUtf8IsADecodeErrorWhenAskedAndEmptyLinesKept) {
  const std::string d = NewDataDir();
  WriteFile(d + "/validation.de",
            "der Rat\n\xc3\x28 kaputt\n\nHäuser\r\nüber\xed\xa0\x80\n");
  WriteFile(d + "/validation.en", "the council\nbroken\nempty\n\nover\n");
  auto w = Create(d, "validation", {{"invalid_utf8", "drop"}});
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ((*w)->num_examples(), 3u);  // lines 0, 2 and 3
  WorkloadCounters counters;
  std::vector<int32_t> in(256), tg(256);
  std::vector<float> wt(256);
  uint8_t* out[3] = {reinterpret_cast<uint8_t*>(in.data()),
                     reinterpret_cast<uint8_t*>(tg.data()),
                     reinterpret_cast<uint8_t*>(wt.data())};
  ItemRef ex;
  ex.id = 1;  // line 2: an empty German side is EOS alone, as in AlgoPerf
  ASSERT_TRUE((*w)->FillItem(ex, out, &counters).ok());
  EXPECT_EQ(in[0], 2);
  EXPECT_EQ(in[1], 0);
  ex.id = 2;  // line 3: "Häuser\r" reads as "Häuser"; the English is empty
  ASSERT_TRUE((*w)->FillItem(ex, out, &counters).ok());
  EXPECT_EQ(tg[0], 2);
  ex.id = 0;
  ASSERT_TRUE((*w)->FillItem(ex, out, &counters).ok());
  EXPECT_EQ(counters.decode_errors.load(), 2u);  // lines 1 and 4

  auto skip =
      Create(d, "validation", {{"skip_empty", "1"}, {"invalid_utf8", "drop"}});
  ASSERT_TRUE(skip.ok());
  EXPECT_EQ((*skip)->num_examples(), 1u);
  WorkloadCounters c2;
  ex.id = 0;
  ASSERT_TRUE((*skip)->FillItem(ex, out, &c2).ok());
  EXPECT_EQ(c2.skipped_examples.load(), 2u);
  EXPECT_EQ(c2.decode_errors.load(), 2u);
}

TEST_F(WmtWorkloadTest, InvalidUtf8IsEncodedAsSentencePieceDoesByDefault) {
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
  std::vector<int32_t> in(256), tg(256);
  std::vector<float> wt(256);
  uint8_t* out[3] = {reinterpret_cast<uint8_t*>(in.data()),
                     reinterpret_cast<uint8_t*>(tg.data()),
                     reinterpret_cast<uint8_t*>(wt.data())};
  for (uint64_t i = 0; i < 3; ++i) {
    ItemRef ex;
    ex.id = i;
    ASSERT_TRUE((*w)->FillItem(ex, out, &counters).ok());
    std::vector<int> want;
    ASSERT_TRUE(model->Encode(bad[i], &want, &error)) << error;
    want.push_back(2);
    EXPECT_THAT(want, ::testing::Contains(model->unk_id()));
    EXPECT_EQ(std::vector<int>(in.begin(), in.begin() + want.size()), want);
    EXPECT_EQ(in[want.size()], 0);
  }
  EXPECT_EQ(counters.decode_errors.load(), 0u);
  EXPECT_FALSE(Create(d, "validation", {{"invalid_utf8", "keep"}}).ok());
}

// Runs of one character make Viterbi ties: with "c" and "cc" both pieces,
// "ccc" is c+cc or cc+c, equal sums in another order, and float rounding
// of the running score before the word decides. A model trained on text
// with such runs, a small search for words whose lone encoding differs
// from what a sentence gives them, and the tokenizer against SentencePiece
// on those sentences.
TEST_F(WmtWorkloadTest, TokenizerEqualsWholeSentenceSentencePieceOnTies) {
  const std::string dir = *root_ + "/ties";
  fs::create_directories(dir);
  std::mt19937_64 rng(11);
  const std::string chars = "]-.+=*#_~!?/|Xle";
  std::string corpus;
  for (size_t i = 0; i < kModelLines; ++i) {
    corpus += (*pairs_)[i].de + "\n" + (*pairs_)[i].en + "\n";
    const char c = chars[rng() % chars.size()];
    corpus += (*pairs_)[i].en.substr(0, 40);
    for (int k = 0, n = 1 + rng() % 4; k < n; ++k) {
      static const char* const kPrefix[] = {"", "a", "x"};
      const uint64_t prefix = rng() % 3, length = 1 + rng() % 12;
      corpus += std::string(" ") + kPrefix[prefix] + std::string(length, c);
    }
    corpus += "\n";
  }
  WriteFile(dir + "/corpus.txt", corpus);
  std::string error;
  ASSERT_TRUE(wmt::TrainSentencePiece(
      "--input=" + dir + "/corpus.txt --model_prefix=" + dir +
          "/spm --vocab_size=400 --model_type=unigram "
          "--character_coverage=1.0 --hard_vocab_limit=false "
          "--num_threads=1 --minloglevel=2",
      &error))
      << error;
  auto model = wmt::SentencePieceModel::Load(dir + "/spm.model", &error);
  ASSERT_NE(model, nullptr) << error;
  auto whole = [&](const std::string& s) {
    std::vector<int> ids;
    EXPECT_TRUE(model->Encode(s, &ids, &error)) << error;
    ids.push_back(2);
    return std::vector<int32_t>(ids.begin(), ids.end());
  };
  auto word_by_word = [&](const std::string& s) {
    std::vector<int32_t> ids;
    for (absl::string_view w : absl::StrSplit(s, ' ', absl::SkipEmpty())) {
      std::vector<int32_t> one = whole(std::string(w));
      ids.insert(ids.end(), one.begin(), one.end() - 1);
    }
    ids.push_back(2);
    return ids;
  };
  // Plain sentences first: the order that fooled the old sampled check.
  std::vector<std::string> sentences, tie_words;
  for (size_t i = 0; i < kTrainPairs; ++i) {
    sentences.push_back((*pairs_)[i].de);
    sentences.push_back((*pairs_)[i].en);
  }
  for (char c : chars) {
    for (int n = 2; n <= 12; ++n) {
      for (const char* prefix : {"", "a", "x"}) {
        const std::string w = prefix + std::string(n, c);
        bool tie = false;
        for (size_t i = 0; i < 30; ++i) {
          for (const std::string* ctx : {&(*pairs_)[i].en, &(*pairs_)[i].de}) {
            const std::string s = *ctx + " " + w;
            sentences.push_back(s);
            if (whole(s) != word_by_word(s)) tie = true;
          }
        }
        if (tie) tie_words.push_back(w);
      }
    }
  }
  ASSERT_GE(tie_words.size(), 3u) << "few ties found: the search needs a look";
  RecordProperty("tie_words", int(tie_words.size()));
  auto tok = wmt::Tokenizer::Load(dir + "/spm.model");
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ((*tok)->word_cache_off_reason(), "");
  size_t differ = 0;
  for (const std::string& s : sentences) {
    const std::vector<int32_t> want = whole(s);
    differ += want != word_by_word(s);
    std::vector<int32_t> got;
    ASSERT_TRUE((*tok)->Encode(s, &got).ok());
    ASSERT_EQ(got, want) << "'" << s << "'";
  }
  EXPECT_GE(differ, tie_words.size());
  // Both ways were taken: the cache served most sentences, ties went whole.
  const wmt::Tokenizer::Stats st = (*tok)->stats();
  EXPECT_GT(st.from_words, sentences.size() / 2);
  EXPECT_GE(st.whole, differ);
}

TEST_F(WmtWorkloadTest, ModelFileFactsAndCharsmapAreRead) {
  const std::string bytes = ReadFile(*root_ + "/spm.model");
  auto v = wmt::SentencePieceVocab::Parse(bytes);
  ASSERT_TRUE(v.ok()) << v.status();
  auto tok = LoadTokenizer();
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(int(v->pieces.size()), tok->vocab_size());
  EXPECT_EQ(v->pieces[0].type, wmt::SentencePieceVocab::kUnknown);
  EXPECT_EQ(v->pieces[2].text, "</s>");
  EXPECT_EQ(v->model_type, 1);
  EXPECT_EQ(v->normalizer_name, "nmt_nfkc");
  EXPECT_TRUE(v->add_dummy_prefix);
  auto keys = wmt::ScanCharsmap(v->precompiled_charsmap);
  ASSERT_TRUE(keys.ok()) << keys.status();
  // NFKC rewrites thousands of characters, full-width Latin (EF BC xx)
  // among them; no rule holds a space.
  EXPECT_GT(keys->keys, 1000u);
  EXPECT_TRUE(keys->byte_in_key[0xef]);
  EXPECT_TRUE(keys->byte_in_key[0xbc]);
  EXPECT_FALSE(keys->byte_in_key[' ']);
  EXPECT_EQ(tok->word_cache_off_reason(), "");

  std::string broken = v->precompiled_charsmap;
  broken[0] = '\xff';  // a trie size past the blob
  EXPECT_FALSE(wmt::ScanCharsmap(broken).ok());
  EXPECT_FALSE(wmt::SentencePieceVocab::Parse("\x0a\xff").ok());
}

TEST_F(WmtWorkloadTest, ModelsTheArgumentDoesNotCoverAreEncodedWhole) {
  // A user-defined symbol is matched before normalisation and may hold
  // what the word split relies on; such a model never uses the cache.
  const std::string dir = *root_ + "/userdef";
  fs::create_directories(dir);
  std::string error;
  ASSERT_TRUE(wmt::TrainSentencePiece(
      "--input=" + *root_ + "/corpus.txt --model_prefix=" + dir +
          "/spm --vocab_size=300 --model_type=unigram "
          "--user_defined_symbols=Rat --character_coverage=1.0 "
          "--hard_vocab_limit=false --num_threads=1 --minloglevel=2",
      &error))
      << error;
  auto tok = wmt::Tokenizer::Load(dir + "/spm.model");
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_THAT((*tok)->word_cache_off_reason(), HasSubstr("user-defined"));
  auto model = wmt::SentencePieceModel::Load(dir + "/spm.model", &error);
  ASSERT_NE(model, nullptr);
  for (size_t i = 0; i < 50; ++i) {
    std::vector<int32_t> got;
    ASSERT_TRUE((*tok)->Encode((*pairs_)[i].de, &got).ok());
    std::vector<int> want;
    ASSERT_TRUE(model->Encode((*pairs_)[i].de, &want, &error));
    want.push_back(2);
    EXPECT_EQ(std::vector<int>(got.begin(), got.end()), want);
  }
  EXPECT_EQ((*tok)->stats().from_words, 0u);
  EXPECT_EQ((*tok)->stats().whole, 50u);
}

TEST_F(WmtWorkloadTest, MisalignedTextFilesFail) {
  const std::string d = NewDataDir();
  WriteFile(d + "/train.de", "a\nb\nc\n");
  WriteFile(d + "/train.en", "a\nb\n");
  auto w = Create(d, "train");
  EXPECT_EQ(w.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(w.status().message(), HasSubstr("3 lines"));
  WriteFile(d + "/train.en", "");
  WriteFile(d + "/train.de", "");
  EXPECT_EQ(Create(d, "train").status().code(),
            absl::StatusCode::kFailedPrecondition);  // no pairs
  fs::remove(d + "/train.en");
  EXPECT_EQ(Create(d, "train").status().code(), absl::StatusCode::kNotFound);
}

// ---------------------------------------------------------------------------
// The persistent cache (length table and line offsets).

class WmtCacheTest : public WmtWorkloadTest {
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
    return CreateWmtWorkload(c);
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
  auto first = CreateCached(d);
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(Tokenized(**first, order, nullptr), kTrainPairs);
  // Same line count, one line longer: other rows.
  std::vector<Pair> changed = *pairs_;
  changed[3].en += " the council of europe must answer the question today.";
  WriteText(d, "train", changed);
  auto plain = Create(d, "train");
  ASSERT_TRUE(plain.ok());
  std::vector<PackedRow> expected, got;
  Tokenized(**plain, order, &expected);
  auto second = CreateCached(d);
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(Tokenized(**second, order, &got), kTrainPairs);
  ExpectRowsEqual(got, expected);
}

TEST_F(WmtCacheTest, ChangedModelInvalidatesTheLengths) {
  const std::string d = NewDataDir();
  WriteText(d, "train", *pairs_);
  const EpochOrder order = Order(Shuffled(kTrainPairs, 24), 0);
  auto first = CreateCached(d);
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(Tokenized(**first, order, nullptr), kTrainPairs);
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
  auto plain = Create(d, "train");
  ASSERT_TRUE(plain.ok());
  std::vector<PackedRow> expected, got;
  Tokenized(**plain, order, &expected);
  auto second = CreateCached(d);
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(Tokenized(**second, order, &got), kTrainPairs);
  ExpectRowsEqual(got, expected);
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
  {
    auto first = CreateCached(d);
    ASSERT_TRUE(first.ok());
    EXPECT_EQ(Tokenized(**first, order, &expected), kTrainPairs);
  }
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
    EXPECT_THAT(log, HasSubstr("event=cache_corrupt kind=" +
                               std::string(kind)));
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

// Slows every tokenization for a length (test hook) while in scope.
struct SlowLengths {
  explicit SlowLengths(const char* us) {
    setenv("BATCHD_TEST_WMT_INDEX_DELAY_US", us, 1);
  }
  ~SlowLengths() { unsetenv("BATCHD_TEST_WMT_INDEX_DELAY_US"); }
};

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
      SCOPED_TRACE(testing::Message() << threads << " threads, cache "
                                      << cached);
      cache_path_ += "x";  // a cold cache each time
      std::map<std::string, std::string> o = opts;
      o["index_threads"] = threads;
      auto w = cached ? CreateCached(d, threads, opts) : Create(d, "train", o);
      ASSERT_TRUE(w.ok()) << w.status();
      const RowPacking& rows = Rows(**w);
      const uint64_t before = wmt::LengthPassTokenizations();
      absl::StatusOr<RowPacking::KnownRows> known = rows.RowsUpTo(order, 4);
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
      absl::StatusOr<RowPacking::KnownRows> all = rows.RowsUpTo(order, 4);
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
    ASSERT_TRUE(Rows(**w).RowsUpTo(order, 1).ok());
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
  {
    auto first = CreateCached(d);
    ASSERT_TRUE(first.ok());
    EXPECT_EQ(Tokenized(**first, order, nullptr), kTrainPairs);
  }  // its pass has stored the token ids
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
  for (int i = 0; i < 300 && EntryOf("wmt-tokens", ".blob").empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
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
  auto first = CreateCached(d);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(Tokenized(**first, order, nullptr), kTrainPairs);
  auto again = CreateCached(d);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(Tokenized(**again, order, nullptr), 0u);
  WriteTfds(d, "train", TfdsOrder(*pairs_, 3), 3);  // rewritten shards
  auto changed = CreateCached(d);
  ASSERT_TRUE(changed.ok());
  EXPECT_EQ(Tokenized(**changed, order, nullptr), kTrainPairs);
}

TEST(WmtLengthCache, EncodingRoundTripsAndRefusesWhatCannotBeALength) {
  std::vector<wmt::PackedLengths> t = {{3, 4}, {256, 1}, {0xffff, 0xffff},
                                       {wmt::kLengthUnknown,
                                        wmt::kLengthUnknown}};
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

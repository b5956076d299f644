// The librispeech workload: its .npy reader on hostile files, the CSV
// indexes, splits and options, and FillItem's bytes.
#include "workloads/librispeech/librispeech.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/testutil.h"
#include "workloads/librispeech/npy.h"

namespace batchd {
namespace {

using testutil::ReadFile;
using testutil::TempDir;
using testutil::WriteFile;

// A .npy file as numpy writes one (version 1, header padded to 64 bytes).
std::string Npy(const std::string& descr, const std::string& shape,
                const std::string& data, bool fortran = false, int major = 1) {
  std::string header = absl::StrCat(
      "{'descr': '", descr, "', 'fortran_order': ", fortran ? "True" : "False",
      ", 'shape': ", shape, ", }");
  const size_t prefix = major == 1 ? 10 : 12;
  while ((prefix + header.size() + 1) % 64 != 0) header.push_back(' ');
  header.push_back('\n');
  std::string out("\x93NUMPY", 6);
  out.push_back(char(major));
  out.push_back(0);
  const uint32_t n = header.size();
  out.push_back(char(n & 0xff));
  out.push_back(char(n >> 8));
  if (major != 1) {
    out.push_back(char(n >> 16));
    out.push_back(char(n >> 24));
  }
  return out + header + data;
}

template <typename T>
std::string Values(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()),
                     v.size() * sizeof(T));
}

TEST(NpyTest, ParsesVersionsAndDtypes) {
  const std::string data = Values<int64_t>({1, -2, 32767});
  for (int major : {1, 2, 3}) {
    // The array points into the bytes it was parsed from: they must live.
    const std::string file = Npy("<i8", "(3,)", data, false, major);
    absl::StatusOr<NpyArray> a = ParseNpy(file, "a.npy", {"<i8"}, 10);
    ASSERT_TRUE(a.ok()) << a.status();
    EXPECT_EQ(a->length, 3u);
    EXPECT_EQ(a->at(1), -2);
    EXPECT_EQ(a->at(2), 32767);
    EXPECT_EQ(a->data_offset % 64, 0u);  // numpy aligns the data to 64
  }
  const std::string file = Npy("<i4", "(2,)", Values<int32_t>({7, 2}));
  absl::StatusOr<NpyArray> t = ParseNpy(file, "t.npy", {"<i4"}, 256);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->at(0), 7);
  // An empty array is an array.
  EXPECT_TRUE(ParseNpy(Npy("<i4", "(0,)", ""), "e.npy", {"<i4"}, 256).ok());
}

void ExpectRefused(const std::string& bytes, const std::string& what) {
  absl::StatusOr<NpyArray> a = ParseNpy(bytes, "dir/x_audio.npy", {"<i8"}, 4);
  ASSERT_FALSE(a.ok()) << what;
  EXPECT_EQ(a.status().code(), absl::StatusCode::kDataLoss) << what;
  EXPECT_NE(a.status().message().find("dir/x_audio.npy at byte "),
            std::string::npos)
      << a.status();
}

TEST(NpyTest, RefusesWhatNumpyDoesNotWrite) {
  const std::string data = Values<int64_t>({1, 2, 3});
  const std::string good = Npy("<i8", "(3,)", data);
  ASSERT_TRUE(ParseNpy(good, "x", {"<i8"}, 4).ok());
  // Truncated anywhere: in the magic, the header, the data.
  for (size_t n = 0; n < good.size(); ++n) {
    ExpectRefused(good.substr(0, n), absl::StrCat("truncated to ", n));
  }
  ExpectRefused(good + "x", "a byte after the data");
  ExpectRefused(Npy("<i4", "(3,)", Values<int32_t>({1, 2, 3})), "int32");
  ExpectRefused(Npy("<f8", "(3,)", data), "float64");
  ExpectRefused(Npy(">i8", "(3,)", data), "big-endian");
  ExpectRefused(Npy("<i8", "(3,)", data, /*fortran=*/true), "fortran order");
  ExpectRefused(Npy("<i8", "(3, 1)", data), "two dimensions");
  ExpectRefused(Npy("<i8", "()", Values<int64_t>({1})), "a scalar");
  ExpectRefused(Npy("<i8", "(5,)", Values<int64_t>({1, 2, 3, 4, 5})),
                "longer than the limit");
  ExpectRefused(Npy("<i8", "(4,)", data), "shape longer than the data");
  ExpectRefused(Npy("<i8", "(-3,)", data), "a negative shape");
  std::string v9 = good;
  v9[6] = 9;
  ExpectRefused(v9, "version 9");
  std::string bad = good;
  bad[0] = 'x';
  ExpectRefused(bad, "no magic");
  std::string huge = good;
  huge[8] = char(0xff);
  huge[9] = char(0xff);
  ExpectRefused(huge, "a header longer than the file");
  std::string junk = good;
  junk[11] = '[';
  ExpectRefused(junk, "a header that is not a dict");
  ExpectRefused(Npy("<i8", "(3,), 'extra': 1", data), "an unknown key");
}

// A small data set in AlgoPerf's layout: `per_subset` utterances in each of
// the six subsets, utterance u of subset s with (s + 1) * 10 + u samples
// and u + 2 tokens.
class LibriSpeechTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* subsets[] = {"train-clean-100", "train-clean-360",
                             "train-other-500", "dev-clean",
                             "dev-other",       "test-clean"};
    for (int s = 0; s < 6; ++s) {
      const std::string dir = absl::StrCat(dir_.path(), "/", subsets[s]);
      ASSERT_EQ(mkdir(dir.c_str(), 0755), 0);
      std::string csv = ",id\n";
      for (int u = 0; u < 3; ++u) {
        const std::string id = absl::StrCat(s, "-", u);
        absl::StrAppend(&csv, u, ",", id, "\n");
        std::vector<int64_t> audio((s + 1) * 10 + u);
        for (size_t i = 0; i < audio.size(); ++i) {
          audio[i] = int64_t(i * 997 + s * 31 + u) % 65536 - 32768;
        }
        std::vector<int32_t> targets(u + 2);
        for (size_t i = 0; i < targets.size(); ++i) targets[i] = 3 + i + s;
        targets.back() = 2;
        WriteFile(
            absl::StrCat(dir, "/", id, "_audio.npy"),
            Npy("<i8", absl::StrCat("(", audio.size(), ",)"), Values(audio)));
        WriteFile(absl::StrCat(dir, "/", id, "_targets.npy"),
                  Npy("<i4", absl::StrCat("(", targets.size(), ",)"),
                      Values(targets)));
      }
      WriteFile(absl::StrCat(dir_.path(), "/", subsets[s], ".csv"), csv);
    }
  }

  absl::StatusOr<std::unique_ptr<Workload>> Create(
      const std::string& split,
      std::map<std::string, std::string> options = {}) {
    return CreateWorkload(
        kLibriSpeechWorkload,
        testutil::StreamConfig(dir_.path(), split, std::move(options), 7));
  }

  struct Item {
    std::vector<uint8_t> audio = std::vector<uint8_t>(640000, 0xee);
    int32_t audio_length = -1;
    std::vector<int32_t> targets = std::vector<int32_t>(256, -7);
    int32_t target_length = -1;
    float weight = -1;
  };

  absl::Status Fill(const Workload& w, const ItemRef& item, Item* it,
                    WorkloadCounters* counters = nullptr) {
    uint8_t* out[] = {it->audio.data(),
                      reinterpret_cast<uint8_t*>(&it->audio_length),
                      reinterpret_cast<uint8_t*>(it->targets.data()),
                      reinterpret_cast<uint8_t*>(&it->target_length),
                      reinterpret_cast<uint8_t*>(&it->weight)};
    return w.FillItem(item, out, counters);
  }

  TempDir dir_{"librispeech"};
};

TEST_F(LibriSpeechTest, SplitsAndTensors) {
  auto train = Create("train");
  ASSERT_TRUE(train.ok()) << train.status();
  EXPECT_EQ((*train)->num_examples(), 9u);
  EXPECT_TRUE((*train)->shuffle());
  EXPECT_EQ((*train)->tensors().size(), 4u);
  EXPECT_EQ((*train)->tensors()[0].ExampleBytes(), 640000u);
  auto validation = Create("validation");
  ASSERT_TRUE(validation.ok());
  EXPECT_EQ((*validation)->num_examples(), 6u);
  EXPECT_FALSE((*validation)->shuffle());
  EXPECT_EQ((*validation)->tensors().size(), 5u);
  EXPECT_EQ((*validation)->tensors()[4].name, "weights");
  auto test = Create("test");
  ASSERT_TRUE(test.ok());
  EXPECT_EQ((*test)->num_examples(), 3u);
  auto eval_train = Create("eval_train", {{"eval_train_examples", "4"}});
  ASSERT_TRUE(eval_train.ok());
  EXPECT_EQ((*eval_train)->num_examples(), 4u);
  // At most the train split.
  EXPECT_EQ((*Create("eval_train"))->num_examples(), 9u);
}

TEST_F(LibriSpeechTest, RefusesBadSplitsOptionsAndIndexes) {
  auto bad = Create("dev");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("eval_train"), std::string::npos);
  bad = Create("train", {{"shuffle_buffer", "1"}});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("eval_train_examples"),
            std::string::npos);
  bad = Create("eval_train", {{"eval_train_examples", "0"}});
  ASSERT_FALSE(bad.ok());
  ASSERT_EQ(unlink(absl::StrCat(dir_.path(), "/dev-other.csv").c_str()), 0);
  bad = Create("validation");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("dev-other.csv"), std::string::npos);
  EXPECT_TRUE(Create("test").ok());  // other splits do not need it
  WriteFile(absl::StrCat(dir_.path(), "/test-clean.csv"), "id\n0,a\n");
  EXPECT_FALSE(Create("test").ok());
  WriteFile(absl::StrCat(dir_.path(), "/test-clean.csv"), ",id\n0,../x\n");
  bad = Create("test");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("test-clean.csv at byte 4"),
            std::string::npos)
      << bad.status();
}

TEST_F(LibriSpeechTest, AnIndexIsBoundedBeforeItIsKept) {
  // A sparse CSV over the cap is refused from its size, unread.
  const std::string csv = absl::StrCat(dir_.path(), "/test-clean.csv");
  WriteFile(csv, ",id\n0,a\n");
  ASSERT_EQ(truncate(csv.c_str(), off_t(16) << 20 | 1), 0);
  auto bad = Create("test");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(bad.status().message().find("over the limit of 16777216"),
            std::string::npos)
      << bad.status();
  // Lines each a few bytes, more than a split may keep: refused at the
  // first line past the limit, naming its byte.
  std::string lines = ",id\n";
  for (int i = 0; i <= (1 << 20); ++i) absl::StrAppend(&lines, "0,a\n");
  WriteFile(csv, lines);
  bad = Create("test");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(bad.status().message().find(
                absl::StrCat("test-clean.csv at byte ", 4 + 4 * (1 << 20),
                             ": more than 1048576 utterances")),
            std::string::npos)
      << bad.status();
  lines.resize(lines.size() - 4);  // exactly the limit: read
  WriteFile(csv, lines);
  auto test = Create("test");
  ASSERT_TRUE(test.ok()) << test.status();
  EXPECT_EQ((*test)->num_examples(), uint64_t(1) << 20);
}

TEST_F(LibriSpeechTest, FillsStoredValuesAndPadding) {
  auto w = Create("test");
  ASSERT_TRUE(w.ok());
  Item it;
  ASSERT_TRUE(Fill(**w, ItemRef{7, 0, 1, 2, true}, &it).ok());
  // test-clean is subset 5: utterance 2 has 62 samples and 4 tokens.
  EXPECT_EQ(it.audio_length, 62);
  EXPECT_EQ(it.target_length, 4);
  EXPECT_EQ(it.weight, 1.0f);
  for (int i = 0; i < 62; ++i) {
    int16_t v;
    memcpy(&v, &it.audio[2 * i], 2);
    ASSERT_EQ(v, int16_t((i * 997 + 5 * 31 + 2) % 65536 - 32768)) << i;
  }
  for (size_t i = 124; i < it.audio.size(); ++i) ASSERT_EQ(it.audio[i], 0);
  EXPECT_EQ(it.targets[0], 8);
  EXPECT_EQ(it.targets[3], 2);
  for (int i = 4; i < 256; ++i) ASSERT_EQ(it.targets[i], 0);
  // The same item again, from another thread: the same bytes.
  Item again;
  std::thread t([&] {
    ASSERT_TRUE(Fill(**w, ItemRef{7, 0, 1, 2, true}, &again).ok());
  });
  t.join();
  EXPECT_EQ(again.audio, it.audio);
  EXPECT_EQ(again.targets, it.targets);
  // Padding: zeros, lengths 0, weight 0, whatever the slot held.
  Item pad;
  ASSERT_TRUE(Fill(**w, ItemRef{7, 0, 3, 0, false}, &pad).ok());
  EXPECT_EQ(pad.audio, std::vector<uint8_t>(640000, 0));
  EXPECT_EQ(pad.targets, std::vector<int32_t>(256, 0));
  EXPECT_EQ(pad.audio_length, 0);
  EXPECT_EQ(pad.target_length, 0);
  EXPECT_EQ(pad.weight, 0.0f);
}

TEST_F(LibriSpeechTest, DamagedFilesAreCountedAndNamed) {
  auto w = Create("test");
  ASSERT_TRUE(w.ok());
  const std::string audio =
      absl::StrCat(dir_.path(), "/test-clean/5-0_audio.npy");
  const std::string good = ReadFile(audio);
  WorkloadCounters counters;
  Item it;
  WriteFile(audio, good.substr(0, good.size() - 3));
  absl::Status st = Fill(**w, ItemRef{7, 0, 0, 0, true}, &it, &counters);
  EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(st.message().find("5-0_audio.npy at byte"), std::string::npos)
      << st;
  EXPECT_EQ(counters.decode_errors.load(), 1u);
  // A sample outside int16: its offset is the header (128 bytes) + 8.
  WriteFile(audio, Npy("<i8", "(2,)", Values<int64_t>({1, 40000})));
  st = Fill(**w, ItemRef{7, 0, 0, 0, true}, &it, &counters);
  EXPECT_NE(st.message().find("outside int16"), std::string::npos) << st;
  EXPECT_NE(st.message().find("at byte 136"), std::string::npos) << st;
  EXPECT_EQ(counters.decode_errors.load(), 2u);
  // Targets longer than 256, and of another dtype.
  WriteFile(audio, good);
  const std::string targets =
      absl::StrCat(dir_.path(), "/test-clean/5-0_targets.npy");
  WriteFile(targets,
            Npy("<i4", "(257,)", Values(std::vector<int32_t>(257, 1))));
  st = Fill(**w, ItemRef{7, 0, 0, 0, true}, &it, &counters);
  EXPECT_NE(st.message().find("5-0_targets.npy"), std::string::npos) << st;
  WriteFile(targets, Npy("<f4", "(1,)", Values<float>({1.0f})));
  st = Fill(**w, ItemRef{7, 0, 0, 0, true}, &it, &counters);
  EXPECT_NE(st.message().find("dtype '<f4'"), std::string::npos) << st;
  EXPECT_EQ(counters.decode_errors.load(), 4u);
  // A missing file: the read's error, naming it.
  ASSERT_EQ(unlink(audio.c_str()), 0);
  st = Fill(**w, ItemRef{7, 0, 0, 0, true}, &it, &counters);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.ToString().find("5-0_audio.npy"), std::string::npos) << st;
}

}  // namespace
}  // namespace batchd

// TFRecord framing, CRC32C and the tf.train.Example wire format.
#include "workloads/common/tfrecord.h"

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/crc32c.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testutil.h"
#include "workloads/common/tf_example.h"

namespace batchd {
namespace {

using ::testing::HasSubstr;
using testutil::ReadFile;
using testutil::WriteFile;

std::string TempPath(const std::string& name) {
  static const std::string dir = testutil::MakeTempDir("tfrecord");
  return dir + "/" + name;
}

TEST(Crc32c, MatchesKnownVectors) {
  EXPECT_EQ(Crc32c("123456789", 9), 0xE3069283u);
  EXPECT_EQ(Crc32c("", 0), 0u);
  // RFC 3720, appendix B.4.
  const std::string zeros(32, '\0'), ones(32, '\xff');
  EXPECT_EQ(Crc32c(zeros.data(), zeros.size()), 0x8A9136AAu);
  EXPECT_EQ(Crc32c(ones.data(), ones.size()), 0x62A8AB43u);
  std::string ascending(32, '\0');
  for (int i = 0; i < 32; ++i) ascending[i] = char(i);
  EXPECT_EQ(Crc32c(ascending.data(), ascending.size()), 0x46DD794Eu);
}

TEST(Crc32c, ExtendsAcrossChunksAndAlignments) {
  std::string s(1000, '\0');
  std::mt19937 rng(7);
  for (char& c : s) c = char(rng());
  const uint32_t whole = Crc32c(s.data(), s.size());
  for (size_t split : {0, 1, 3, 7, 8, 9, 500, 999, 1000}) {
    const uint32_t first = Crc32c(s.data(), split);
    EXPECT_EQ(Crc32c(s.data() + split, s.size() - split, first), whole)
        << split;
  }
}

TEST(TFRecord, RoundTripsRecords) {
  std::vector<std::string> records = {"", "a", std::string(100000, 'x'),
                                      std::string("\0\1\2", 3)};
  for (int i = 0; i < 50; ++i) records.push_back("record " + std::to_string(i));
  const std::string path = TempPath("round.tfrecord");
  ASSERT_TRUE(WriteTFRecordFile(path, records).ok());
  auto f = TFRecordFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status();
  ASSERT_EQ((*f)->size(), records.size());
  EXPECT_EQ((*f)->path(), path);
  for (size_t i = records.size(); i-- > 0;) {
    auto r = (*f)->Read(i);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(*r, records[i]);
  }
  EXPECT_EQ((*f)->Read(records.size()).status().code(),
            absl::StatusCode::kOutOfRange);
}

TEST(TFRecord, EmptyFileHasNoRecords) {
  const std::string path = TempPath("empty.tfrecord");
  WriteFile(path, "");
  auto f = TFRecordFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ((*f)->size(), 0u);
}

TEST(TFRecord, MatchesTensorFlowFraming) {
  // The bytes TensorFlow's TFRecordWriter writes for the one record "abc":
  // length 3, masked CRC32C of the length, the data, masked CRC32C of it.
  const std::string path = TempPath("abc.tfrecord");
  ASSERT_TRUE(WriteTFRecordFile(path, {"abc"}).ok());
  const std::string bytes = ReadFile(path);
  ASSERT_EQ(bytes.size(), 12u + 3 + 4);
  EXPECT_EQ(bytes.substr(0, 8), std::string("\x03\0\0\0\0\0\0\0", 8));
  auto le32 = [&](size_t at) {
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v |= uint32_t(uint8_t(bytes[at + i])) << 8 * i;
    return v;
  };
  const uint32_t crc = Crc32c("abc", 3);
  EXPECT_EQ(le32(15), ((crc >> 15) | (crc << 17)) + 0xa282ead8u);
  EXPECT_EQ(le32(8), MaskedCrc32c(bytes.data(), 8));
}

TEST(TFRecord, FlippedDataByteIsDataLossNamingFileAndOffset) {
  const std::string path = TempPath("flipped.tfrecord");
  ASSERT_TRUE(WriteTFRecordFile(path, {"first", "second", "third"}).ok());
  std::string bytes = ReadFile(path);
  // Record 1 starts after record 0 (12 + 5 + 4 bytes); flip its 3rd byte.
  const size_t record1 = 12 + 5 + 4;
  bytes[record1 + 12 + 2] ^= 0x20;
  WriteFile(path, bytes);
  auto f = TFRecordFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status();  // data CRCs are checked on Read
  EXPECT_TRUE((*f)->Read(0).ok());
  EXPECT_TRUE((*f)->Read(2).ok());
  absl::StatusOr<std::string> r = (*f)->Read(1);
  ASSERT_EQ(r.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(r.status().message(), HasSubstr(path));
  EXPECT_THAT(r.status().message(),
              HasSubstr("offset " + std::to_string(record1)));
  EXPECT_THAT(r.status().message(), HasSubstr("data CRC"));
}

TEST(TFRecord, FlippedLengthByteFailsOpen) {
  const std::string path = TempPath("badlength.tfrecord");
  ASSERT_TRUE(WriteTFRecordFile(path, {"first", "second"}).ok());
  std::string bytes = ReadFile(path);
  const size_t record1 = 12 + 5 + 4;
  bytes[record1] ^= 0x01;
  WriteFile(path, bytes);
  auto f = TFRecordFile::Open(path);
  ASSERT_EQ(f.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(f.status().message(), HasSubstr(path));
  EXPECT_THAT(f.status().message(), HasSubstr("length CRC"));
  EXPECT_THAT(f.status().message(),
              HasSubstr("offset " + std::to_string(record1)));
}

TEST(TFRecord, TruncatedFileFailsOpenNamingTheRecord) {
  const std::string full = TempPath("full.tfrecord");
  ASSERT_TRUE(WriteTFRecordFile(full, {"first", "second"}).ok());
  const std::string bytes = ReadFile(full);
  const size_t record1 = 12 + 5 + 4;
  // Cut inside the second record's data, its footer, and its header.
  for (size_t cut :
       {bytes.size() - 1, bytes.size() - 4, record1 + 12 + 2, record1 + 5}) {
    const std::string path = TempPath("truncated.tfrecord");
    WriteFile(path, bytes.substr(0, cut));
    auto f = TFRecordFile::Open(path);
    ASSERT_EQ(f.status().code(), absl::StatusCode::kDataLoss) << cut;
    EXPECT_THAT(f.status().message(), HasSubstr(path));
    EXPECT_THAT(f.status().message(), HasSubstr("truncated"));
    EXPECT_THAT(f.status().message(),
                HasSubstr("offset " + std::to_string(record1)));
  }
}

TEST(TFRecord, MissingFileIsNotFound) {
  auto f = TFRecordFile::Open(TempPath("does-not-exist.tfrecord"));
  EXPECT_EQ(f.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(f.status().message(), HasSubstr("does-not-exist.tfrecord"));
}

TEST(TFRecord, ConcurrentReadsAgree) {
  std::vector<std::string> records;
  for (int i = 0; i < 200; ++i)
    records.push_back(std::string(i * 7, 'a' + i % 26));
  const std::string path = TempPath("concurrent.tfrecord");
  ASSERT_TRUE(WriteTFRecordFile(path, records).ok());
  auto f = TFRecordFile::Open(path);
  ASSERT_TRUE(f.ok());
  const TFRecordFile& file = **f;
  std::vector<std::thread> threads;
  std::atomic<int> bad{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (size_t i = t; i < records.size(); i += 3) {
        auto r = file.Read(i);
        if (!r.ok() || *r != records[i]) ++bad;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);
}

// --- tf.train.Example ------------------------------------------------------

TEST(Example, ParsesHandEncodedBytes) {
  // features { feature { key: "a" value { bytes_list { value: "x" } } } }
  const std::string wire(
      "\x0a\x0c"  // Example.features, 12 bytes
      "\x0a\x0a"  // Features.feature map entry, 10 bytes
      "\x0a\x01"
      "a"         // key
      "\x12\x05"  // value: Feature, 5 bytes
      "\x0a\x03"  // bytes_list, 3 bytes
      "\x0a\x01"
      "x",  // value
      14);
  auto ex = ParseExample(wire);
  ASSERT_TRUE(ex.ok()) << ex.status();
  EXPECT_EQ(ex->bytes.at("a"), std::vector<std::string>{"x"});
  EXPECT_EQ(SerializeExample(*ex), wire);
}

TEST(Example, ParsesUnpackedAndPackedInt64AndSkipsFloats) {
  // feature { key: "n" value { int64_list { value: 1 value: -1 } } } (unpacked)
  std::string list = "\x08\x01\x08";
  list += std::string(9, '\xff') + "\x01";
  std::string feature = "\x1a" + std::string(1, char(list.size())) + list;
  std::string entry = std::string("\x0a\x01n\x12", 4) +
                      std::string(1, char(feature.size())) + feature;
  // feature { key: "f" value { float_list { value: [1.0] } } } (packed)
  std::string flist("\x0a\x04\x00\x00\x80\x3f", 6);
  std::string ffeature = "\x12" + std::string(1, char(flist.size())) + flist;
  std::string fentry = std::string(
                           "\x0a\x01"
                           "f"
                           "\x12",
                           4) +
                       std::string(1, char(ffeature.size())) + ffeature;
  std::string features = "\x0a" + std::string(1, char(entry.size())) + entry +
                         "\x0a" + std::string(1, char(fentry.size())) + fentry;
  std::string wire = "\x0a" + std::string(1, char(features.size())) + features;
  auto ex = ParseExample(wire);
  ASSERT_TRUE(ex.ok()) << ex.status();
  EXPECT_EQ(ex->int64s.at("n"), (std::vector<int64_t>{1, -1}));
  EXPECT_EQ(ex->int64s.count("f"), 0u);
  EXPECT_EQ(ex->bytes.count("f"), 0u);
}

TEST(Example, RoundTripsThroughSerialize) {
  ExampleFeatures f;
  f.bytes["de"] = {"Guten Morgen", ""};
  f.bytes["en"] = {"Good morning"};
  f.bytes["blob"] = {std::string("\0\xff\x80", 3)};
  f.int64s["label"] = {0, 1, -1, INT64_MAX, INT64_MIN, 300};
  f.int64s["empty"] = {};
  auto back = ParseExample(SerializeExample(f));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->bytes, f.bytes);
  EXPECT_EQ(back->int64s, f.int64s);
  EXPECT_EQ(ParseExample("")->bytes.size(), 0u);  // an empty Example is valid
}

TEST(Example, LastMapEntryWinsAndUnknownFieldsAreSkipped) {
  ExampleFeatures a, b;
  a.bytes["k"] = {"old"};
  b.int64s["k"] = {5};
  // Two Features messages are merged; "k" is then the int64 list.
  std::string wire = SerializeExample(a) + SerializeExample(b);
  // An unknown varint field (7) and fixed32 field (8) at the top level.
  wire += std::string("\x38\x96\x01\x45\x01\x02\x03\x04", 8);
  auto ex = ParseExample(wire);
  ASSERT_TRUE(ex.ok()) << ex.status();
  EXPECT_EQ(ex->bytes.count("k"), 0u);
  EXPECT_EQ(ex->int64s.at("k"), std::vector<int64_t>{5});
}

TEST(Example, MalformedBytesAreInvalidArgument) {
  ExampleFeatures f;
  f.bytes["de"] = {"Hallo Welt"};
  const std::string good = SerializeExample(f);
  for (size_t cut = 1; cut < good.size(); ++cut) {
    auto ex = ParseExample(good.substr(0, cut));
    EXPECT_EQ(ex.status().code(), absl::StatusCode::kInvalidArgument) << cut;
  }
  const std::vector<std::string> bad = {
      std::string("\x0a\xff", 2),  // length past the end
      std::string("\x0b", 1),      // group start
      std::string("\x00\x00", 2),  // field 0
      std::string(11, '\xff'),     // varint too long
      std::string("\x0a\x80\x80\x80\x80\x80\x80\x80\x80\x80\x7f", 11),
  };
  for (const std::string& b : bad) {
    auto ex = ParseExample(b);
    EXPECT_EQ(ex.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(ex.status().message(), HasSubstr("tf.train.Example"));
  }
}

// A value takes a byte or two of a record, and many times that once parsed
// (a std::string per bytes value, 8 bytes per int64, map nodes per entry):
// a record made of tiny values is refused as it is parsed, before it keeps
// more than kMaxExampleOverheadBytes; an Example of a million int64s (a large
// graph's) still parses.
TEST(Example, ValuesThatWouldKeepManyTimesTheirBytesAreRefused) {
  const auto refused = [](const ExampleFeatures& f, const char* what) {
    const std::string wire = SerializeExample(f);
    auto ex = ParseExample(wire);
    EXPECT_EQ(ex.status().code(), absl::StatusCode::kInvalidArgument) << what;
    EXPECT_THAT(ex.status().message(),
                HasSubstr(absl::StrCat("more than ", kMaxExampleOverheadBytes,
                                       " bytes beyond their own bytes")))
        << what;
  };
  // 2 MiB of empty bytes values: 32 MiB of std::strings.
  ExampleFeatures empty_strings;
  empty_strings.bytes["image"].resize(1 << 20);
  refused(empty_strings, "empty bytes values");
  // 3 MiB of one-byte int64s: 24 MiB of int64_t.
  ExampleFeatures small_ints;
  small_ints.int64s["label"].assign(3 << 20, 1);
  refused(small_ints, "packed int64s");
  // 2.4 MiB of distinct empty features: 160,000 entries' map nodes.
  ExampleFeatures entries;
  for (int i = 0; i < 160'000; ++i) entries.int64s[absl::StrCat(i)] = {};
  refused(entries, "feature entries");

  ExampleFeatures graph;
  graph.int64s["edge_index"].assign(1 << 20, 7);
  graph.floats["labels"].assign(128, 1.0f);
  auto ex = ParseExample(SerializeExample(graph));
  ASSERT_TRUE(ex.ok()) << ex.status();
  EXPECT_EQ(ex->int64s.at("edge_index").size(), size_t(1) << 20);
}

TEST(Example, RandomBytesNeverCrash) {
  std::mt19937_64 rng(42);
  ExampleFeatures f;
  f.bytes["de"] = {"ein kurzer Satz"};
  f.bytes["en"] = {"a short sentence"};
  f.int64s["n"] = {1, 2, 300};
  const std::string good = SerializeExample(f);
  int ok = 0;
  for (int i = 0; i < 400; ++i) {
    std::string s;
    if (i % 2 == 0) {
      s.resize(rng() % 64);
      for (char& c : s) c = char(rng());
    } else {
      // Mutations of a valid Example reach deeper into the parser.
      s = good;
      for (int m = 0; m < 1 + int(rng() % 4); ++m)
        s[rng() % s.size()] = char(rng());
      if (rng() % 3 == 0) s.resize(rng() % s.size());
    }
    auto ex = ParseExample(s);
    if (ex.ok()) ++ok;
  }
  EXPECT_GT(ok, 0);  // some mutations stay valid
}

}  // namespace
}  // namespace batchd

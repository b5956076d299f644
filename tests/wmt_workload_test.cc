// The wmt workload as the registry opens it: options and splits parsed and
// refused (workloads/wmt/wmt_options.h), missing and damaged files
// (workloads/wmt/wmt.cc, pair_source.h).
#include "tests/wmt_fixture.h"

namespace batchd {
namespace {

// The fixture, with HasSubstr, PackedRow and TokenPair.
using namespace wmt_test;  // NOLINT: the suites' shared fixture

class WmtWorkloadTest : public WmtFixture {};

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

}  // namespace
}  // namespace batchd

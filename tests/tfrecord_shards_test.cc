// TFRecordShards: a list of shards numbered as one record sequence.
#include "workloads/common/tfrecord_shards.h"

#include <stdlib.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testutil.h"

namespace batchd {
namespace {

using ::testing::HasSubstr;

std::string TempDir() {
  static const std::string dir = testutil::MakeTempDir("shards");
  return dir;
}

// Writes shards holding `counts[s]` records each, named "s<s>r<r>".
std::vector<std::string> WriteShards(const std::string& name,
                                     const std::vector<int>& counts) {
  std::vector<std::string> paths;
  for (size_t s = 0; s < counts.size(); ++s) {
    std::vector<std::string> records;
    for (int r = 0; r < counts[s]; ++r) {
      records.push_back("s" + std::to_string(s) + "r" + std::to_string(r));
    }
    paths.push_back(TempDir() + "/" + name + "-" + std::to_string(s));
    EXPECT_TRUE(WriteTFRecordFile(paths.back(), records).ok());
  }
  return paths;
}

TEST(TFRecordShards, NumbersRecordsAcrossShardsInTheOrderGiven) {
  const std::vector<std::string> paths = WriteShards("order", {2, 0, 3, 1});
  absl::StatusOr<TFRecordShards> shards = TFRecordShards::Open(paths, {});
  ASSERT_TRUE(shards.ok()) << shards.status();
  ASSERT_EQ(shards->size(), 6u);
  ASSERT_EQ(shards->shard_count(), 4u);
  const std::vector<std::string> want = {"s0r0", "s0r1", "s2r0",
                                         "s2r1", "s2r2", "s3r0"};
  const std::vector<std::pair<size_t, uint64_t>> where = {
      {0, 0}, {0, 1}, {2, 0}, {2, 1}, {2, 2}, {3, 0}};
  for (uint64_t i = 0; i < 6; ++i) {
    absl::StatusOr<std::string> record = shards->Read(i);
    ASSERT_TRUE(record.ok()) << record.status();
    EXPECT_EQ(*record, want[i]) << i;
    const TFRecordShards::Location at = shards->Locate(i);
    EXPECT_EQ(at.shard, where[i].first) << i;
    EXPECT_EQ(at.record, where[i].second) << i;
    EXPECT_EQ(shards->shard(at.shard).path(), paths[at.shard]);
  }
}

TEST(TFRecordShards, ReportsEachShardAsItIsIndexed) {
  const std::vector<std::string> paths = WriteShards("progress", {1, 2, 3});
  std::vector<std::pair<size_t, uint64_t>> calls;
  absl::StatusOr<TFRecordShards> shards =
      TFRecordShards::Open(paths, {}, [&](size_t n, uint64_t records) {
        calls.push_back({n, records});
      });
  ASSERT_TRUE(shards.ok()) << shards.status();
  EXPECT_EQ(calls,
            (std::vector<std::pair<size_t, uint64_t>>{{1, 1}, {2, 3}, {3, 6}}));
}

TEST(TFRecordShards, AnEmptyListIsAnEmptySet) {
  absl::StatusOr<TFRecordShards> shards = TFRecordShards::Open({}, {});
  ASSERT_TRUE(shards.ok()) << shards.status();
  EXPECT_EQ(shards->size(), 0u);
  EXPECT_EQ(shards->shard_count(), 0u);
}

TEST(TFRecordShards, AMissingShardFailsOpenNamingIt) {
  std::vector<std::string> paths = WriteShards("missing", {1});
  paths.push_back(TempDir() + "/missing-absent");
  absl::StatusOr<TFRecordShards> shards = TFRecordShards::Open(paths, {});
  ASSERT_FALSE(shards.ok());
  EXPECT_THAT(std::string(shards.status().message()),
              HasSubstr("missing-absent"));
}

// Each shard stays open (a descriptor) while the set lives, and the
// daemon's descriptors are every user's: a list of more shards than a set
// may hold (valid, empty ones) is refused before one is opened, however
// few descriptors are left.
TEST(TFRecordShards, MoreShardsThanASetMayHoldAreRefusedUnopened) {
  const std::vector<int> empty(kMaxTFRecordShards + 1, 0);
  const std::vector<std::string> paths = WriteShards("many", empty);
  rlimit was{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &was), 0);
  rlimit few = was;
  few.rlim_cur = std::min<rlim_t>(was.rlim_cur, 512);
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &few), 0);
  absl::StatusOr<TFRecordShards> shards = TFRecordShards::Open(paths, {});
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &was), 0);
  ASSERT_FALSE(shards.ok());
  EXPECT_EQ(shards.status().code(), absl::StatusCode::kInvalidArgument)
      << shards.status();
  EXPECT_THAT(std::string(shards.status().message()),
              HasSubstr(absl::StrCat("more than ", kMaxTFRecordShards,
                                     " TFRecord shards")));
  EXPECT_THAT(std::string(shards.status().message()), HasSubstr("many-0"));
  for (const std::string& path : paths) unlink(path.c_str());
}

}  // namespace
}  // namespace batchd

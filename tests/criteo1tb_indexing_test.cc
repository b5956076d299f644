// criteo1tb's indexing is its request's, and bounded (docs/security.md,
// "One uid's indexing takes at most its share"): the line count of the
// files an evaluation split needs stops with CANCELLED when the request
// that makes the stream goes mid-way, keeping the counts it made, and runs
// to its end when it stays; a day file over max_data_file_bytes is refused
// when it is opened, before any pass, naming the file, its size, the limit
// and the flag.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/work_context.h"
#include "gtest/gtest.h"
#include "storage/cache_dir.h"
#include "storage/data_file.h"
#include "tests/testutil.h"
#include "workloads/criteo1tb/criteo1tb.h"
#include "workloads/criteo1tb/criteo_blocks.h"

namespace batchd {
namespace {

using testutil::GoneAfter;
using testutil::TempDir;

// A sparse file of `bytes` (holes: nothing on disk).
void Sparse(const std::string& path, off_t bytes) {
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(fd, 0) << path;
  ASSERT_EQ(ftruncate(fd, bytes), 0);
  close(fd);
}

WorkloadConfig CriteoValidation(const std::string& dir) {
  WorkloadConfig c;
  c.data_path = dir;
  c.split = "validation";
  return c;
}

// Blocks of `dir`/day_23_19 whose lines `cache` holds.
uint64_t CountedBlocks(const std::string& dir,
                       const std::shared_ptr<const CacheDir>& cache) {
  absl::StatusOr<std::shared_ptr<const DataRoot>> root = DataRoot::Open(dir);
  EXPECT_TRUE(root.ok()) << root.status();
  if (!root.ok()) return 0;
  absl::StatusOr<std::shared_ptr<criteo::BlockTable>> table =
      criteo::BlockTable::Create(*root, {dir + "/day_23_19"}, uint64_t(1) << 20,
                                 65536);
  EXPECT_TRUE(table.ok()) << table.status();
  if (!table.ok()) return 0;
  (*table)->LoadCounts(*cache);
  uint64_t counted = 0;
  for (uint64_t b = 0; b < (*table)->num_blocks(); ++b) {
    counted += (*table)->KnownLines(b) != UINT32_MAX;
  }
  return counted;
}

TEST(IndexingCancel, CriteoCountingStopsWhenItsCallerGoes) {
  TempDir dir("cancel"), cache_dir("cancel-cache");
  // 256 blocks of 1 MiB to count, one by one.
  Sparse(dir.Path("day_23_19"), off_t(256) << 20);
  absl::StatusOr<std::shared_ptr<const CacheDir>> cache =
      CacheDir::Open(cache_dir.path());
  ASSERT_TRUE(cache.ok()) << cache.status();
  WorkloadConfig c = CriteoValidation(dir.path());
  c.cache = *cache;
  c.work = WorkContext{1234, GoneAfter(20)};
  absl::StatusOr<std::unique_ptr<Workload>> w =
      CreateWorkload(kCriteo1TbWorkload, c);
  ASSERT_EQ(w.status().code(), absl::StatusCode::kCancelled) << w.status();
  EXPECT_NE(w.status().message().find("the caller has gone"), std::string::npos)
      << w.status();
  // What it counted before it stopped is kept for the next open.
  const uint64_t kept = CountedBlocks(dir.path(), *cache);
  EXPECT_GT(kept, 0u);
  EXPECT_LT(kept, 256u);
  // A request that stays counts the file to its end (zeros: one line).
  c.work = WorkContext{1234, std::make_shared<Cancellation>()};
  w = CreateWorkload(kCriteo1TbWorkload, c);
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ((*w)->num_examples(), 1u);
  EXPECT_EQ(CountedBlocks(dir.path(), *cache), 256u);
}

TEST(IndexingCancel, AFileOverTheLimitIsRefusedBeforeAnyPass) {
  TempDir dir("cancel");
  Sparse(dir.Path("day_23_19"), (off_t(2) << 20) + 1);
  WorkloadConfig c = CriteoValidation(dir.path());
  c.max_data_file_bytes = uint64_t(2) << 20;
  // Cancelled at the first question: a pass would stop with CANCELLED, so
  // the size error says that none began.
  c.work = WorkContext{1234, GoneAfter(0)};
  absl::StatusOr<std::unique_ptr<Workload>> w =
      CreateWorkload(kCriteo1TbWorkload, c);
  ASSERT_EQ(w.status().code(), absl::StatusCode::kResourceExhausted)
      << w.status();
  EXPECT_NE(w.status().message().find(absl::StrCat(
                "day_23_19 is ", (uint64_t(2) << 20) + 1,
                " bytes, over the limit of ", uint64_t(2) << 20,
                " bytes of one data file (batchd --max-data-file-bytes)")),
            std::string::npos)
      << w.status();
  // At the limit: taken.
  Sparse(dir.Path("day_23_19"), off_t(2) << 20);
  c.work = WorkContext{};
  EXPECT_TRUE(CreateWorkload(kCriteo1TbWorkload, c).ok());
  // Every open through a data root is held to its limit.
  absl::StatusOr<std::shared_ptr<const DataRoot>> root =
      DataRoot::Open(dir.path(), ReadAccess(), uint64_t(1) << 20);
  ASSERT_TRUE(root.ok()) << root.status();
  EXPECT_EQ((*root)->OpenFile("day_23_19").status().code(),
            absl::StatusCode::kResourceExhausted);
}

}  // namespace
}  // namespace batchd

// Indexing is its request's, and bounded (docs/security.md, "One uid's
// indexing takes at most its share"): Criteo's line count, an ImageFolder
// listing and a TFRecord shard's scan stop with CANCELLED when the request
// that makes the stream goes mid-way (Criteo keeping the counts it made),
// and run to their end when it stays;
// a data file over max_data_file_bytes is refused when it is opened, before
// any pass, naming the file, its size, the limit and the flag.
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
#include "workloads/common/tfrecord.h"
#include "workloads/criteo1tb/criteo_blocks.h"
#include "workloads/imagenet/image_source.h"
#include "workloads/registry.h"

namespace batchd {
namespace {

using testutil::TempDir;

// A request whose caller goes once it has been asked `polls` times whether
// it is there (every check of a loop asks: no clock involved).
std::shared_ptr<Cancellation> GoneAfter(int polls) {
  auto asked = std::make_shared<std::atomic<int>>(0);
  return std::make_shared<Cancellation>(
      [asked, polls] { return ++*asked > polls; }, /*deadline_ns=*/0,
      /*poll_ns=*/0);
}

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
  absl::StatusOr<std::unique_ptr<Workload>> w = CreateWorkload("criteo1tb", c);
  ASSERT_EQ(w.status().code(), absl::StatusCode::kCancelled) << w.status();
  EXPECT_NE(w.status().message().find("the caller has gone"), std::string::npos)
      << w.status();
  // What it counted before it stopped is kept for the next open.
  const uint64_t kept = CountedBlocks(dir.path(), *cache);
  EXPECT_GT(kept, 0u);
  EXPECT_LT(kept, 256u);
  // A request that stays counts the file to its end (zeros: one line).
  c.work = WorkContext{1234, std::make_shared<Cancellation>()};
  w = CreateWorkload("criteo1tb", c);
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
  absl::StatusOr<std::unique_ptr<Workload>> w = CreateWorkload("criteo1tb", c);
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
  EXPECT_TRUE(CreateWorkload("criteo1tb", c).ok());
  // Every open through a data root is held to its limit.
  absl::StatusOr<std::shared_ptr<const DataRoot>> root =
      DataRoot::Open(dir.path(), ReadAccess(), uint64_t(1) << 20);
  ASSERT_TRUE(root.ok()) << root.status();
  EXPECT_EQ((*root)->OpenFile("day_23_19").status().code(),
            absl::StatusCode::kResourceExhausted);
}

TEST(IndexingCancel, AnImageFolderListingStopsWhenItsCallerGoes) {
  TempDir dir("cancel");
  for (int k = 0; k < 8; ++k) {
    const std::string cls = dir.Path(absl::StrCat("class", k));
    ASSERT_EQ(mkdir(cls.c_str(), 0755), 0);
    testutil::WriteFile(cls + "/a.JPEG", "not a photo");
  }
  ImageSourceOptions o;
  {
    WorkScope work(WorkContext{77, GoneAfter(0)});
    absl::StatusOr<std::unique_ptr<ImageSource>> listed =
        OpenImageFolder(dir.path(), o);
    EXPECT_EQ(listed.status().code(), absl::StatusCode::kCancelled)
        << listed.status();
  }
  absl::StatusOr<std::unique_ptr<ImageSource>> listed =
      OpenImageFolder(dir.path(), o);
  ASSERT_TRUE(listed.ok()) << listed.status();
  EXPECT_EQ((*listed)->size(), 8u);
}

TEST(IndexingCancel, ATFRecordScanStopsWhenItsCallerGoes) {
  TempDir dir("cancel");
  // 4 MiB of records: 64 buffers of headers to scan.
  std::vector<std::string> records(4096, std::string(1024, 'r'));
  const std::string path = dir.Path("shard.tfrecord");
  ASSERT_TRUE(WriteTFRecordFile(path, records).ok());
  {
    WorkScope work(WorkContext{78, GoneAfter(3)});
    absl::StatusOr<std::unique_ptr<TFRecordFile>> file =
        TFRecordFile::Open(path);
    EXPECT_EQ(file.status().code(), absl::StatusCode::kCancelled)
        << file.status();
    EXPECT_NE(file.status().message().find("indexing " + path),
              std::string::npos)
        << file.status();
  }
  absl::StatusOr<std::unique_ptr<TFRecordFile>> file = TFRecordFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ((*file)->size(), records.size());
}

}  // namespace
}  // namespace batchd

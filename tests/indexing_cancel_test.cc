// Indexing is its request's (docs/security.md, "One uid's indexing takes at
// most its share"): an ImageFolder listing and a TFRecord shard's scan stop
// with CANCELLED when the request that makes the stream goes mid-way, and
// run to their end when it stays. (A workload's own counting passes are
// tested in its own suite.)
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
#include "workloads/imagenet/image_source.h"

namespace batchd {
namespace {

using testutil::GoneAfter;
using testutil::TempDir;

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

// Tests of the persistent index cache of the image sources: ImageFolder
// listings and TFRecord offset indexes (storage/cache_dir.h).
// Every test compares against an uncached Open of the same files.
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "storage/cache_dir.h"
#include "storage/data_file.h"
#include "tests/testutil.h"
#include "workloads/common/tfrecord.h"
#include "workloads/imagenet/image_source.h"
#include "workloads/registry.h"

namespace batchd {
namespace {

using testutil::ReadFile;
using testutil::WriteFile;

// Short, so that tests wait little; the rule is the same as the default's.
constexpr int64_t kSettleNs = 50'000'000;

// What a source lists: (path, label) in order, and the classes.
struct Listing {
  std::vector<std::string> paths;
  std::vector<int64_t> labels;
  std::vector<std::string> classes;
  bool operator==(const Listing& o) const {
    return paths == o.paths && labels == o.labels && classes == o.classes;
  }
  bool operator!=(const Listing& o) const { return !(*this == o); }
};

Listing ListOf(const ImageSource& src) {
  Listing l;
  std::string bytes;
  for (uint64_t i = 0; i < src.size(); ++i) {
    int64_t label;
    l.paths.push_back(src.Describe(i));
    EXPECT_TRUE(src.Read(i, &bytes, &label).ok()) << src.Describe(i);
    l.labels.push_back(label);
  }
  l.classes = src.classes();
  return l;
}

class IndexCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = tmp_ + "/data";
    ASSERT_EQ(mkdir(root_.c_str(), 0755), 0);
    auto cache = CacheDir::Open(tmp_ + "/cache");
    ASSERT_TRUE(cache.ok()) << cache.status();
    cache_ = *cache;
    auto root = DataRoot::Open(root_);
    ASSERT_TRUE(root.ok()) << root.status();
    data_root_ = *root;
  }
  void Mkdir(const std::string& rel) {
    ASSERT_EQ(mkdir((root_ + "/" + rel).c_str(), 0755), 0) << rel;
  }
  void Touch(const std::string& rel) { WriteFile(root_ + "/" + rel, rel); }
  // Waits until every change made so far is older than kSettleNs.
  void Settle() { usleep(2 * kSettleNs / 1000); }

  // Classes in unsorted creation order, nested folders, a non-image, a
  // symlinked file and a symlinked folder (inside the data root).
  void MakeTree() {
    for (const char* d :
         {"train", "train/n02", "train/n01", "train/n01/sub", "train/n01/sub-x",
          "train/n03", "other", "other/dir"}) {
      Mkdir(d);
    }
    for (const char* f :
         {"train/n02/b.JPEG", "train/n02/a.jpeg", "train/n02/C.Jpg",
          "train/n01/z.JPEG", "train/n01/sub/a.JPEG", "train/n01/sub-x/a.png",
          "train/n03/x.JPEG", "train/n03/y.JPEG", "train/n02/notes.txt",
          "other/t.JPEG", "other/dir/d.JPEG"}) {
      Touch(f);
    }
    ASSERT_EQ(
        symlink("../../other/t.JPEG", (root_ + "/train/n03/link.JPEG").c_str()),
        0);
    ASSERT_EQ(symlink("../../other/dir", (root_ + "/train/n03/ld").c_str()), 0);
  }

  ImageSourceOptions Options(ImageIndexStats* stats, bool cached = true) {
    ImageSourceOptions o;
    o.root = data_root_;
    if (cached) o.cache = cache_;
    o.cache_settle_ns = kSettleNs;
    o.stats = stats;
    return o;
  }
  // The listing with the cache (stats into *stats) and without it.
  Listing Cached(ImageIndexStats* stats) {
    *stats = ImageIndexStats();
    auto src = OpenImageFolder(root_ + "/train", Options(stats));
    EXPECT_TRUE(src.ok()) << src.status();
    return src.ok() ? ListOf(**src) : Listing();
  }
  Listing Uncached() {
    ImageIndexStats stats;
    auto src = OpenImageFolder(root_ + "/train", Options(&stats, false));
    EXPECT_TRUE(src.ok()) << src.status();
    EXPECT_FALSE(stats.listing_from_cache || stats.listing_stored);
    return src.ok() ? ListOf(**src) : Listing();
  }
  std::string EntryPath(const std::string& kind) {
    // The only entry of that kind in the cache directory.
    std::string found;
    std::unique_ptr<FILE, int (*)(FILE*)> ls(
        popen(("ls " + tmp_ + "/cache").c_str(), "r"), pclose);
    char line[512];
    while (fgets(line, sizeof line, ls.get()) != nullptr) {
      std::string name(line);
      name.pop_back();
      if (name.rfind(kind + "-", 0) == 0 && name.size() > 6 &&
          name.substr(name.size() - 6) == ".entry") {
        EXPECT_TRUE(found.empty()) << "two entries of " << kind;
        found = tmp_ + "/cache/" + name;
      }
    }
    return found;
  }

  testutil::TempDir dir_{"index-cache"};
  const std::string tmp_ = dir_.path();
  std::string root_;
  std::shared_ptr<const CacheDir> cache_;
  std::shared_ptr<const DataRoot> data_root_;
};

TEST_F(IndexCacheTest, CachedListingEqualsTheUncachedListing) {
  MakeTree();
  Settle();
  const Listing want = Uncached();
  // The symlinked file and the symlinked folder are part of it.
  ASSERT_EQ(want.paths.size(), 10u);
  for (const char* linked : {"/train/n03/link.JPEG", "/train/n03/ld/d.JPEG"}) {
    EXPECT_NE(std::find(want.paths.begin(), want.paths.end(), root_ + linked),
              want.paths.end())
        << linked;
  }
  ImageIndexStats stats;
  EXPECT_EQ(Cached(&stats), want);
  EXPECT_FALSE(stats.listing_from_cache);
  EXPECT_TRUE(stats.listing_stored);
  EXPECT_EQ(Cached(&stats), want);
  EXPECT_TRUE(stats.listing_from_cache);
  EXPECT_FALSE(stats.listing_stored);
}

TEST_F(IndexCacheTest, AFileAddedRemovedOrRenamedInAnyFolderInvalidates) {
  MakeTree();
  Settle();
  ImageIndexStats stats;
  Cached(&stats);
  ASSERT_TRUE(stats.listing_stored);
  // Each change, in a class folder and in a nested folder, is seen.
  const std::vector<std::function<void()>> changes = {
      [&] { Touch("train/n02/new.JPEG"); },
      [&] { Touch("train/n01/sub/0.JPEG"); },
      [&] { ASSERT_EQ(unlink((root_ + "/train/n03/x.JPEG").c_str()), 0); },
      [&] {
        ASSERT_EQ(rename((root_ + "/train/n01/sub-x/a.png").c_str(),
                         (root_ + "/train/n01/sub-x/b.png").c_str()),
                  0);
      },
      [&] { Mkdir("train/n02/deeper"); },
      [&] { Touch("train/n02/deeper/d.JPEG"); },
  };
  for (size_t i = 0; i < changes.size(); ++i) {
    changes[i]();
    Settle();
    const Listing want = Uncached();
    EXPECT_EQ(Cached(&stats), want) << "change " << i;
    EXPECT_FALSE(stats.listing_from_cache) << "change " << i;
    EXPECT_TRUE(stats.listing_stored) << "change " << i;
    EXPECT_EQ(Cached(&stats), want) << "change " << i;
    EXPECT_TRUE(stats.listing_from_cache) << "change " << i;
  }
}

TEST_F(IndexCacheTest, AClassFolderAddedInvalidates) {
  MakeTree();
  Settle();
  ImageIndexStats stats;
  const Listing before = Cached(&stats);
  ASSERT_TRUE(stats.listing_stored);
  Mkdir("train/n00");
  Touch("train/n00/first.JPEG");
  Settle();
  const Listing want = Uncached();
  ASSERT_NE(want, before);
  EXPECT_EQ(want.classes.front(), "n00");
  EXPECT_EQ(Cached(&stats), want);
  EXPECT_FALSE(stats.listing_from_cache);
}

TEST_F(IndexCacheTest, ALinkedFileTurnedIntoAFolderInvalidates) {
  // No walked folder changes: only the link's target does.
  MakeTree();
  Settle();
  ImageIndexStats stats;
  Cached(&stats);
  ASSERT_TRUE(stats.listing_stored);
  ASSERT_EQ(unlink((root_ + "/other/t.JPEG").c_str()), 0);
  Mkdir("other/t.JPEG");
  Touch("other/t.JPEG/inside.JPEG");
  Settle();
  const Listing want = Uncached();
  ASSERT_NE(std::find(want.paths.begin(), want.paths.end(),
                      root_ + "/train/n03/link.JPEG/inside.JPEG"),
            want.paths.end());
  EXPECT_EQ(Cached(&stats), want);
  EXPECT_FALSE(stats.listing_from_cache);
}

TEST_F(IndexCacheTest, AFreshChangeIsListedButNotStored) {
  MakeTree();
  ImageIndexStats stats;
  ImageSourceOptions o = Options(&stats);
  o.cache_settle_ns = int64_t(3600) * 1000000000;  // an hour: all is fresh
  auto src = OpenImageFolder(root_ + "/train", o);
  ASSERT_TRUE(src.ok()) << src.status();
  EXPECT_EQ(ListOf(**src), Uncached());
  EXPECT_FALSE(stats.listing_stored);
  EXPECT_EQ(EntryPath("imagefolder"), "");
}

TEST_F(IndexCacheTest, ACorruptListingEntryIsRebuiltWithAWarning) {
  MakeTree();
  Settle();
  ImageIndexStats stats;
  const Listing want = Cached(&stats);
  ASSERT_TRUE(stats.listing_stored);
  const std::string entry = EntryPath("imagefolder");
  ASSERT_NE(entry, "");
  for (const char* how : {"flip", "truncate"}) {
    std::string data = ReadFile(entry);
    if (std::string(how) == "flip") {
      data[data.size() / 2] ^= 0x01;
    } else {
      data.resize(data.size() / 2);
    }
    WriteFile(entry, data);
    testing::internal::CaptureStderr();
    EXPECT_EQ(Cached(&stats), want) << how;
    const std::string log = testing::internal::GetCapturedStderr();
    EXPECT_NE(log.find("cache_corrupt"), std::string::npos) << how << log;
    EXPECT_FALSE(stats.listing_from_cache) << how;
    EXPECT_TRUE(stats.listing_stored) << how;
    EXPECT_EQ(Cached(&stats), want) << how;
    EXPECT_TRUE(stats.listing_from_cache) << how;
  }
}

TEST_F(IndexCacheTest, TheImageNetWorkloadUsesTheDaemonsCache) {
  MakeTree();
  testutil::WriteTfdsShards(root_, "imagenet2012", "validation",
                            {{testutil::ImageExample("not decoded here", 0)},
                             {testutil::ImageExample("not decoded here", 1)}});
  // The workload's sources keep the default settling time (2 s).
  usleep(2'100'000);
  WorkloadConfig c;
  c.data_path = data_root_->path();
  c.data_root = data_root_->path();
  c.seed = 1;
  c.options = {{"progress", "1"}};
  c.cache = cache_;
  for (const char* split : {"train", "validation"}) {
    c.split = split;
    for (int open = 0; open < 2; ++open) {
      testing::internal::CaptureStderr();
      auto w = CreateWorkload("imagenet", c);
      const std::string log = testing::internal::GetCapturedStderr();
      ASSERT_TRUE(w.ok()) << w.status();
      EXPECT_EQ((*w)->num_examples(), std::string(split) == "train" ? 10u : 2u);
      const bool cached =
          std::string(split) == "train"
              ? log.find("from the cache") != std::string::npos
              : log.find("2 from the cache") != std::string::npos;
      EXPECT_EQ(cached, open == 1) << split << " open " << open << ": " << log;
    }
  }
  EXPECT_NE(EntryPath("imagefolder"), "");
}

// --- TFRecord offsets --------------------------------------------------------

std::vector<std::string> Records(int n, int seed) {
  std::vector<std::string> r;
  for (int i = 0; i < n; ++i) {
    // Lengths from 0 to a few KB, so that records straddle scan buffers.
    r.push_back(std::string(size_t((i * 7919 + seed * 104729) % 5000),
                            char('a' + (i + seed) % 26)));
  }
  return r;
}

class TFRecordCacheTest : public IndexCacheTest {
 protected:
  std::string Shard(int s) {
    return root_ + "/imagenet2012-train.tfrecord-0000" + std::to_string(s) +
           "-of-00003";
  }
  void WriteShards(int seed) {
    for (int s = 0; s < 3; ++s) {
      ASSERT_TRUE(
          WriteTFRecordFile(Shard(s), Records(40 + 30 * s, seed + s)).ok());
    }
  }
  TFRecordOptions Options(bool cached) {
    TFRecordOptions o;
    o.root = data_root_;
    if (cached) o.cache = cache_;
    o.cache_settle_ns = kSettleNs;
    return o;
  }
  // Every record of shard s, through a cached (or not) Open.
  std::vector<std::string> ReadShard(int s, bool cached, bool* from_cache,
                                     bool* stored = nullptr) {
    auto f = TFRecordFile::Open(Shard(s), Options(cached));
    EXPECT_TRUE(f.ok()) << f.status();
    if (!f.ok()) return {};
    *from_cache = (*f)->index_from_cache();
    if (stored != nullptr) *stored = (*f)->index_stored();
    std::vector<std::string> out;
    for (size_t i = 0; i < (*f)->size(); ++i) {
      auto r = (*f)->Read(i);
      EXPECT_TRUE(r.ok()) << r.status();
      out.push_back(r.ok() ? *r : "");
    }
    return out;
  }
};

TEST_F(TFRecordCacheTest, CachedOffsetsEqualAFreshScan) {
  WriteShards(1);
  Settle();
  for (int s = 0; s < 3; ++s) {
    bool from_cache, stored;
    const std::vector<std::string> want = ReadShard(s, false, &from_cache);
    ASSERT_EQ(want, Records(40 + 30 * s, 1 + s));
    EXPECT_EQ(ReadShard(s, true, &from_cache, &stored), want);
    EXPECT_FALSE(from_cache);
    EXPECT_TRUE(stored);
    EXPECT_EQ(ReadShard(s, true, &from_cache, &stored), want);
    EXPECT_TRUE(from_cache);
    EXPECT_FALSE(stored);
  }
}

TEST_F(TFRecordCacheTest, ImageSourceCountsShardsFromTheCache) {
  WriteShards(1);
  Settle();
  const std::vector<std::string> files = {Shard(0), Shard(1), Shard(2)};
  ImageIndexStats stats;
  ImageSourceOptions o;
  o.root = data_root_;
  o.cache = cache_;
  o.cache_settle_ns = kSettleNs;
  o.stats = &stats;
  ASSERT_TRUE(OpenTFRecordImages(files, o).ok());
  EXPECT_EQ(stats.shards_scanned, 3u);
  EXPECT_EQ(stats.shards_stored, 3u);
  stats = ImageIndexStats();
  auto src = OpenTFRecordImages(files, o);
  ASSERT_TRUE(src.ok());
  EXPECT_EQ(stats.shards_from_cache, 3u);
  EXPECT_EQ(stats.shards_scanned, 0u);
  EXPECT_EQ((*src)->size(), 40u + 70u + 100u);
}

TEST_F(TFRecordCacheTest, ARewrittenShardInvalidates) {
  WriteShards(1);
  Settle();
  bool from_cache;
  ReadShard(1, true, &from_cache);
  ReadShard(1, true, &from_cache);
  ASSERT_TRUE(from_cache);
  // Rewritten in place (same inode), then replaced by a new file of the
  // same size under the same name: both are seen.
  ASSERT_TRUE(WriteTFRecordFile(Shard(1), Records(55, 9)).ok());
  Settle();
  EXPECT_EQ(ReadShard(1, true, &from_cache), Records(55, 9));
  EXPECT_FALSE(from_cache);
  EXPECT_EQ(ReadShard(1, true, &from_cache), Records(55, 9));
  EXPECT_TRUE(from_cache);
  std::vector<std::string> same_size = Records(55, 9);
  std::swap(same_size[0], same_size[1]);  // other offsets, same file size
  const std::string tmp = root_ + "/shard.tmp";
  ASSERT_TRUE(WriteTFRecordFile(tmp, same_size).ok());
  ASSERT_EQ(rename(tmp.c_str(), Shard(1).c_str()), 0);
  Settle();
  EXPECT_EQ(ReadShard(1, true, &from_cache), same_size);
  EXPECT_FALSE(from_cache);
}

TEST_F(TFRecordCacheTest, ACorruptOffsetEntryIsRebuiltWithAWarning) {
  WriteShards(1);
  Settle();
  bool from_cache, stored;
  const std::vector<std::string> want =
      ReadShard(0, true, &from_cache, &stored);
  ASSERT_TRUE(stored);
  const std::string entry = EntryPath("tfrecord-offsets");
  ASSERT_NE(entry, "");
  std::string data = ReadFile(entry);
  data[data.size() - 10] ^= 0x40;
  WriteFile(entry, data);
  testing::internal::CaptureStderr();
  EXPECT_EQ(ReadShard(0, true, &from_cache, &stored), want);
  const std::string log = testing::internal::GetCapturedStderr();
  EXPECT_NE(log.find("cache_corrupt"), std::string::npos) << log;
  EXPECT_FALSE(from_cache);
  EXPECT_TRUE(stored);
  EXPECT_EQ(ReadShard(0, true, &from_cache), want);
  EXPECT_TRUE(from_cache);
}

}  // namespace
}  // namespace batchd

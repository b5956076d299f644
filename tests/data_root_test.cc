// Hostile data trees: symlinks out of the data root, FIFOs named like
// images or shards, sparse giants, over-long records and lines. Each is a
// real file (link, FIFO, sparse file) read by the real sources; cases that
// used to hang or allocate a GiB run in a forked child with an alarm and
// their own memory high-water mark.
#include <errno.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/fsuid.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "base/crc32c.h"
#include "storage/data_file.h"
#include "storage/read_access.h"
#include "tests/test_images.h"
#include "tests/testutil.h"
#include "workloads/common/tfrecord.h"
#include "workloads/registry.h"
#include "workloads/wmt/pair_source.h"

namespace batchd {
namespace {

using testutil::MakeTempDir;
using testutil::WriteFile;

std::string Jpeg(unsigned seed) {
  return testing_images::EncodeJpeg(testing_images::Picture(40, 30, 3, seed),
                                    40, 30, 3);
}

// A sparse file of `bytes` (no block written).
void MakeSparse(const std::string& path, uint64_t bytes) {
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, off_t(bytes)), 0);
  close(fd);
}

// A field of /proc/self/status in KiB (VmHWM, VmRSS).
uint64_t StatusKiB(const char* field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field, 0) == 0)
      return strtoull(line.c_str() + strlen(field) + 1, nullptr, 10);
  }
  return 0;
}

// ---------------------------------------------------------------- DataRoot

class DataRootTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    DataRoot::DisableOpenat2ForTesting(GetParam());
    root_ = MakeTempDir("root");
    outside_ = MakeTempDir("root");
    WriteFile(outside_ + "/secret", "root's secret");
    mkdir((root_ + "/a").c_str(), 0755);
    mkdir((root_ + "/b").c_str(), 0755);
    WriteFile(root_ + "/b/file", "inside");
    symlink("../b/file", (root_ + "/a/rel").c_str());
    symlink((root_ + "/b/file").c_str(), (root_ + "/a/abs").c_str());
    symlink((outside_ + "/secret").c_str(), (root_ + "/a/out").c_str());
    symlink(
        ("../../../../../../../../" + outside_.substr(1) + "/secret").c_str(),
        (root_ + "/a/dots").c_str());
    symlink(outside_.c_str(), (root_ + "/a/outdir").c_str());
    symlink("/proc/self/root/etc/hostname", (root_ + "/a/magic").c_str());
    mkfifo((root_ + "/a/fifo").c_str(), 0644);
  }
  void TearDown() override { DataRoot::DisableOpenat2ForTesting(false); }

  absl::Status Read(const std::string& path, std::string* out) {
    absl::StatusOr<std::shared_ptr<const DataRoot>> root =
        DataRoot::Open(root_);
    if (!root.ok()) return root.status();
    return ReadFileCapped(**root, path, 1 << 20, out);
  }

  std::string root_, outside_;
};

TEST_P(DataRootTest, LinksInsideTheRootAreFollowed) {
  for (const char* p : {"a/rel", "a/abs", "b/file"}) {
    std::string bytes;
    ASSERT_TRUE(Read(p, &bytes).ok()) << p << ": " << Read(p, &bytes);
    EXPECT_EQ(bytes, "inside") << p;
    ASSERT_TRUE(Read(root_ + "/" + p, &bytes).ok()) << p;
    EXPECT_EQ(bytes, "inside") << p;
  }
}

TEST_P(DataRootTest, LinksOutOfTheRootAreRefused) {
  for (const char* p :
       {"a/out", "a/dots", "a/outdir/secret", "../x", "a/magic"}) {
    std::string bytes;
    absl::Status s = Read(root_ + "/" + p, &bytes);
    EXPECT_FALSE(s.ok()) << p << " was read: " << bytes;
    EXPECT_NE(bytes, "root's secret") << p;
    if (std::string(p) != "../x" && std::string(p) != "a/magic") {
      EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied)
          << p << ": " << s;
      EXPECT_NE(s.message().find("outside the data root"), std::string::npos)
          << s;
    }
  }
  std::string bytes;
  EXPECT_EQ(Read(outside_ + "/secret", &bytes).code(),
            absl::StatusCode::kPermissionDenied);
  absl::StatusOr<std::shared_ptr<const DataRoot>> root = DataRoot::Open(root_);
  ASSERT_TRUE(root.ok());
  EXPECT_FALSE((*root)->OpenDirectory(root_ + "/a/outdir").ok());
}

TEST_P(DataRootTest, FifosAndDirectoriesAreNotRegularFiles) {
  EXPECT_EQ(testutil::ExitCodeInChild(
                [&] {
                  std::string bytes;
                  absl::Status s = Read("a/fifo", &bytes);
                  return s.code() == absl::StatusCode::kFailedPrecondition &&
                                 s.message().find("FIFO") != std::string::npos
                             ? 0
                             : 1;
                },
                10),
            0);
  std::string bytes;
  EXPECT_EQ(Read("b", &bytes).code(), absl::StatusCode::kFailedPrecondition);
}

TEST_P(DataRootTest, SizeCapRefusesWithoutReading) {
  MakeSparse(root_ + "/b/sparse", uint64_t(1) << 30);
  std::string bytes;
  absl::Status s = Read("b/sparse", &bytes);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_NE(s.message().find("over the limit"), std::string::npos) << s;
  EXPECT_LT(bytes.capacity(), size_t(1) << 20);
}

INSTANTIATE_TEST_SUITE_P(WithAndWithoutOpenat2, DataRootTest,
                         ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& p) {
                           return p.param ? "Fallback" : "Openat2";
                         });

// ------------------------------------------------- the reader's permissions

// Uids and a group of no user: setfsuid accepts any number.
constexpr uint32_t kOwnerUid = 47421;
constexpr uint32_t kOtherUid = 47422;
constexpr uint32_t kGroup = 47420;

class ReadAccessTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root to read as other uids";
    DataRoot::DisableOpenat2ForTesting(GetParam());
    root_ = MakeTempDir("access");
    chmod(root_.c_str(), 0755);
    // private/ is the owner's 0700; open/ the owner's 0755 with a 0600
    // file and a 0644 one; grp/ is kGroup's 0750; links/ holds links into
    // private/.
    for (const char* d : {"private", "open", "grp", "links"}) {
      mkdir((root_ + "/" + d).c_str(), 0755);
    }
    WriteFile(root_ + "/private/file", "private");
    WriteFile(root_ + "/open/secret", "secret");
    WriteFile(root_ + "/open/public", "public");
    WriteFile(root_ + "/grp/file", "group");
    symlink("../private/file", (root_ + "/links/rel").c_str());
    symlink((root_ + "/private/file").c_str(), (root_ + "/links/abs").c_str());
    for (const char* p : {"private", "private/file", "open", "open/secret",
                          "open/public", "links", "links/rel", "links/abs"}) {
      lchown((root_ + "/" + p).c_str(), kOwnerUid, kOwnerUid);
    }
    chmod((root_ + "/private").c_str(), 0700);
    chmod((root_ + "/private/file").c_str(), 0644);
    chmod((root_ + "/open/secret").c_str(), 0600);
    chmod((root_ + "/open/public").c_str(), 0644);
    chown((root_ + "/grp").c_str(), 0, kGroup);
    chown((root_ + "/grp/file").c_str(), 0, kGroup);
    chmod((root_ + "/grp").c_str(), 0750);
    chmod((root_ + "/grp/file").c_str(), 0640);
  }
  void TearDown() override { DataRoot::DisableOpenat2ForTesting(false); }

  absl::Status Read(const ReadAccess& access, const std::string& path,
                    std::string* out = nullptr) {
    absl::StatusOr<std::shared_ptr<const DataRoot>> root =
        DataRoot::Open(root_, access);
    if (!root.ok()) return root.status();
    std::string bytes;
    return ReadFileCapped(**root, path, 1 << 20, out ? out : &bytes);
  }

  std::string root_;
};

TEST_P(ReadAccessTest, AnotherUidReadsOnlyWhatItMay) {
  const ReadAccess other = ReadAccess::User(kOtherUid, kOtherUid, {});
  const ReadAccess owner = ReadAccess::User(kOwnerUid, kOwnerUid, {});
  for (const char* p :
       {"private/file", "open/secret", "links/rel", "links/abs", "grp/file"}) {
    std::string bytes;
    const absl::Status s = Read(other, p, &bytes);
    EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << p << ": " << s;
    EXPECT_TRUE(bytes.empty()) << p << " was read: " << bytes;
    // One message for missing and unreachable, the path aside.
    const absl::Status missing = Read(other, "open/none");
    std::string text(s.message()), expected(missing.message());
    text.replace(text.find(p), strlen(p), "PATH");
    expected.replace(expected.find("open/none"), 9, "PATH");
    EXPECT_EQ(text, expected);
  }
  std::string bytes;
  EXPECT_TRUE(Read(other, "open/public", &bytes).ok());
  EXPECT_EQ(bytes, "public");
  // A member of the group reads grp/; the owner reads its own files,
  // through its links too.
  EXPECT_TRUE(
      Read(ReadAccess::User(kOtherUid, kOtherUid, {kGroup}), "grp/file").ok());
  for (const char* p :
       {"private/file", "open/secret", "links/rel", "links/abs"}) {
    EXPECT_TRUE(Read(owner, p).ok()) << p << ": " << Read(owner, p);
  }
  // The thread reads as the daemon again afterwards.
  EXPECT_TRUE(Read(ReadAccess::Daemon(), "open/secret").ok());
  EXPECT_EQ(setfsuid(uid_t(-1)), 0);
}

TEST_P(ReadAccessTest, AnyLocalUserReadsOnlyOtherBits) {
  const ReadAccess world = ReadAccess::World();
  EXPECT_TRUE(Read(world, "open/public").ok());
  for (const char* p :
       {"open/secret", "private/file", "grp/file", "links/rel"}) {
    const absl::Status s = Read(world, p);
    EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << p << ": " << s;
    EXPECT_NE(s.message().find("not readable by any local user"),
              std::string::npos)
        << s;
  }
}

TEST_P(ReadAccessTest, ResolveNeedsSearchOnADirectoryAndReadOnAFile) {
  absl::StatusOr<std::shared_ptr<const DataRoot>> root =
      DataRoot::Open(root_, ReadAccess::User(kOtherUid, kOtherUid, {}));
  ASSERT_TRUE(root.ok());
  EXPECT_TRUE((*root)->Resolve("open").ok());
  EXPECT_TRUE((*root)->Resolve("open/public").ok());
  for (const char* p :
       {"private", "private/file", "open/secret", "grp", "links/rel", "none"}) {
    EXPECT_EQ((*root)->Resolve(p).status().code(), absl::StatusCode::kNotFound)
        << p;
  }
}

TEST(ReadAccessBits, AclEntriesGrantAndTheMaskLimits) {
  const std::string dir = MakeTempDir("acl");
  const std::string file = dir + "/f";
  WriteFile(file, "x");
  chown(file.c_str(), kOwnerUid, kOwnerUid);
  chmod(file.c_str(), 0600);
  // user::rw-, user:kOtherUid:r--, group::---, group:kGroup:r--,
  // mask::r--, other::---
  const uint16_t entries[][2] = {{0x01, 6}, {0x02, 4}, {0x04, 0},
                                 {0x08, 4}, {0x10, 4}, {0x20, 0}};
  const uint32_t ids[] = {uint32_t(-1), kOtherUid,    uint32_t(-1),
                          kGroup,       uint32_t(-1), uint32_t(-1)};
  std::string raw(4, '\0');
  raw[0] = 2;
  for (int i = 0; i < 6; ++i) {
    raw.append(reinterpret_cast<const char*>(entries[i]), 4);
    raw.append(reinterpret_cast<const char*>(&ids[i]), 4);
  }
  if (setxattr(file.c_str(), "system.posix_acl_access", raw.data(), raw.size(),
               0) != 0) {
    GTEST_SKIP() << "no POSIX ACLs here: " << strerror(errno);
  }
  struct stat st;
  ASSERT_EQ(stat(file.c_str(), &st), 0);
  auto may = [&](const ReadAccess& a) {
    return a.Permits(file, st, ReadAccess::kRead);
  };
  EXPECT_TRUE(may(ReadAccess::User(kOtherUid, kOtherUid, {})));
  EXPECT_TRUE(may(ReadAccess::User(kOtherUid + 1, kOtherUid + 1, {kGroup})));
  EXPECT_FALSE(may(ReadAccess::User(kOtherUid + 1, kOtherUid + 1, {})));
  EXPECT_FALSE(may(ReadAccess::World()));
  EXPECT_TRUE(may(ReadAccess::User(kOwnerUid, kOwnerUid, {})));
}

INSTANTIATE_TEST_SUITE_P(WithAndWithoutOpenat2, ReadAccessTest,
                         ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& p) {
                           return p.param ? "Fallback" : "Openat2";
                         });

// ----------------------------------------------------- imagenet workload

class ImageTreeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = MakeTempDir("root");
    outside_ = MakeTempDir("root");
    const std::string cls = root_ + "/imagenet/train/n01";
    mkdir((root_ + "/imagenet").c_str(), 0755);
    mkdir((root_ + "/imagenet/train").c_str(), 0755);
    mkdir(cls.c_str(), 0755);
    mkdir((root_ + "/shared").c_str(), 0755);
    WriteFile(cls + "/good.JPEG", Jpeg(1));
    // A valid JPEG outside the root (a stand-in for /etc/shadow): the old
    // reader decoded it as if it were data.
    WriteFile(outside_ + "/secret.JPEG", Jpeg(2));
    symlink((outside_ + "/secret.JPEG").c_str(), (cls + "/out.JPEG").c_str());
    // Links inside the root, out of the data set's own directory: allowed.
    WriteFile(root_ + "/shared/x.JPEG", Jpeg(3));
    symlink((root_ + "/shared/x.JPEG").c_str(), (cls + "/abs.JPEG").c_str());
    symlink("../../../shared/x.JPEG", (cls + "/rel.JPEG").c_str());
    mkfifo((cls + "/fifo.JPEG").c_str(), 0644);
    MakeSparse(cls + "/sparse.JPEG", uint64_t(1) << 30);
    // Under the cap but big: a JPEG padded to 40 MiB.
    WriteFile(cls + "/padded.JPEG", Jpeg(4) + std::string(40 << 20, '\0'));
  }

  absl::StatusOr<std::unique_ptr<Workload>> Make(const std::string& on_error) {
    WorkloadConfig c;
    c.data_path = root_ + "/imagenet";
    c.data_root = root_;
    c.split = "train";
    c.seed = 3;
    c.options = {{"progress", "0"},
                 {"image_size", "16"},
                 {"resize_size", "16"},
                 {"on_decode_error", on_error}};
    return CreateWorkload("imagenet", c);
  }

  // Fills example `name` of class n01; sorted order of the class folder.
  absl::Status Fill(const Workload& w, const std::string& name,
                    WorkloadCounters* counters) {
    static const std::vector<std::string> kOrder = {
        "abs.JPEG",    "fifo.JPEG", "good.JPEG",  "out.JPEG",
        "padded.JPEG", "rel.JPEG",  "sparse.JPEG"};
    const uint64_t id = uint64_t(std::find(kOrder.begin(), kOrder.end(), name) -
                                 kOrder.begin());
    ItemRef ex;
    ex.seed = 3;
    ex.position = id;
    ex.id = id;
    testutil::RowBuffers out(w.tensors());
    return w.FillItem(ex, out.out(), counters);
  }

  // Runs `fn` on a fresh workload (decode errors: `on_error`) and counters
  // of its own in a forked child killed after `seconds`; the child's exit
  // code: fn's, 2 when the workload cannot be made, 128 + a signal.
  int FillsInChild(
      unsigned seconds, const std::string& on_error,
      const std::function<int(const Workload&, WorkloadCounters&)>& fn) {
    return testutil::ExitCodeInChild(
        [&] {
          auto w = Make(on_error);
          if (!w.ok()) return 2;
          WorkloadCounters counters;
          return fn(**w, counters);
        },
        seconds);
  }

  std::string root_, outside_;
};

TEST_F(ImageTreeTest, LinkOutOfTheRootIsRefusedAndCounted) {
  absl::StatusOr<std::unique_ptr<Workload>> w = Make("fail");
  ASSERT_TRUE(w.ok()) << w.status();
  ASSERT_EQ((*w)->num_examples(), 7u);
  WorkloadCounters counters;
  for (const char* ok : {"good.JPEG", "abs.JPEG", "rel.JPEG"}) {
    EXPECT_TRUE(Fill(**w, ok, &counters).ok()) << ok;
  }
  EXPECT_EQ(counters.decode_errors.load(), 0u);
  absl::Status s = Fill(**w, "out.JPEG", &counters);
  EXPECT_FALSE(s.ok()) << "a file outside the data root was decoded";
  EXPECT_NE(s.message().find("outside the data root"), std::string::npos) << s;
  EXPECT_EQ(counters.decode_errors.load(), 1u);
}

TEST_F(ImageTreeTest, FifoNamedJpegDoesNotBlockAndIsADecodeError) {
  EXPECT_EQ(FillsInChild(20, "substitute",
                         [&](const Workload& w, WorkloadCounters& counters) {
                           // The stream goes on: a substitute fills the slot.
                           if (!Fill(w, "fifo.JPEG", &counters).ok()) return 3;
                           return counters.decode_errors.load() >= 1 ? 0 : 4;
                         }),
            0)
      << "128 + 14 = 142 means the worker blocked on the FIFO";
}

TEST_F(ImageTreeTest, SparseGiantIsCappedWithoutReadingIt) {
  EXPECT_EQ(FillsInChild(60, "fail",
                         [&](const Workload& w, WorkloadCounters& counters) {
                           absl::Status s = Fill(w, "sparse.JPEG", &counters);
                           if (s.ok() || s.message().find("over the limit") ==
                                             std::string::npos) {
                             return 3;
                           }
                           if (counters.decode_errors.load() != 1) return 4;
                           // Never more than a fraction of the GiB resident.
                           return StatusKiB("VmHWM:") < 256 * 1024 ? 0 : 5;
                         }),
            0);
}

TEST_F(ImageTreeTest, WorkerDoesNotKeepABufferOfTheLargestFile) {
#if defined(BATCHD_TEST_ASAN)
  // AddressSanitizer quarantines freed memory, so RSS cannot show a release.
  GTEST_SKIP() << "RSS is not observable under AddressSanitizer";
#endif
  EXPECT_EQ(FillsInChild(60, "fail",
                         [&](const Workload& w, WorkloadCounters& counters) {
                           if (!Fill(w, "good.JPEG", &counters).ok()) return 3;
                           const uint64_t before = StatusKiB("VmRSS:");
                           if (!Fill(w, "padded.JPEG", &counters).ok()) {
                             return 4;
                           }
                           const uint64_t after = StatusKiB("VmRSS:");
                           // The 40 MiB buffer is gone once the image is done.
                           return after < before + 16 * 1024 ? 0 : 5;
                         }),
            0);
}

// ------------------------------------------------------ TFRecord shards

TEST(TFRecordCap, OversizedRecordIsRefusedWithoutReadingIt) {
  const std::string dir = MakeTempDir("root");
  const std::string path = dir + "/x.tfrecord";
  ASSERT_TRUE(
      WriteTFRecordFile(path, {std::string(100, 'a'), std::string(5000, 'b')})
          .ok());
  TFRecordOptions o;
  o.max_record_bytes = 1000;
  auto f = TFRecordFile::Open(path, o);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_TRUE((*f)->Read(0).ok());
  absl::StatusOr<std::string> r = (*f)->Read(1);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(r.status().message().find("over the limit"), std::string::npos);
}

TEST(TFRecordCap, SparseGiantRecordCostsNoMemory) {
  const std::string dir = MakeTempDir("root");
  const std::string path = dir + "/giant.tfrecord";
  // One record whose header claims 1 GiB, the data a hole.
  const uint64_t length = uint64_t(1) << 30;
  uint8_t header[12];
  for (int i = 0; i < 8; ++i) header[i] = uint8_t(length >> (8 * i));
  const uint32_t crc = MaskedCrc32c(header, 8);
  for (int i = 0; i < 4; ++i) header[8 + i] = uint8_t(crc >> (8 * i));
  WriteFile(path, std::string(reinterpret_cast<char*>(header), 12));
  ASSERT_EQ(truncate(path.c_str(), off_t(12 + length + 4)), 0);
  EXPECT_EQ(testutil::ExitCodeInChild(
                [&] {
                  auto f = TFRecordFile::Open(path);  // default cap
                  if (!f.ok() || (*f)->size() != 1) return 2;
                  if ((*f)->Read(0).ok()) return 3;
                  return StatusKiB("VmHWM:") < 256 * 1024 ? 0 : 4;
                },
                60),
            0);
}

TEST(TFRecordCap, FifoNamedLikeAShardDoesNotBlock) {
  const std::string dir = MakeTempDir("root");
  ASSERT_EQ(mkfifo((dir + "/s.tfrecord").c_str(), 0644), 0);
  EXPECT_EQ(testutil::ExitCodeInChild(
                [&] {
                  auto f = TFRecordFile::Open(dir + "/s.tfrecord");
                  return !f.ok() && f.status().code() ==
                                        absl::StatusCode::kFailedPrecondition
                             ? 0
                             : 1;
                },
                10),
            0);
}

// ------------------------------------------------------------ WMT text

TEST(WmtText, FifoAndLinkOutOfTheRootAreRefused) {
  const std::string dir = MakeTempDir("root");
  const std::string outside = MakeTempDir("root");
  ASSERT_EQ(mkfifo((dir + "/train.de").c_str(), 0644), 0);
  WriteFile(dir + "/train.en", "hello\n");
  EXPECT_EQ(testutil::ExitCodeInChild(
                [&] {
                  auto s = wmt::OpenPairSource(dir, "train", "text");
                  return !s.ok() && s.status().code() ==
                                        absl::StatusCode::kFailedPrecondition
                             ? 0
                             : 1;
                },
                10),
            0);
  WriteFile(outside + "/secret", "geheim\n");
  WriteFile(dir + "/test.en", "hello\n");
  symlink((outside + "/secret").c_str(), (dir + "/test.de").c_str());
  auto s = wmt::OpenPairSource(dir, "test", "text");
  EXPECT_EQ(s.status().code(), absl::StatusCode::kPermissionDenied)
      << s.status();
}

TEST(WmtText, OverlongLineIsADamagedPair) {
  const std::string dir = MakeTempDir("root");
  WriteFile(dir + "/train.de", "kurz\n" + std::string(5000, 'x') + "\nende\n");
  WriteFile(dir + "/train.en", "short\nlong\nend\n");
  wmt::PairSourceOptions o;
  o.max_record_bytes = 1000;
  auto s = wmt::OpenPairSource(dir, "train", "text", o);
  ASSERT_TRUE(s.ok()) << s.status();
  std::string de, en;
  EXPECT_TRUE((*s)->Read(0, &de, &en).ok());
  EXPECT_EQ((*s)->Read(1, &de, &en).code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE((*s)->Read(2, &de, &en).ok());
  EXPECT_EQ(de, "ende");
}

}  // namespace
}  // namespace batchd

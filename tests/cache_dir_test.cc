// The persistent cache directory: entries survive a reopen, damaged
// entries (truncated, a flipped byte, another key) are discarded with a
// warning and never returned, concurrent writers in real processes leave
// one whole entry, LockEntry excludes other processes and threads, and
// directories other users could write into are refused.
#include "storage/cache_dir.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/testutil.h"

namespace batchd {
namespace {

using testutil::ReadFile;
using testutil::WriteFile;

class CacheDirTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = tmp_.Path("cache"); }
  std::shared_ptr<const CacheDir> OpenCache() {
    absl::StatusOr<std::shared_ptr<const CacheDir>> c = CacheDir::Open(dir_);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? *c : nullptr;
  }
  std::string EntryPath(const std::string& kind, const std::string& key) {
    return dir_ + "/" + CacheDir::EntryName(kind, key);
  }
  testutil::TempDir tmp_{"cache"};
  std::string dir_;
};

TEST_F(CacheDirTest, CreatesTheDirectoryPrivate) {
  OpenCache();
  struct stat st;
  ASSERT_EQ(lstat(dir_.c_str(), &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0700u);
}

TEST_F(CacheDirTest, ValueSurvivesAReopen) {
  const std::string value =
      std::string("bytes\0with nul", 14) + std::string(100000, 'x');
  ASSERT_TRUE(OpenCache()->Put("wmt-lengths", "key one", value).ok());
  auto cache = OpenCache();
  absl::StatusOr<std::string> got = cache->Get("wmt-lengths", "key one");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, value);
  EXPECT_TRUE(absl::IsNotFound(cache->Get("wmt-lengths", "key two").status()));
  EXPECT_TRUE(absl::IsNotFound(cache->Get("wmt-lines", "key one").status()));
}

TEST_F(CacheDirTest, EmptyValueIsAnEntry) {
  auto cache = OpenCache();
  ASSERT_TRUE(cache->Put("k", "key", "").ok());
  absl::StatusOr<std::string> got = cache->Get("k", "key");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, "");
}

TEST_F(CacheDirTest, PutReplacesTheEntry) {
  auto cache = OpenCache();
  ASSERT_TRUE(cache->Put("k", "key", "old value").ok());
  ASSERT_TRUE(cache->Put("k", "key", "new").ok());
  EXPECT_EQ(*cache->Get("k", "key"), "new");
}

TEST_F(CacheDirTest, DisabledCacheMissesAndStoresNothing) {
  absl::StatusOr<std::shared_ptr<const CacheDir>> c = CacheDir::Open("");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE((*c)->enabled());
  EXPECT_TRUE((*c)->Put("k", "key", "v").ok());
  EXPECT_TRUE(absl::IsNotFound((*c)->Get("k", "key").status()));
  absl::StatusOr<CacheDir::Lock> lock = (*c)->LockEntry("k", "key");
  ASSERT_TRUE(lock.ok());
  EXPECT_FALSE(lock->held());
}

TEST_F(CacheDirTest, RefusesBadKinds) {
  auto cache = OpenCache();
  for (const char* kind : {"", "../x", "a/b", "UPPER", "with space"}) {
    EXPECT_EQ(cache->Put(kind, "key", "v").code(),
              absl::StatusCode::kInvalidArgument)
        << kind;
    EXPECT_EQ(cache->Get(kind, "key").status().code(),
              absl::StatusCode::kInvalidArgument)
        << kind;
  }
}

// Each damage: the entry is not returned, a cache_corrupt warning names
// it, the file is gone, and a rebuilt entry is then served.
void ExpectDiscardedThenRebuilt(const CacheDir& cache, const std::string& path,
                                const std::string& key) {
  testing::internal::CaptureStderr();
  absl::StatusOr<std::string> got = cache.Get("wmt-lengths", key);
  const std::string log = testing::internal::GetCapturedStderr();
  EXPECT_TRUE(absl::IsNotFound(got.status())) << got.status();
  EXPECT_NE(log.find("level=warn event=cache_corrupt kind=wmt-lengths"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find(path), std::string::npos) << log;
  EXPECT_FALSE(std::filesystem::exists(path));
  ASSERT_TRUE(cache.Put("wmt-lengths", key, "rebuilt").ok());
  EXPECT_EQ(*cache.Get("wmt-lengths", key), "rebuilt");
}

TEST_F(CacheDirTest, TruncatedEntryIsRebuiltWithAWarning) {
  auto cache = OpenCache();
  const std::string path = EntryPath("wmt-lengths", "key");
  for (size_t keep : {size_t(0), size_t(5), size_t(40), size_t(1000)}) {
    ASSERT_TRUE(cache->Put("wmt-lengths", "key", std::string(2000, 'v')).ok());
    ASSERT_EQ(truncate(path.c_str(), off_t(keep)), 0);
    ExpectDiscardedThenRebuilt(*cache, path, "key");
  }
}

TEST_F(CacheDirTest, FlippedByteIsRebuiltWithAWarning) {
  auto cache = OpenCache();
  const std::string path = EntryPath("wmt-lengths", "key");
  ASSERT_TRUE(cache->Put("wmt-lengths", "key", std::string(2000, 'v')).ok());
  const size_t size = ReadFile(path).size();
  // Every byte of the file: header, kind, key, value and checksum.
  for (size_t at = 0; at < size; at += 7) {
    ASSERT_TRUE(cache->Put("wmt-lengths", "key", std::string(2000, 'v')).ok());
    std::string bytes = ReadFile(path);
    bytes[at] ^= 0x10;
    WriteFile(path, bytes);
    ExpectDiscardedThenRebuilt(*cache, path, "key");
  }
}

TEST_F(CacheDirTest, EntryOfAnotherKeyIsRebuiltWithAWarning) {
  auto cache = OpenCache();
  ASSERT_TRUE(cache->Put("wmt-lengths", "key A", "value of A").ok());
  // A whole, valid entry under the name of key B (a hash collision, or a
  // file copied in).
  const std::string path_b = EntryPath("wmt-lengths", "key B");
  std::filesystem::copy_file(EntryPath("wmt-lengths", "key A"), path_b);
  ExpectDiscardedThenRebuilt(*cache, path_b, "key B");
  EXPECT_EQ(*cache->Get("wmt-lengths", "key A"), "value of A");
}

// A blob of `n` bytes written in pieces of every size up to 3 MiB.
std::string WriteBlob(const CacheDir& cache, const std::string& key,
                      size_t n) {
  std::string value(n, '\0');
  for (size_t i = 0; i < n; ++i) value[i] = char((i * 131 + i / 7) & 0xff);
  auto writer = cache.BeginBlob("wmt-tokens", key);
  EXPECT_TRUE(writer.ok() && *writer != nullptr);
  size_t at = 0, piece = 1;
  while (at < n) {
    const size_t take = std::min(piece, n - at);
    EXPECT_TRUE((*writer)->Append(value.data() + at, take).ok());
    at += take;
    piece = piece * 3 + 1;
  }
  EXPECT_EQ((*writer)->size(), n);
  EXPECT_TRUE((*writer)->Commit().ok());
  return value;
}

TEST_F(CacheDirTest, BlobRoundTripsInPieces) {
  auto cache = OpenCache();
  for (size_t n : {size_t(0), size_t(1), size_t(5000), size_t(3) << 20}) {
    SCOPED_TRACE(n);
    const std::string key = "tokens " + std::to_string(n);
    const std::string value = WriteBlob(*cache, key, n);
    auto blob = cache->OpenBlob("wmt-tokens", key);
    ASSERT_TRUE(blob.ok()) << blob.status();
    ASSERT_EQ((*blob)->size(), n);
    for (uint64_t at : {uint64_t(0), uint64_t(n / 3), uint64_t(n)}) {
      const size_t len = std::min<size_t>(1000, n - at);
      std::string got(len, '\0');
      ASSERT_TRUE((*blob)->Read(at, len, &got[0]).ok());
      EXPECT_EQ(got, value.substr(at, len));
    }
    char c;
    EXPECT_EQ((*blob)->Read(n, 1, &c).code(), absl::StatusCode::kOutOfRange);
  }
  EXPECT_TRUE(
      absl::IsNotFound(cache->OpenBlob("wmt-tokens", "never").status()));
}

TEST_F(CacheDirTest, UncommittedBlobLeavesNothing) {
  auto cache = OpenCache();
  {
    auto writer = cache->BeginBlob("wmt-tokens", "key");
    ASSERT_TRUE(writer.ok());
    ASSERT_TRUE((*writer)->Append("abc", 3).ok());
  }  // dropped: the daemon stopped mid-pass
  EXPECT_TRUE(absl::IsNotFound(cache->OpenBlob("wmt-tokens", "key").status()));
  EXPECT_TRUE(std::filesystem::is_empty(dir_));
}

TEST_F(CacheDirTest, DamagedBlobIsDiscardedWithAWarning) {
  auto cache = OpenCache();
  const std::string path = dir_ + "/" + CacheDir::BlobName("wmt-tokens", "key");
  auto expect_discarded = [&](const std::string& what) {
    SCOPED_TRACE(what);
    testing::internal::CaptureStderr();
    auto blob = cache->OpenBlob("wmt-tokens", "key");
    const std::string log = testing::internal::GetCapturedStderr();
    EXPECT_TRUE(absl::IsNotFound(blob.status())) << blob.status();
    EXPECT_NE(log.find("level=warn event=cache_corrupt kind=wmt-tokens"),
              std::string::npos)
        << log;
    EXPECT_FALSE(std::filesystem::exists(path));
  };
  const std::string value = WriteBlob(*cache, "key", 10000);
  const std::string whole = ReadFile(path);
  // A flipped byte anywhere: value, kind, key, description, checksum.
  for (size_t at = 0; at < whole.size(); at += 997) {
    std::string bytes = whole;
    bytes[at] ^= 0x04;
    WriteFile(path, bytes);
    expect_discarded("flipped byte " + std::to_string(at));
  }
  std::string bytes = whole;
  bytes[whole.size() - 1] ^= 0x04;
  WriteFile(path, bytes);
  expect_discarded("flipped checksum");
  for (size_t keep : {size_t(0), size_t(20), whole.size() - 1}) {
    WriteFile(path, whole.substr(0, keep));
    expect_discarded("truncated to " + std::to_string(keep));
  }
  // A whole blob of another key under this key's name.
  WriteBlob(*cache, "other", 100);
  std::filesystem::copy_file(
      dir_ + "/" + CacheDir::BlobName("wmt-tokens", "other"), path);
  expect_discarded("another key");
  WriteFile(path, whole);
  auto blob = cache->OpenBlob("wmt-tokens", "key");
  ASSERT_TRUE(blob.ok()) << blob.status();
  EXPECT_EQ((*blob)->size(), value.size());
}

TEST_F(CacheDirTest, SymlinkedEntryIsNotFollowed) {
  auto cache = OpenCache();
  const std::string target = dir_ + "/../elsewhere";
  WriteFile(target, "not an entry");
  const std::string path = EntryPath("wmt-lengths", "key");
  ASSERT_EQ(symlink(target.c_str(), path.c_str()), 0);
  absl::StatusOr<std::string> got = cache->Get("wmt-lengths", "key");
  EXPECT_FALSE(got.ok());
  // Put replaces the link itself, not its target.
  ASSERT_TRUE(cache->Put("wmt-lengths", "key", "v").ok());
  EXPECT_EQ(ReadFile(target), "not an entry");
  EXPECT_EQ(*cache->Get("wmt-lengths", "key"), "v");
}

// What another process of this user (or root) may leave in place of an
// entry or a blob is never read: a FIFO (the open must not block), a
// symbolic link to a good entry, a good entry owned by another user. Each
// is discarded with a warning, and a link's target is left alone.
TEST_F(CacheDirTest, PlantedFilesInPlaceOfEntriesAndBlobsAreNotRead) {
  auto cache = OpenCache();
  ASSERT_TRUE(cache->Put("wmt-lengths", "key", "value").ok());
  WriteBlob(*cache, "key", 5000);
  const std::string outside = std::filesystem::path(dir_).parent_path();
  struct Case {
    const char* what;
    std::string path;
    std::function<bool()> opens;
  };
  const std::vector<Case> cases = {
      {"entry", EntryPath("wmt-lengths", "key"),
       [&] { return cache->Get("wmt-lengths", "key").ok(); }},
      {"blob", dir_ + "/" + CacheDir::BlobName("wmt-tokens", "key"),
       [&] { return cache->OpenBlob("wmt-tokens", "key").ok(); }},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    // The real file's bytes, which every planted file below carries.
    const std::string real = ReadFile(c.path);
    ASSERT_FALSE(real.empty());
    auto expect_discarded = [&](const std::string& reason) {
      testing::internal::CaptureStderr();
      EXPECT_FALSE(c.opens());
      const std::string log = testing::internal::GetCapturedStderr();
      EXPECT_NE(log.find("event=cache_corrupt"), std::string::npos) << log;
      EXPECT_NE(log.find(reason), std::string::npos) << log;
      struct stat st;
      EXPECT_NE(lstat(c.path.c_str(), &st), 0) << "not removed";
    };
    ASSERT_EQ(unlink(c.path.c_str()), 0);
    ASSERT_EQ(mkfifo(c.path.c_str(), 0600), 0);
    expect_discarded("not a regular file");

    const std::string target = outside + "/planted-" + c.what;
    WriteFile(target, real);
    ASSERT_EQ(symlink(target.c_str(), c.path.c_str()), 0);
    expect_discarded("not a regular file");
    EXPECT_EQ(ReadFile(target), real) << "the link's target was touched";

    if (geteuid() == 0) {
      WriteFile(c.path, real);
      ASSERT_EQ(chown(c.path.c_str(), 65534, 65534), 0);
      expect_discarded("owned by uid 65534");
    }
    // The same bytes in a file of this user's: they are read.
    WriteFile(c.path, real);
    EXPECT_TRUE(c.opens());
  }
}

// Two processes Put different large values to one entry, many times, while
// a third reads: every read is one writer's whole value, and so is the end.
TEST_F(CacheDirTest, ConcurrentWritersInTwoProcessesLeaveOneWholeEntry) {
  auto cache = OpenCache();
  const std::string a(3 << 20, 'a'), b(2 << 20, 'b');
  pid_t writers[2];
  for (int w = 0; w < 2; ++w) {
    writers[w] = fork();
    ASSERT_GE(writers[w], 0);
    if (writers[w] == 0) {
      auto mine = CacheDir::Open(dir_);
      bool ok = mine.ok();
      for (int i = 0; i < 20 && ok; ++i) {
        ok = (*mine)->Put("wmt-lengths", "shared", w == 0 ? a : b).ok();
      }
      _exit(ok ? 0 : 1);
    }
  }
  int reads = 0;
  for (;;) {
    int status;
    bool done = true;
    for (pid_t& pid : writers) {
      if (pid > 0 && waitpid(pid, &status, WNOHANG) == pid) {
        EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        pid = 0;
      }
      done = done && pid == 0;
    }
    testing::internal::CaptureStderr();
    absl::StatusOr<std::string> got = cache->Get("wmt-lengths", "shared");
    EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
    if (got.ok()) {
      ++reads;
      EXPECT_TRUE(*got == a || *got == b) << "a torn entry of " << got->size();
    } else {
      EXPECT_TRUE(absl::IsNotFound(got.status())) << got.status();
    }
    if (done) break;
  }
  absl::StatusOr<std::string> last = cache->Get("wmt-lengths", "shared");
  ASSERT_TRUE(last.ok()) << last.status();
  EXPECT_TRUE(*last == a || *last == b);
  EXPECT_GT(reads, 0);
  // No temporary file is left behind.
  for (const auto& e : std::filesystem::directory_iterator(dir_)) {
    EXPECT_EQ(e.path().filename().string().rfind(".tmp.", 0), std::string::npos)
        << e.path();
  }
}

// A read-modify-write of a counter file under LockEntry, by two processes
// of two threads each: with mutual exclusion no increment is lost.
TEST_F(CacheDirTest, LockEntrySerialisesProcessesAndThreads) {
  const std::string counter = dir_ + "/../counter";
  OpenCache();
  WriteFile(counter, "0");
  constexpr int kIterations = 300;
  auto increment = [&](const CacheDir& cache) {
    for (int i = 0; i < kIterations; ++i) {
      absl::StatusOr<CacheDir::Lock> lock = cache.LockEntry("k", "key");
      if (!lock.ok() || !lock->held()) return false;
      const long v = strtol(ReadFile(counter).c_str(), nullptr, 10);
      sched_yield();
      WriteFile(counter, std::to_string(v + 1));
    }
    return true;
  };
  pid_t children[2];
  for (pid_t& child : children) {
    child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      auto cache = CacheDir::Open(dir_);
      bool ok[2] = {false, false};
      std::thread t([&] { ok[1] = increment(**cache); });
      ok[0] = increment(**cache);
      t.join();
      _exit(ok[0] && ok[1] ? 0 : 1);
    }
  }
  for (pid_t child : children) {
    int status;
    ASSERT_EQ(waitpid(child, &status, 0), child);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  EXPECT_EQ(ReadFile(counter), std::to_string(4 * kIterations));
}

TEST_F(CacheDirTest, RefusesAGroupWritableDirectory) {
  OpenCache();
  ASSERT_EQ(chmod(dir_.c_str(), 0770), 0);
  absl::StatusOr<std::shared_ptr<const CacheDir>> c = CacheDir::Open(dir_);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(c.status().message().find("writable by group or others"),
            std::string::npos)
      << c.status();
  ASSERT_EQ(chmod(dir_.c_str(), 0702), 0);
  EXPECT_FALSE(CacheDir::Open(dir_).ok());
}

TEST_F(CacheDirTest, RefusesASymlink) {
  OpenCache();
  const std::string link = dir_ + "-link";
  ASSERT_EQ(symlink(dir_.c_str(), link.c_str()), 0);
  absl::StatusOr<std::shared_ptr<const CacheDir>> c = CacheDir::Open(link);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("symbolic link"), std::string::npos)
      << c.status();
}

TEST_F(CacheDirTest, RefusesAFile) {
  WriteFile(dir_, "a file");
  absl::StatusOr<std::shared_ptr<const CacheDir>> c = CacheDir::Open(dir_);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("not a directory"), std::string::npos)
      << c.status();
}

TEST_F(CacheDirTest, RefusesADirectoryOfAnotherUser) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to chown";
  OpenCache();
  ASSERT_EQ(chown(dir_.c_str(), 65534, 65534), 0);  // nobody
  absl::StatusOr<std::shared_ptr<const CacheDir>> c = CacheDir::Open(dir_);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("owned by uid 65534"), std::string::npos)
      << c.status();
}

TEST_F(CacheDirTest, RefusesARelativePath) {
  EXPECT_FALSE(CacheDir::Open("relative/cache").ok());
}

TEST(FileIdentityTest, ChangesWithSizeMtimeAndInode) {
  struct stat st = {};
  st.st_size = 100;
  st.st_mtim.tv_sec = 5;
  st.st_ino = 7;
  const std::string base = FileIdentity("train.de", st);
  struct stat other = st;
  other.st_size = 101;
  EXPECT_NE(FileIdentity("train.de", other), base);
  other = st;
  other.st_mtim.tv_nsec = 1;
  EXPECT_NE(FileIdentity("train.de", other), base);
  other = st;
  other.st_ino = 8;
  EXPECT_NE(FileIdentity("train.de", other), base);
  EXPECT_NE(FileIdentity("train.en", st), base);
  EXPECT_EQ(FileIdentity("train.de", st), base);
}

TEST(StableHash64Test, IsFixedAcrossReleases) {
  // Entry names depend on it: a change orphans every cache on disk.
  EXPECT_EQ(StableHash64(""), 0xefd01f60ba992926ull);
  EXPECT_EQ(StableHash64("wmt-lengths key"), 0x794dc4c90b8d3344ull);
  EXPECT_NE(StableHash64("a"), StableHash64("b"));
  EXPECT_NE(StableHash64(std::string(9, '\0')),
            StableHash64(std::string(10, '\0')));
}

}  // namespace
}  // namespace batchd

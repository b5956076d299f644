// The data root's own walk (storage/path_walk.h), through
// DataRoot with openat2 and without it: link loops and the link limit, `..`
// at the root, absolute links and the root's names, a tree changed in the
// middle of a walk (a link swapped, a directory swapped for a link, a
// directory moved out under `..`), the descriptors a deep path holds, and
// the rights of readers checked through every link. Every tree is real
// (links, modes, other uids' files: setfsuid to uids of no user, as root).
#include "storage/path_walk.h"

#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "storage/data_file.h"
#include "storage/read_access.h"
#include "tests/testutil.h"

namespace batchd {
namespace {

using testutil::TempDir;
using testutil::WriteFile;

// Uids of no user (setfsuid accepts any number).
constexpr uint32_t kVictimUid = 47441;
constexpr uint32_t kAttackerUid = 47442;

// The last component of `path`.
std::string BaseName(const std::string& path) {
  return path.substr(path.rfind('/') + 1);
}

int OpenDescriptors() {
  int n = 0;
  DIR* d = opendir("/proc/self/fd");
  while (dirent* e = readdir(d)) n += e->d_name[0] != '.';
  closedir(d);
  return n - 1;  // the listing's own
}

class PathWalkTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    DataRoot::DisableOpenat2ForTesting(GetParam());
    chmod(root_.path().c_str(), 0755);
    mkdir(root_.Path("a").c_str(), 0755);
    mkdir(root_.Path("b").c_str(), 0755);
    WriteFile(root_.Path("b/file"), "inside");
    WriteFile(outside_.Path("file"), "outside");
  }
  void TearDown() override {
    SetWalkStepHookForTesting(nullptr);
    DataRoot::DisableOpenat2ForTesting(false);
  }

  void Link(const std::string& target, const std::string& rel) {
    ASSERT_EQ(symlink(target.c_str(), root_.Path(rel).c_str()), 0) << rel;
  }

  absl::Status Read(const std::string& path, std::string* out = nullptr,
                    const ReadAccess& access = ReadAccess(),
                    const std::string& root = "") {
    absl::StatusOr<std::shared_ptr<const DataRoot>> r =
        DataRoot::Open(root.empty() ? root_.path() : root, access);
    if (!r.ok()) return r.status();
    std::string bytes;
    return ReadFileCapped(**r, path, 1 << 20, out != nullptr ? out : &bytes);
  }

  // A chain of `links` links under chain<links>/ whose last names
  // b/file: l0 -> l1 -> ... -> ../b/file.
  std::string Chain(int links) {
    const std::string dir = absl::StrCat("chain", links);
    mkdir(root_.Path(dir).c_str(), 0755);
    for (int i = 0; i + 1 < links; ++i) {
      Link(absl::StrCat("l", i + 1), absl::StrCat(dir, "/l", i));
    }
    Link("../b/file", absl::StrCat(dir, "/l", links - 1));
    return dir + "/l0";
  }

  TempDir root_{"walk"};
  TempDir outside_{"walk-out"};
};

int g_steps = 0;
void CountSteps(int, const std::string&) { ++g_steps; }

TEST_P(PathWalkTest, PathsWithoutAbsoluteLinksTakeTheKernelsWalk) {
  // The hot path (ImageNet opens 1.28 M files an epoch by absolute path)
  // is one openat2, with no step of ours, where the kernel has it.
  if (GetParam()) GTEST_SKIP() << "our walk stands in for openat2";
  const int probe = int(syscall(SYS_openat2, AT_FDCWD, ".", nullptr, 0));
  if (probe < 0 && errno == ENOSYS) GTEST_SKIP() << "no openat2 here";
  Link("../b/file", "a/rel");
  g_steps = 0;
  SetWalkStepHookForTesting(&CountSteps);
  for (const std::string& p :
       {root_.Path("b/file"), root_.Path("a/rel"), root_.path() + "//b/file",
        std::string("b/file"), std::string("a/rel")}) {
    std::string bytes;
    ASSERT_TRUE(Read(p, &bytes).ok()) << p << ": " << Read(p);
    EXPECT_EQ(bytes, "inside");
  }
  EXPECT_EQ(g_steps, 0);
  // An absolute link is ours to walk.
  Link(root_.Path("b/file"), "a/abs");
  EXPECT_TRUE(Read("a/abs").ok());
  EXPECT_GT(g_steps, 0);
}

TEST_P(PathWalkTest, LoopsEndAtTheLinkLimit) {
  Link("loop2", "a/loop1");
  Link("loop1", "a/loop2");
  Link("self", "a/self");
  for (const char* p : {"a/loop1", "a/self", "a/self/x"}) {
    const absl::Status s = Read(p);
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << p << s;
    EXPECT_NE(s.message().find("symbolic links"), std::string::npos) << s;
  }
}

TEST_P(PathWalkTest, ChainsAreFollowedUpToTheLimitAndNoFurther) {
  std::string bytes;
  const std::string most = Chain(kMaxLinks);
  ASSERT_TRUE(Read(most, &bytes).ok()) << Read(most);
  EXPECT_EQ(bytes, "inside");
  EXPECT_EQ(Read(Chain(kMaxLinks + 1)).code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_P(PathWalkTest, DotDotNeverGoesAboveTheRoot) {
  // Within the root `..` is followed; above it, even on a way back in,
  // it is refused: "outside the data root".
  std::string bytes;
  ASSERT_TRUE(Read("a/../b/file", &bytes).ok());
  EXPECT_EQ(bytes, "inside");
  Link("../b/file", "a/rel");
  ASSERT_TRUE(Read("a/rel", &bytes).ok());
  EXPECT_EQ(bytes, "inside");
  const std::string back_in = "../" + BaseName(root_.path()) + "/b/file";
  Link("../" + back_in, "a/up");
  Link("../..", "a/top");
  for (const std::string& p :
       {back_in, std::string("a/up"), std::string("a/top/x"),
        std::string("b/../../x"), std::string("..")}) {
    const absl::Status s = Read(p);
    EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << p << s;
    EXPECT_NE(s.message().find("outside the data root"), std::string::npos)
        << s;
  }
}

TEST_P(PathWalkTest, AbsoluteLinksAreFollowedOnlyWhenTheyNameTheRoot) {
  // The root's resolved path, the path it was opened by (a link to it) and
  // a name the operator gave it.
  const std::string alias = outside_.Path("alias");
  const std::string named = outside_.Path("named");
  ASSERT_EQ(symlink(root_.path().c_str(), alias.c_str()), 0);
  ASSERT_EQ(symlink(root_.path().c_str(), named.c_str()), 0);
  Link(root_.Path("b/file"), "a/resolved");
  Link(alias + "/b/file", "a/given");
  Link(named + "/b/file", "a/named");
  Link(root_.path() + "//./b/file", "a/spelt");
  std::string bytes;
  for (const char* p : {"a/resolved", "a/spelt"}) {
    ASSERT_TRUE(Read(p, &bytes).ok()) << p << ": " << Read(p);
    EXPECT_EQ(bytes, "inside");
  }
  ASSERT_TRUE(Read("a/given", &bytes, ReadAccess(), alias).ok());
  EXPECT_EQ(bytes, "inside");
  // Another path to the root is another place until the operator names it.
  EXPECT_EQ(Read("a/given").code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(Read("a/named").code(), absl::StatusCode::kPermissionDenied);
  DataRoot::AddOperatorName(root_.path(), named);
  ASSERT_TRUE(Read("a/named", &bytes).ok()) << Read("a/named");
  EXPECT_EQ(bytes, "inside");
  // Anything else absolute leads out, however it comes back.
  Link(outside_.Path("file"), "a/out");
  Link(root_.path() + "/b/../../" + BaseName(root_.path()) + "/b/file",
       "a/dots");
  Link("/proc/self/root" + root_.Path("b/file"), "a/proc");
  Link("/proc/self/cwd", "a/magic");
  for (const char* p : {"a/out", "a/dots", "a/proc", "a/magic/x"}) {
    const absl::Status s = Read(p, &bytes);
    EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << p << s;
    EXPECT_NE(s.message().find("outside the data root"), std::string::npos)
        << s;
  }
  EXPECT_NE(bytes, "outside");
}

TEST_P(PathWalkTest, ATrailingSlashNeedsADirectory) {
  EXPECT_EQ(Read("b/file/").code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(Read("b/file/.").code(), absl::StatusCode::kNotFound);
  absl::StatusOr<std::shared_ptr<const DataRoot>> root =
      DataRoot::Open(root_.path());
  ASSERT_TRUE(root.ok());
  for (const char* p : {"b/", "b/.", "a/../b", ".", ""}) {
    absl::StatusOr<int> fd = (*root)->OpenDirectory(p);
    EXPECT_TRUE(fd.ok()) << p << ": " << fd.status();
    if (fd.ok()) close(*fd);
  }
}

INSTANTIATE_TEST_SUITE_P(WithAndWithoutOpenat2, PathWalkTest,
                         ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& p) {
                           return p.param ? "Fallback" : "Openat2";
                         });

// ------------------------------------------------- a tree changed mid-walk

// What the step hook does, set by each test (the hook is a plain
// function).
struct Swap {
  std::string before;    // the name whose lookup triggers the change
  std::string from, to;  // rename(from, to) then, if `link`, symlink
  std::string link_target;
  bool done = false;
};
Swap g_swap;

void SwapStep(int, const std::string& name) {
  if (g_swap.done || name != g_swap.before) return;
  g_swap.done = true;
  if (!g_swap.from.empty()) rename(g_swap.from.c_str(), g_swap.to.c_str());
  if (!g_swap.link_target.empty()) {
    symlink(g_swap.link_target.c_str(), g_swap.from.c_str());
  }
}

class ChangedMidWalkTest : public PathWalkTest {
 protected:
  void SetUp() override {
    PathWalkTest::SetUp();
    // Only our walk calls the hook.
    DataRoot::DisableOpenat2ForTesting(true);
    g_swap = Swap();
    SetWalkStepHookForTesting(&SwapStep);
  }

  // Reads `path` while, just before the walk looks `before` up, `rel` is
  // moved aside and a link to `link_target` takes its place: refused, and
  // nothing read from outside.
  void ExpectRefusedWhenSwappedForALink(const std::string& path,
                                        const std::string& before,
                                        const std::string& rel,
                                        const std::string& link_target) {
    g_swap.before = before;
    g_swap.from = root_.Path(rel);
    g_swap.to = root_.Path(rel + ".old");
    g_swap.link_target = link_target;
    std::string bytes;
    const absl::Status s = Read(path, &bytes);
    ASSERT_TRUE(g_swap.done);
    EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
    EXPECT_NE(bytes, "outside");
  }
};

TEST_P(ChangedMidWalkTest, ALinkSwappedForOneLeadingOutIsRefused) {
  // a/l -> ../b while the walk starts; just before it looks l up, l is
  // replaced by a link out of the root (relative or absolute).
  Link("../b", "a/l");
  ExpectRefusedWhenSwappedForALink(
      "a/l/file", "l", "a/l",
      GetParam() ? outside_.path() : "../../" + BaseName(outside_.path()));
}

TEST_P(ChangedMidWalkTest, ADirectorySwappedForALinkIsReadAsTheLink) {
  // b/ is a directory while the walk starts; just before it is looked up
  // it becomes a link out of the root.
  ExpectRefusedWhenSwappedForALink(
      "b/file", "b", "b",
      GetParam() ? outside_.path() : "../" + BaseName(outside_.path()));
}

TEST_P(ChangedMidWalkTest, ADirectoryMovedOutUnderDotDotEndsTheWalk) {
  // The walk is in a/d when a/d is moved out of the root: its `..` is now
  // outside, and the walk does not follow it there.
  mkdir(root_.Path("a/d").c_str(), 0755);
  WriteFile(root_.Path("a/file"), "inside");
  mkdir(outside_.Path("up").c_str(), 0755);
  WriteFile(outside_.Path("up/file"), "outside");
  g_swap.before = "..";
  g_swap.from = root_.Path("a/d");
  g_swap.to = outside_.Path("up/d");
  std::string bytes;
  const absl::Status s = Read("a/d/../file", &bytes);
  ASSERT_TRUE(g_swap.done);
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_NE(s.message().find("changed while it was opened"), std::string::npos)
      << s;
  EXPECT_NE(bytes, "outside");
}

int g_most_descriptors = 0;
void CountDescriptors(int, const std::string&) {
  g_most_descriptors = std::max(g_most_descriptors, OpenDescriptors());
}

TEST_P(ChangedMidWalkTest, ADeepPathHoldsAFewDescriptorsNotOneALevel) {
  std::string deep = "deep";
  mkdir(root_.Path(deep).c_str(), 0755);
  for (int i = 0; i < 300; ++i) {
    deep += "/x";
    ASSERT_EQ(mkdir(root_.Path(deep).c_str(), 0755), 0);
  }
  WriteFile(root_.Path(deep + "/file"), "deep");
  // And back up and down again through `..`, by a link (301 levels up).
  std::string up;
  for (int i = 0; i < 301; ++i) up += "../";
  Link(up + "b/file", deep + "/up");
  const int before = OpenDescriptors();
  g_most_descriptors = 0;
  SetWalkStepHookForTesting(&CountDescriptors);
  std::string bytes;
  ASSERT_TRUE(Read(GetParam() ? deep + "/file" : deep + "/up", &bytes).ok());
  EXPECT_EQ(bytes, GetParam() ? "deep" : "inside");
  // The root's and the walk's own, and the test's DataRoot.
  EXPECT_LE(g_most_descriptors, before + 3);
  EXPECT_EQ(OpenDescriptors(), before);
}

INSTANTIATE_TEST_SUITE_P(Variants, ChangedMidWalkTest,
                         ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& p) {
                           return p.param ? "Absolute" : "Relative";
                         });

// ------------------------------------------------------- readers' rights

class WalkRightsTest : public PathWalkTest {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root to read as other uids";
    PathWalkTest::SetUp();
    // v/ is the victim's 0700 with v/dir/ and v/dir/file; m/ the
    // attacker's 0755.
    for (const char* d : {"v", "v/dir", "m"}) {
      mkdir(root_.Path(d).c_str(), 0755);
    }
    WriteFile(root_.Path("v/dir/file"), "victim's");
    for (const char* p : {"v", "v/dir", "v/dir/file"}) {
      chown(root_.Path(p).c_str(), kVictimUid, kVictimUid);
    }
    chmod(root_.Path("v").c_str(), 0700);
    chown(root_.Path("m").c_str(), kAttackerUid, kAttackerUid);
  }

  // The readers the daemon may serve: another uid checked by the kernel,
  // any local user checked by mode bits.
  std::vector<ReadAccess> Readers() const {
    return {ReadAccess::User(kAttackerUid, kAttackerUid, {}),
            ReadAccess::World()};
  }
};

TEST_P(WalkRightsTest, EveryDirectoryWalkedThroughEveryLinkIsSearchable) {
  // Links that pass through the victim's 0700 v/ and come back out to
  // b/file, which every reader may read: reading through them is
  // refused, as the kernel would refuse the reader.
  Link("../v/dir/../../b/file", "m/through");
  Link(root_.Path("v/dir/../../b/file"), "m/through-abs");
  Link("../v/dir", "m/into");
  // The victim reads its own through the same links.
  EXPECT_TRUE(
      Read("m/into/file", nullptr, ReadAccess::User(kVictimUid, kVictimUid, {}))
          .ok());
  for (const ReadAccess& reader : Readers()) {
    EXPECT_TRUE(Read("b/file", nullptr, reader).ok()) << reader.Describe();
    for (const char* p :
         {"m/through", "m/through-abs", "m/into/../../b/file", "m/into/file"}) {
      std::string bytes;
      const absl::Status s = Read(p, &bytes, reader);
      EXPECT_EQ(s.code(), absl::StatusCode::kNotFound)
          << reader.Describe() << " " << p << ": " << s;
      EXPECT_TRUE(bytes.empty());
    }
  }
}

TEST_P(WalkRightsTest, MissingForbiddenOutsideAndLoopsAnswerAlike) {
  // The attacker's m/l, retargeted: into the victim's directory at a name
  // that exists and at one that does not, out of the root, into a loop.
  // Each path below answers byte for byte the same whatever l names.
  Link("loop", "m/loop");
  const std::vector<std::string> targets = {
      root_.Path("v/dir"),
      root_.Path("v/none"),
      "../v/dir",
      "../v/none",
      outside_.path(),
      "../../" + BaseName(outside_.path()),
      "loop",
      root_.Path("m/none")};
  for (const ReadAccess& reader : Readers()) {
    for (const char* path :
         {"m/l/../../..", "m/l/../../b/file", "m/l/file", "m/l"}) {
      std::vector<std::string> answers;
      for (const std::string& target : targets) {
        unlink(root_.Path("m/l").c_str());
        Link(target, "m/l");
        const absl::Status s = Read(path, nullptr, reader);
        answers.push_back(s.ToString());
      }
      for (size_t i = 1; i < answers.size(); ++i) {
        EXPECT_EQ(answers[i], answers[0])
            << reader.Describe() << " " << path << " through " << targets[i];
      }
      EXPECT_NE(answers[0].find("NOT_FOUND"), std::string::npos) << answers[0];
    }
  }
}

INSTANTIATE_TEST_SUITE_P(WithAndWithoutOpenat2, WalkRightsTest,
                         ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& p) {
                           return p.param ? "Fallback" : "Openat2";
                         });

TEST(PathComponents, DropEmptyAndDotKeepDotDotAndATrailingDirectory) {
  using V = std::vector<std::string>;
  EXPECT_EQ(PathComponents("/a//./b"), (V{"a", "b"}));
  EXPECT_EQ(PathComponents("a/../b/"), (V{"a", "..", "b", "."}));
  EXPECT_EQ(PathComponents("a/."), (V{"a", "."}));
  EXPECT_EQ(PathComponents("a/.."), (V{"a", ".."}));
  EXPECT_EQ(PathComponents("."), V{});
  EXPECT_EQ(PathComponents("/"), V{});
  EXPECT_EQ(PathComponents(""), V{});
}

}  // namespace
}  // namespace batchd

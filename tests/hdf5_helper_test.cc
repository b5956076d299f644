// The HDF5 helper's confinement and lifecycle: volumes whose datasets live
// in other files (external storage, external and soft links, virtual
// datasets) refused naming the file; with those checks skipped (a test
// hook), the seccomp filter alone reads nothing of the other file; the
// filter itself in a forked process; one helper per owner, running as
// that owner, one owner's stalled helper holding none of another's calls;
// the cap on helpers; a helper started from a thread that ends keeps
// serving and is no zombie; a helper stuck in a call ends with a daemon
// killed with kill -9.
#include "workloads/fastmri/hdf5_helper.h"

#include <fcntl.h>
#include <hdf5.h>
#include <seccomp.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/clock.h"
#include "base/threads.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testutil.h"
#include "workloads/fastmri/helper_sandbox.h"
#include "workloads/fastmri/volume.h"

namespace batchd {
namespace {

using ::testing::HasSubstr;
using testutil::ReadFile;
using testutil::TempDir;
using testutil::WriteFile;

constexpr uint32_t kOwnerA = 47431, kOwnerB = 47432;
constexpr size_t kTargetBytes = 320 * 320 * 4;

// How the target dataset of a written volume is stored.
enum class Target {
  kHere,          // in the volume, contiguous
  kChunked,       // in the volume, chunked (read through the library)
  kHugeChunks,    // in the volume, one chunk of every slice
  kExternal,      // H5Pset_external: the bytes of `other`
  kExternalLink,  // a link to `other`'s reconstruction_esc
  kSoftLink,      // a soft link to a dataset of the volume
  kVirtual,       // a virtual dataset over `other`'s reconstruction_esc
};

// A volume of `slices` slices (k-space 640 x 368, chunked when the target
// is read through the library), its target stored as `how` says.
void WriteVolume(const std::string& path, Target how,
                 const std::string& other = "", int slices = 2) {
  hid_t file = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  ASSERT_GE(file, 0);
  hid_t pair = H5Tcreate(H5T_COMPOUND, 8);
  H5Tinsert(pair, "r", 0, H5T_IEEE_F32LE);
  H5Tinsert(pair, "i", 4, H5T_IEEE_F32LE);
  const bool library = how != Target::kHere;
  auto write = [&](const char* name, hid_t type, hsize_t d1, hsize_t d2,
                   size_t bytes, hid_t dcpl) {
    const hsize_t dims[3] = {hsize_t(slices), d1, d2};
    hid_t space = H5Screate_simple(3, dims, nullptr);
    hid_t ds =
        H5Dcreate2(file, name, type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    // (Huge chunks: none written, the file stays small.)
    if (H5Pget_external_count(dcpl) <= 0 &&
        H5Pget_layout(dcpl) != H5D_VIRTUAL && how != Target::kHugeChunks) {
      std::vector<float> values(bytes * slices / 4);
      for (size_t i = 0; i < values.size(); ++i) values[i] = float(i % 97) + 1;
      H5Dwrite(ds, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data());
    }
    H5Dclose(ds);
    H5Sclose(space);
  };
  hid_t kdcpl = H5Pcreate(H5P_DATASET_CREATE);
  if (library) {
    const hsize_t chunk[3] = {1, 160, 368};
    H5Pset_chunk(kdcpl, 3, chunk);
  }
  write("kspace", pair, 640, 368, size_t(640) * 368 * 8, kdcpl);
  hid_t tdcpl = H5Pcreate(H5P_DATASET_CREATE);
  const char* tname = "reconstruction_esc";
  switch (how) {
    case Target::kHere:
      break;
    case Target::kChunked: {
      const hsize_t chunk[3] = {1, 80, 320};
      H5Pset_chunk(tdcpl, 3, chunk);
      break;
    }
    case Target::kHugeChunks: {
      // Every slice in one chunk, of a volume of 200 slices: 78 MiB.
      const hsize_t chunk[3] = {hsize_t(slices), 320, 320};
      H5Pset_chunk(tdcpl, 3, chunk);
      break;
    }
    case Target::kExternal:
      H5Pset_external(tdcpl, other.c_str(), 0, hsize_t(kTargetBytes) * slices);
      break;
    case Target::kVirtual: {
      const hsize_t dims[3] = {hsize_t(slices), 320, 320};
      hid_t vspace = H5Screate_simple(3, dims, nullptr);
      hid_t sspace = H5Screate_simple(3, dims, nullptr);
      H5Pset_virtual(tdcpl, vspace, other.c_str(), "reconstruction_esc",
                     sspace);
      H5Sclose(sspace);
      H5Sclose(vspace);
      break;
    }
    case Target::kExternalLink:
    case Target::kSoftLink:
      tname = "elsewhere";
      break;
  }
  write(tname, H5T_IEEE_F32LE, 320, 320, kTargetBytes, tdcpl);
  if (how == Target::kExternalLink) {
    H5Lcreate_external(other.c_str(), "/reconstruction_esc", file,
                       "reconstruction_esc", H5P_DEFAULT, H5P_DEFAULT);
  } else if (how == Target::kSoftLink) {
    H5Lcreate_soft("/elsewhere", file, "reconstruction_esc", H5P_DEFAULT,
                   H5P_DEFAULT);
  }
  H5Pclose(tdcpl);
  H5Pclose(kdcpl);
  H5Tclose(pair);
  H5Fclose(file);
}

// Whether `bytes` holds the first 64 bytes of `secret`.
bool Holds(const std::string& bytes, const std::string& secret) {
  return bytes.find(secret.substr(0, 64)) != std::string::npos;
}

// A pattern no volume holds: ASCII text, as a leaked file would be.
std::string Secret() {
  std::string s;
  while (s.size() < kTargetBytes * 2) s += "batchd secret line, not a volume\n";
  s.resize(kTargetBytes * 2);
  return s;
}

class Hdf5HelperTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Helpers running as other uids or nobody must reach the volumes and
    // the "other" files, as a user could: what stops them is the helper.
    chmod(dir_.path().c_str(), 0755);
    chmod(outside_.path().c_str(), 0755);
    secret_ = outside_.path() + "/secret.bin";
    WriteFile(secret_, Secret());
    chmod(secret_.c_str(), 0644);
    other_ = outside_.path() + "/other.h5";
    WriteVolume(other_, Target::kChunked);
    chmod(other_.c_str(), 0644);
    auto root = DataRoot::Open(dir_.path());
    ASSERT_TRUE(root.ok()) << root.status();
    root_ = *root;
    auto outside_root = DataRoot::Open(outside_.path());
    ASSERT_TRUE(outside_root.ok()) << outside_root.status();
    outside_root_ = *outside_root;
  }
  std::string Write(const std::string& name, Target how,
                    const std::string& other = "") {
    const std::string path = dir_.path() + "/" + name;
    WriteVolume(path, how, other);
    chmod(path.c_str(), 0644);
    return path;
  }
  // volume_, and the data root as each of two owners opens it (their uids
  // and gids): root_a_ and root_b_, whose calls go to helpers of their
  // own, running as those owners.
  void OpenAsTwoOwners() {
    volume_ = Write("v.h5", Target::kChunked);
    auto a =
        DataRoot::Open(dir_.path(), ReadAccess::User(kOwnerA, kOwnerA, {}));
    auto b =
        DataRoot::Open(dir_.path(), ReadAccess::User(kOwnerB, kOwnerB, {}));
    ASSERT_TRUE(a.ok() && b.ok());
    root_a_ = *std::move(a);
    root_b_ = *std::move(b);
  }
  TempDir dir_{"hdf5-helper"};
  TempDir outside_{"hdf5-outside"};
  std::string secret_, other_, volume_;
  std::shared_ptr<const DataRoot> root_, outside_root_, root_a_, root_b_;
};

TEST_F(Hdf5HelperTest, DatasetsStoredInOtherFilesAreRefusedNamingTheFile) {
  struct Case {
    std::string name;
    Target how;
    std::string other;
    std::string says;
  };
  const Case cases[] = {
      {"external.h5", Target::kExternal, secret_, "HDF5 external storage"},
      {"elink.h5", Target::kExternalLink, other_, "an external link"},
      {"soft.h5", Target::kSoftLink, "", "is a soft link"},
      {"virtual.h5", Target::kVirtual, other_, "is a virtual dataset"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string path = Write(c.name, c.how, c.other);
    auto v = IndexVolume(*root_, path);
    ASSERT_FALSE(v.ok());
    EXPECT_EQ(v.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_THAT(v.status().message(), HasSubstr(path));
    EXPECT_THAT(v.status().message(), HasSubstr(c.says));
  }
  // The same volume with its target stored in it is served.
  auto v = IndexVolume(*root_, Write("chunked.h5", Target::kChunked));
  ASSERT_TRUE(v.ok()) << v.status();
  std::string bytes;
  EXPECT_TRUE(ReadVolumeSlice(*root_, *v, 1, &bytes).ok());
}

TEST_F(Hdf5HelperTest, ChunksBeyondTheBudgetAreRefused) {
  const std::string path = dir_.path() + "/huge.h5";
  WriteVolume(path, Target::kHugeChunks, "", 200);
  auto v = IndexVolume(*root_, path);
  ASSERT_FALSE(v.ok());
  EXPECT_THAT(v.status().message(), HasSubstr(path));
  EXPECT_THAT(v.status().message(), HasSubstr("chunks of more than 64.0 MiB"));
}

// With the checks of indirections skipped (a test hook), libhdf5 tries to
// open the other file itself: the filter makes that fail, and nothing of
// the other file comes back, though the helper's uid could read it.
TEST_F(Hdf5HelperTest, TheFilterAloneStopsWhatTheChecksWouldRefuse) {
  setenv("BATCHD_TEST_HOOKS", "1", 1);
  Hdf5Helper::Get().StopForTesting();  // the next helper sees the hook
  // What the other volume's target holds, read as it may be: its own
  // file.
  auto o = IndexVolume(*outside_root_, other_);
  ASSERT_TRUE(o.ok()) << o.status();
  std::string other_bytes;
  ASSERT_TRUE(ReadVolumeSlice(*outside_root_, *o, 0, &other_bytes).ok());
  other_bytes.erase(0, o->KspaceSliceBytes());
  ASSERT_EQ(other_bytes.size(), kTargetBytes);
  struct Case {
    std::string name;
    Target how;
    std::string other;
    std::string secret;
  };
  const Case cases[] = {
      {"batchd-test-hdf5-unchecked-external.h5", Target::kExternal, secret_,
       Secret()},
      {"batchd-test-hdf5-unchecked-elink.h5", Target::kExternalLink, other_,
       other_bytes},
      {"batchd-test-hdf5-unchecked-virtual.h5", Target::kVirtual, other_,
       other_bytes},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string path = Write(c.name, c.how, c.other);
    auto v = IndexVolume(*root_, path);
    if (c.how == Target::kExternal) {
      // Indexed (the checks skipped), so the read is libhdf5's own try.
      ASSERT_TRUE(v.ok()) << v.status();
    }
    if (!v.ok()) {  // refused at index (the link not followed): nothing read
      EXPECT_THAT(v.status().message(), HasSubstr(path));
      continue;
    }
    for (uint32_t s = 0; s < v->slices; ++s) {
      std::string bytes;
      absl::Status st = ReadVolumeSlice(*root_, *v, s, &bytes);
      if (!st.ok()) {
        EXPECT_THAT(st.message(), HasSubstr(path));
        continue;
      }
      // Served only as what the volume holds: no other file's bytes
      // (a virtual dataset whose sources cannot be opened reads as
      // fill values).
      EXPECT_NE(c.how, Target::kExternal) << "read through external storage";
      EXPECT_FALSE(Holds(bytes.substr(v->KspaceSliceBytes()), c.secret));
    }
  }
  unsetenv("BATCHD_TEST_HOOKS");
  Hdf5Helper::Get().StopForTesting();
}

// ConfineHelper in a forked process: every way to a file, a program, a
// socket or another process fails with EPERM; what it holds still works.
// `outer`: the process is already under a filter that refuses seccomp(2)
// with EPERM, as systemd's SystemCallFilter=@system-service does
// (docker/batchd.service).
void ExpectConfinedProcessOpensNothing(bool outer) {
  int status = -1;
  const std::string said = testutil::RunInChild(
      [outer] {
        if (outer) {
          scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
          if (ctx == nullptr ||
              seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(seccomp),
                               0) != 0 ||
              seccomp_load(ctx) != 0 ||
              syscall(SYS_seccomp, 0, 0, nullptr) == 0 || errno != EPERM) {
            return std::string("no outer filter");
          }
          seccomp_release(ctx);
        }
        HelperCredentials creds;
        if (geteuid() == 0) {
          creds.change = true;
          creds.uid = creds.gid = kOwnerA;
          creds.groups = {kOwnerB};
        }
        absl::Status st = ConfineHelper(creds, uint64_t(1) << 30);
        std::string out = st.ok() ? "" : std::string(st.message());
        auto refused = [&](const char* what, long rc) {
          if (rc >= 0 || errno != EPERM) {
            absl::StrAppend(&out, what, " not refused (", rc, ", ",
                            strerror(errno), "); ");
          }
        };
        refused("open", open("/etc/hostname", O_RDONLY));
        refused("openat", openat(AT_FDCWD, "/etc/hostname", O_RDONLY));
        refused("openat2",
                syscall(SYS_openat2, AT_FDCWD, "/etc/hostname", nullptr, 0));
        refused("creat", creat("/tmp/batchd-hdf5-helper-test", 0600));
        struct stat sb;
        refused("stat", stat("/etc/hostname", &sb));
        refused("socket", socket(AF_UNIX, SOCK_STREAM, 0));
        char* argv[] = {const_cast<char*>("/bin/true"), nullptr};
        refused("execve", execve("/bin/true", argv, environ));
        refused("kill", kill(getppid(), 0));
        refused("ptrace",
                syscall(SYS_ptrace, 16 /* PTRACE_ATTACH */, getppid(), 0, 0));
        // Another process's limits and priority, a terminal's input, being
        // traced again.
        const rlimit one = {1, 1};
        refused("prlimit", prlimit(getppid(), RLIMIT_NOFILE, &one, nullptr));
        refused("setpriority", setpriority(PRIO_PROCESS, getppid(), 19));
        char c = 'x';
        refused("TIOCSTI", ioctl(2, TIOCSTI, &c));
        refused("TIOCSTI, high bits",
                syscall(SYS_ioctl, 2, (uint64_t(1) << 32) | TIOCSTI, &c));
        refused("PR_SET_DUMPABLE", prctl(PR_SET_DUMPABLE, 1, 0, 0, 0));
        if (geteuid() == 0 && !creds.change) out += "still root; ";
        if (creds.change && (getuid() != kOwnerA || getgid() != kOwnerA)) {
          out += "not the owner's ids; ";
        }
        // What it holds: its own pipe, its own pid.
        if (kill(getpid(), 0) != 0) out += "cannot signal itself; ";
        if (out.empty()) out = "ok";
        return out;
      },
      &status);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  EXPECT_EQ(said, "ok");
}

TEST(HelperSandboxTest, AConfinedProcessOpensNothing) {
  ExpectConfinedProcessOpensNothing(false);
}

TEST(HelperSandboxTest, ItConfinesItselfUnderSystemdsSystemCallFilter) {
  ExpectConfinedProcessOpensNothing(true);
}

// /proc/<pid>/status's line `key`'s first field ("Uid:", "State:").
std::string StatusField(pid_t pid, const std::string& key) {
  for (absl::string_view line :
       absl::StrSplit(ReadFile(absl::StrCat("/proc/", pid, "/status")), '\n')) {
    if (absl::StartsWith(line, key)) {
      std::vector<std::string> f =
          absl::StrSplit(line.substr(key.size()), '\t', absl::SkipEmpty());
      return f.empty() ? "" : std::string(absl::StripAsciiWhitespace(f[0]));
    }
  }
  return "";
}

// Polls until `done` (a condition another process or thread makes true),
// failing after a minute: a wait for an event, not a timing.
bool WaitFor(const std::function<bool()>& done) {
  return testutil::WaitFor(done, 60);
}

// The system call the thread `tid` of `pid` is blocked in (-1: running or
// unknown).
long BlockedIn(pid_t pid, pid_t tid) {
  const std::string s =
      ReadFile(absl::StrCat("/proc/", pid, "/task/", tid, "/syscall"));
  long nr = -1;
  if (!absl::SimpleAtoi(s.substr(0, s.find(' ')), &nr)) return -1;
  return nr;
}

bool InPoll(long nr) {
#ifdef SYS_poll
  if (nr == SYS_poll) return true;
#endif
  return nr == SYS_ppoll;
}

// Starts `fn` on a thread named `name` and waits until that thread is
// blocked in poll: its call waits on a helper's answer. *waiting says
// whether it came to that.
absl::StatusOr<Thread> StartWaitingOnAHelper(absl::string_view name,
                                             std::function<void()> fn,
                                             bool* waiting) {
  auto tid = std::make_shared<std::atomic<pid_t>>(0);
  absl::StatusOr<Thread> thread =
      StartThread(name, "", [tid, fn = std::move(fn)] {
        *tid = pid_t(syscall(SYS_gettid));
        fn();
      });
  *waiting = thread.ok() && WaitFor([&] {
               return *tid != 0 && InPoll(BlockedIn(getpid(), *tid));
             });
  return thread;
}

TEST_F(Hdf5HelperTest, EachOwnerHasItsHelperAndAStalledOneHoldsNoOneElse) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to take other uids";
  ASSERT_NO_FATAL_FAILURE(OpenAsTwoOwners());
  auto va = IndexVolume(*root_a_, volume_);
  auto vb = IndexVolume(*root_b_, volume_);
  ASSERT_TRUE(va.ok() && vb.ok()) << va.status() << vb.status();
  std::shared_ptr<Hdf5Helper> a = Hdf5Helper::For(root_a_->access());
  std::shared_ptr<Hdf5Helper> b = Hdf5Helper::For(root_b_->access());
  const pid_t pa = a->pid_for_testing(), pb = b->pid_for_testing();
  ASSERT_GT(pa, 0);
  ASSERT_GT(pb, 0);
  EXPECT_NE(pa, pb);
  // Each runs as its owner; the daemon's own as nobody.
  EXPECT_EQ(StatusField(pa, "Uid:"), absl::StrCat(kOwnerA));
  EXPECT_EQ(StatusField(pb, "Uid:"), absl::StrCat(kOwnerB));
  ASSERT_TRUE(IndexVolume(*root_, volume_).ok());
  EXPECT_EQ(StatusField(Hdf5Helper::Get().pid_for_testing(), "Uid:"),
            absl::StrCat(kNobody));

  // A's helper stops answering (its owner may SIGSTOP it) while A reads.
  ASSERT_EQ(kill(pa, SIGSTOP), 0);
  std::atomic<bool> a_done{false};
  absl::Status a_read;
  bool waiting = false;
  absl::StatusOr<Thread> reader = StartWaitingOnAHelper(
      "A's reader",
      [&] {
        std::string bytes;
        a_read = ReadVolumeSlice(*root_a_, *va, 1, &bytes);
        a_done = true;
      },
      &waiting);
  ASSERT_TRUE(reader.ok());
  // A's call is in flight: its thread waits on the helper's answer.
  ASSERT_TRUE(waiting);
  // B is served meanwhile, index and reads.
  for (uint32_t s = 0; s < 2; ++s) {
    std::string bytes;
    absl::Status st = ReadVolumeSlice(*root_b_, *vb, s, &bytes);
    EXPECT_TRUE(st.ok()) << st;
  }
  EXPECT_TRUE(IndexVolume(*root_b_, volume_).ok());
  EXPECT_FALSE(a_done.load());  // A's call waited on A's helper alone
  // A's helper killed: A's call is asked again of a new helper.
  ASSERT_EQ(kill(pa, SIGKILL), 0);
  reader->Join();
  EXPECT_TRUE(a_read.ok()) << a_read;
  EXPECT_NE(a->pid_for_testing(), pa);
}

TEST_F(Hdf5HelperTest, HelpersBeyondTheCapTakeAnIdleOnesPlaceOrAreRefused) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to take other uids";
  ASSERT_NO_FATAL_FAILURE(OpenAsTwoOwners());
  // No helper of this process runs (other tests' may).
  Hdf5Helper::Get().StopForTesting();
  Hdf5Helper::For(root_a_->access())->StopForTesting();
  Hdf5Helper::For(root_b_->access())->StopForTesting();
  ASSERT_EQ(Hdf5Helper::running_for_testing(), 0);
  Hdf5Helper::set_max_helpers_for_testing(1);
  auto va = IndexVolume(*root_a_, volume_);
  ASSERT_TRUE(va.ok()) << va.status();
  const pid_t pa = Hdf5Helper::For(root_a_->access())->pid_for_testing();
  ASSERT_GT(pa, 0);
  // B's helper takes idle A's place: A is stopped and reaped.
  ASSERT_TRUE(IndexVolume(*root_b_, volume_).ok());
  EXPECT_EQ(Hdf5Helper::running_for_testing(), 1);
  EXPECT_EQ(Hdf5Helper::For(root_a_->access())->pid_for_testing(), 0);
  EXPECT_NE(kill(pa, 0), 0);  // gone, not a zombie of ours
  // B in a call (its helper stopped): A is refused rather than made to wait.
  std::shared_ptr<Hdf5Helper> b = Hdf5Helper::For(root_b_->access());
  const pid_t pb = b->pid_for_testing();
  ASSERT_EQ(kill(pb, SIGSTOP), 0);
  bool waiting = false;
  absl::StatusOr<Thread> reader = StartWaitingOnAHelper(
      "B's reader", [&] { EXPECT_TRUE(IndexVolume(*root_b_, volume_).ok()); },
      &waiting);
  ASSERT_TRUE(reader.ok());
  ASSERT_TRUE(waiting);
  auto refused = IndexVolume(*root_a_, volume_);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(refused.status().message(),
              HasSubstr("every one of the 1 HDF5 helper processes"));
  ASSERT_EQ(kill(pb, SIGKILL), 0);
  reader->Join();
  Hdf5Helper::set_max_helpers_for_testing(Hdf5Helper::kMaxHelpers);
  EXPECT_TRUE(IndexVolume(*root_a_, volume_).ok());
}

// W1: PR_SET_PDEATHSIG follows the thread that started a process; the
// helper must outlive a pool thread that started it and then ended.
TEST_F(Hdf5HelperTest, AHelperStartedByAThreadThatEndsKeepsServing) {
  const std::string path = Write("v.h5", Target::kChunked);
  Hdf5Helper::Get().StopForTesting();
  std::atomic<pid_t> tid{0};
  absl::StatusOr<FastMriVolume> v;
  absl::StatusOr<Thread> starter = StartThread("a short-lived thread", "", [&] {
    tid = pid_t(syscall(SYS_gettid));
    v = IndexVolume(*root_, path);
  });
  ASSERT_TRUE(starter.ok());
  starter->Join();
  ASSERT_TRUE(v.ok()) << v.status();
  const pid_t helper = Hdf5Helper::Get().pid_for_testing();
  ASSERT_GT(helper, 0);
  // The thread is gone from the kernel (its exit is complete, signals to
  // the processes it started included).
  ASSERT_TRUE(WaitFor([&] {
    struct stat st;
    return stat(absl::StrCat("/proc/self/task/", tid.load()).c_str(), &st) != 0;
  }));
  // Alive, not a zombie, and the same helper serves the next call.
  EXPECT_EQ(kill(helper, 0), 0);
  EXPECT_THAT(StatusField(helper, "State:"), ::testing::Not(HasSubstr("Z")));
  std::string bytes;
  absl::Status st = ReadVolumeSlice(*root_, *v, 1, &bytes);
  EXPECT_TRUE(st.ok()) << st;
  EXPECT_EQ(Hdf5Helper::Get().pid_for_testing(), helper);
}

// A "daemon" (a forked copy of this process) whose helper is inside a call
// that hangs is killed with kill -9: the helper ends too.
TEST_F(Hdf5HelperTest, AHelperInACallEndsWhenTheDaemonIsKilled) {
  // (/proc/<helper>/syscall: the helper is not dumpable.)
  if (geteuid() != 0) GTEST_SKIP() << "needs root to see the helper's call";
  const std::string good = Write("good.h5", Target::kChunked);
  const std::string hang = Write("batchd-test-hdf5-hang.h5", Target::kChunked);
  // This process adopts the orphaned helper, to wait for it.
  ASSERT_EQ(prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
  int pids[2];
  ASSERT_EQ(pipe(pids), 0);
  const pid_t daemon = fork();
  ASSERT_GE(daemon, 0);
  if (daemon == 0) {
    close(pids[0]);
    setenv("BATCHD_TEST_HOOKS", "1", 1);
    // An owner of its own: this copy's pool has no helper for it yet.
    auto root = DataRoot::Open(dir_.path(),
                               ReadAccess::User(kOwnerB + 7, kOwnerB + 7, {}));
    if (!root.ok() || !IndexVolume(**root, good).ok()) _exit(1);
    const pid_t helper = Hdf5Helper::For((*root)->access())->pid_for_testing();
    (void)!write(pids[1], &helper, sizeof(helper));
    (void)IndexVolume(**root, hang);  // hangs in the helper
    _exit(2);
  }
  close(pids[1]);
  pid_t helper = 0;
  ASSERT_EQ(read(pids[0], &helper, sizeof(helper)), ssize_t(sizeof(helper)));
  close(pids[0]);
  ASSERT_GT(helper, 0);
  // The helper is in the hanging call (the hook's pause), not between calls.
  ASSERT_TRUE(WaitFor([&] {
    const long nr = BlockedIn(helper, helper);
#ifdef SYS_pause
    return nr == SYS_pause;
#else
    return nr == SYS_ppoll;
#endif
  }));
  ASSERT_EQ(kill(daemon, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(waitpid(daemon, &status, 0), daemon);
  // The orphaned helper ends; this process, its new parent, reaps it.
  ASSERT_TRUE(
      WaitFor([&] { return waitpid(helper, &status, WNOHANG) == helper; }));
  EXPECT_TRUE(WIFEXITED(status)) << status;
  prctl(PR_SET_CHILD_SUBREAPER, 0);
}

}  // namespace
}  // namespace batchd

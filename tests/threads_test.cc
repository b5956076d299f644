// The one way the daemon starts a thread (base/threads.h): a thread that
// cannot start (RLIMIT_NPROC, in a forked child) is a status with the one
// message that names the thread, the limits and the flag; a group's join
// with a deadline abandons, and counts, the threads stuck past it, and
// never waits for them again; its wait with a deadline abandons none and
// waits for them again later; an elastic pool joins each thread that
// returned while the others run on.
#include "base/threads.h"

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/synchronization/notification.h"
#include "base/clock.h"
#include "gtest/gtest.h"
#include "tests/testutil.h"

namespace batchd {
namespace {

TEST(StartThread, RunsTheFunctionAndJoins) {
  std::atomic<int> ran{0};
  absl::StatusOr<Thread> t = StartThread("a test thread", "", [&] { ++ran; });
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_TRUE(t->joinable());
  t->Join();
  EXPECT_FALSE(t->joinable());
  EXPECT_EQ(ran.load(), 1);
}

// What `fn` reports when run in a forked child held to one task of its
// user (RLIMIT_NPROC): no thread can start there.
std::string InAChildHeldToOneTask(const std::function<std::string()>& fn) {
  return testutil::RunInChild([&fn]() -> std::string {
    // root is not held to RLIMIT_NPROC: the child becomes nobody first.
    if (geteuid() == 0 && (setresgid(65534, 65534, 65534) != 0 ||
                           setresuid(65534, 65534, 65534) != 0)) {
      return "cannot become nobody";
    }
    const rlimit one{1, 1};
    if (setrlimit(RLIMIT_NPROC, &one) != 0) return "setrlimit failed";
    return fn();
  });
}

TEST(StartThread, AThreadThatCannotStartIsTheOneNamedError) {
  const std::string report = InAChildHeldToOneTask([] {
    absl::StatusOr<Thread> t = StartThread("test thread 1 of --test-threads 4",
                                           "--test-threads", [] {});
    return t.ok() ? std::string("started")
                  : std::to_string(int(t.status().code())) + " " +
                        std::string(t.status().message());
  });
  EXPECT_EQ(
      report,
      std::to_string(int(absl::StatusCode::kResourceExhausted)) +
          " cannot start test thread 1 of --test-threads 4 (pthread_create: "
          "Resource temporarily unavailable): the daemon is at its thread "
          "limit (a pids cgroup, systemd's TasksMax, RLIMIT_NPROC or the "
          "kernel's threads-max); raise it or lower --test-threads");
}

TEST(ThreadGroup, JoinWaitsForEveryThreadThatReturns) {
  ThreadGroup group;
  absl::Notification go;
  std::atomic<int> done{0};
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(group
                    .Start("a test thread", "",
                           [&] {
                             go.WaitForNotification();
                             ++done;
                           })
                    .ok());
  }
  EXPECT_EQ(group.running(), 3);
  go.Notify();
  // A deadline far off: the threads return well before it.
  EXPECT_EQ(group.JoinUntil(MonotonicNanos() + uint64_t(600e9)), 0);
  EXPECT_EQ(done.load(), 3);
  EXPECT_EQ(group.running(), 0);
  EXPECT_EQ(group.abandoned(), 0);
}

TEST(ThreadGroup, ThreadsStuckPastTheDeadlineAreAbandonedAndCounted) {
  const int before = AbandonedThreads();
  // Outlives the test: the stuck thread may wake after it.
  auto release = std::make_shared<absl::Notification>();
  ThreadGroup group;
  ASSERT_TRUE(group.Start("a returning thread", "", [] {}).ok());
  ASSERT_TRUE(group
                  .Start("a stuck thread", "",
                         [release] { release->WaitForNotification(); })
                  .ok());
  EXPECT_EQ(group.JoinUntil(MonotonicNanos() + uint64_t(50e6)), 1);
  EXPECT_EQ(group.abandoned(), 1);
  EXPECT_EQ(AbandonedThreads(), before + 1);
  EXPECT_EQ(group.running(), 0);
  // The group starts afresh: a join without bound does not wait for the
  // abandoned thread (it would hang here).
  std::atomic<bool> ran{false};
  ASSERT_TRUE(group.Start("a later thread", "", [&] { ran = true; }).ok());
  EXPECT_EQ(group.JoinUntil(0), 0);
  EXPECT_TRUE(ran.load());
  EXPECT_EQ(group.abandoned(), 1);
  release->Notify();
}

TEST(ThreadGroup, WaitUntilKeepsAThreadStuckPastTheDeadlineForALaterWait) {
  const int before = AbandonedThreads();
  absl::Notification release;
  std::atomic<bool> returned{false};
  ThreadGroup group;
  ASSERT_TRUE(group.Start("a returning thread", "", [] {}).ok());
  ASSERT_TRUE(group
                  .Start("a stuck thread", "",
                         [&] {
                           release.WaitForNotification();
                           returned = true;
                         })
                  .ok());
  EXPECT_FALSE(group.WaitUntil(MonotonicNanos() + uint64_t(50e6)));
  EXPECT_EQ(group.running(), 1);
  EXPECT_EQ(group.abandoned(), 0);
  EXPECT_EQ(AbandonedThreads(), before);
  // The thread is still the group's: a wait without bound waits for it.
  release.Notify();
  EXPECT_TRUE(group.WaitUntil(0));
  EXPECT_TRUE(returned.load());
  EXPECT_EQ(group.running(), 0);
}

TEST(ThreadGroup, JoinReturnedJoinsTheThreadsThatEndedWhileOthersRun) {
  absl::Notification release, first_done;
  ThreadGroup group;
  ASSERT_TRUE(
      group.Start("an ending thread", "", [&] { first_done.Notify(); }).ok());
  ASSERT_TRUE(
      group
          .Start("a running thread", "", [&] { release.WaitForNotification(); })
          .ok());
  first_done.WaitForNotification();
  // Returned, or about to: the join waits for its last instructions only.
  while (group.running() > 1) std::this_thread::yield();
  EXPECT_EQ(group.JoinReturned(), 1);
  EXPECT_EQ(group.JoinReturned(), 0);  // each is joined once
  EXPECT_EQ(group.running(), 1);
  release.Notify();
  EXPECT_EQ(group.JoinUntil(0), 0);
  EXPECT_EQ(group.running(), 0);
}

TEST(ThreadGroup, AThreadThatCannotStartLeavesTheGroupAsItWas) {
  const std::string report = InAChildHeldToOneTask([] {
    ThreadGroup group;
    const absl::Status s = group.Start("the test thread", "", [] {});
    return std::string(s.message()) +
           " running=" + std::to_string(group.running());
  });
  EXPECT_NE(report.find("cannot start the test thread (pthread_create: "),
            std::string::npos)
      << report;
  EXPECT_NE(report.find("; raise it running=0"), std::string::npos) << report;
}

}  // namespace
}  // namespace batchd

// The daemon's executor (base/executor.h): a fixed pool whatever is asked of
// it, errors instead of terminates, no deadlock when a task waits for
// parallel work on its own pool, background work on threads of a lower
// priority, scopes that revoke and wait, owners that take turns (a flood of
// one owner's tasks, or its loop's helpers, leave another owner's task
// prompt), work that runs under its submitter's context and stops when
// cancelled, and a pool that cannot start under a pids limit (a real
// cgroup, in a forked child) is a status.
#include "base/executor.h"

#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "base/work_context.h"
#include "gtest/gtest.h"
#include "tests/testutil.h"

namespace batchd {
namespace {

int ThreadsOfThisProcess() {
  int n = 0;
  DIR* d = opendir("/proc/self/task");
  if (d == nullptr) return -1;
  while (dirent* e = readdir(d)) n += e->d_name[0] != '.';
  closedir(d);
  return n;
}

std::unique_ptr<Executor> Make(int serving, int background,
                               size_t max_queued = 65536) {
  ExecutorOptions o;
  o.serving_threads = serving;
  o.background_threads = background;
  o.max_queued = max_queued;
  absl::StatusOr<std::unique_ptr<Executor>> e = Executor::Create(o);
  EXPECT_TRUE(e.ok()) << e.status();
  return e.ok() ? *std::move(e) : nullptr;
}

// A task that holds one thread of `priority` from the time it starts until
// Release() (or the Busy's end): made, it has started (started() says
// whether it was queued).
class Busy {
 public:
  explicit Busy(Executor& ex, Priority priority = Priority::kServing) {
    queued_ = ex.Submit(priority, [this] {
      running_.Notify();
      release_.WaitForNotification();
    });
    if (queued_.ok()) running_.WaitForNotification();
  }
  ~Busy() { Release(); }
  bool started() const { return queued_.ok(); }
  void Release() {
    if (!release_.HasBeenNotified()) release_.Notify();
  }

 private:
  absl::Status queued_;
  absl::Notification running_, release_;
};

// Submits `n` copies of `task` as owner `owner`; the first refusal.
absl::Status SubmitAs(Executor& ex, uint64_t owner, int n,
                      const std::function<void()>& task) {
  WorkScope scope(WorkContext{owner, nullptr});
  for (int i = 0; i < n; ++i) {
    absl::Status s = ex.Submit(Priority::kServing, task);
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

TEST(Executor, ThreadCountIsFixedWhateverParallelForAsks) {
  auto ex = Make(2, 2);
  const int before = ThreadsOfThisProcess();
  std::atomic<int> most{0};
  std::atomic<uint64_t> sum{0};
  absl::Status s = ParallelFor(
      ex.get(), Priority::kServing, 200000, /*parallel=*/100000,
      [&](uint64_t i) {
        int now = ThreadsOfThisProcess();
        for (int m = most.load();
             now > m && !most.compare_exchange_weak(m, now);) {
        }
        sum += i;
        return absl::OkStatus();
      },
      /*max_chunk=*/4096);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(sum.load(), uint64_t(200000) * 199999 / 2);
  EXPECT_EQ(most.load(), before);
  EXPECT_EQ(ThreadsOfThisProcess(), before);
}

TEST(Executor, ParallelForInsideTasksOfAFullPoolCompletes) {
  // One serving thread, and a task on it that asks for eight threads: the
  // helpers it queues can never start while it runs, so it does the loop
  // alone instead of waiting for them.
  auto ex = Make(1, 1);
  absl::Notification done;
  std::atomic<uint64_t> items{0};
  ASSERT_TRUE(ex->Submit(Priority::kServing, [&] {
                  absl::Status s = ParallelFor(ex.get(), Priority::kServing,
                                               10000, 8, [&](uint64_t) {
                                                 ++items;
                                                 return absl::OkStatus();
                                               });
                  EXPECT_TRUE(s.ok());
                  done.Notify();
                }).ok());
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(60)));
  EXPECT_EQ(items.load(), 10000u);
}

TEST(Executor, FirstErrorOfParallelForIsReturned) {
  auto ex = Make(2, 1);
  absl::Status s =
      ParallelFor(ex.get(), Priority::kServing, 1000, 4, [](uint64_t i) {
        return i == 500 ? absl::DataLossError("item 500") : absl::OkStatus();
      });
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(s.message(), "item 500");
}

TEST(Executor, AFullQueueIsAnErrorNotATerminate) {
  auto ex = Make(1, 1, /*max_queued=*/2);
  Busy busy(*ex);
  ASSERT_TRUE(busy.started());
  EXPECT_TRUE(ex->Submit(Priority::kServing, [] {}).ok());
  EXPECT_TRUE(ex->Submit(Priority::kServing, [] {}).ok());
  absl::Status full = ex->Submit(Priority::kServing, [] {});
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(full.message().find("queued"), std::string::npos) << full;
  // The other class has a queue of its own.
  absl::Notification background;
  EXPECT_TRUE(
      ex->Submit(Priority::kBackground, [&] { background.Notify(); }).ok());
  EXPECT_TRUE(background.WaitForNotificationWithTimeout(absl::Seconds(60)));
  // ParallelFor does not need the queue: its loop runs on the caller.
  std::atomic<int> items{0};
  EXPECT_TRUE(ParallelFor(ex.get(), Priority::kServing, 100, 4, [&](uint64_t) {
                ++items;
                return absl::OkStatus();
              }).ok());
  EXPECT_EQ(items.load(), 100);
  busy.Release();
}

TEST(Executor, BackgroundWorkRunsAtALowerPriority) {
  auto ex = Make(1, 1);
  std::atomic<int> serving_nice{-100}, background_nice{-100};
  absl::Notification a, b;
  ASSERT_TRUE(ex->Submit(Priority::kServing, [&] {
                  errno = 0;
                  serving_nice =
                      getpriority(PRIO_PROCESS, id_t(syscall(SYS_gettid)));
                  a.Notify();
                }).ok());
  ASSERT_TRUE(ex->Submit(Priority::kBackground, [&] {
                  background_nice =
                      getpriority(PRIO_PROCESS, id_t(syscall(SYS_gettid)));
                  b.Notify();
                }).ok());
  ASSERT_TRUE(a.WaitForNotificationWithTimeout(absl::Seconds(60)));
  ASSERT_TRUE(b.WaitForNotificationWithTimeout(absl::Seconds(60)));
  // Relative to the process's own (a daemon run under `nice` keeps it).
  EXPECT_EQ(background_nice.load(), std::min(19, serving_nice.load() + 10));
}

TEST(Executor, RunUsesAThreadWithTheStackAsked) {
  ExecutorOptions o;
  o.stack_bytes = size_t(32) << 20;
  auto ex = Executor::Create(o);
  ASSERT_TRUE(ex.ok()) << ex.status();
  size_t stack = 0;
  bool on_pool = false;
  absl::Status s = (*ex)->Run(Priority::kServing, [&] {
    pthread_attr_t attr;
    pthread_getattr_np(pthread_self(), &attr);
    pthread_attr_getstacksize(&attr, &stack);
    pthread_attr_destroy(&attr);
    on_pool = (*ex)->OnPoolThread();
    return absl::NotFoundError("fn's own status");
  });
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(on_pool);
  EXPECT_GE(stack, size_t(32) << 20);
  EXPECT_FALSE((*ex)->OnPoolThread());
}

TEST(Executor, ShutdownRunsWhatIsQueuedAndRefusesMore) {
  auto ex = Make(1, 1);
  std::atomic<int> ran{0};
  std::atomic<bool> saw_stopping{false};
  Busy busy(*ex, Priority::kBackground);
  ASSERT_TRUE(busy.started());
  ASSERT_TRUE(ex->Submit(Priority::kBackground, [&] {
                  saw_stopping = ex->stopping();
                  ++ran;
                }).ok());
  std::thread stopper([&] { ex->Shutdown(); });
  while (!ex->stopping()) std::this_thread::yield();
  EXPECT_EQ(ex->Submit(Priority::kServing, [] {}).code(),
            absl::StatusCode::kFailedPrecondition);
  busy.Release();
  stopper.join();
  EXPECT_EQ(ran.load(), 1);
  EXPECT_TRUE(saw_stopping.load());
}

TEST(TaskScope, CloseRevokesQueuedTasksAndWaitsForRunningOnes) {
  auto ex = Make(1, 1);
  auto scope = std::make_unique<TaskScope>(ex.get(), Priority::kServing);
  absl::Notification running, release;
  std::atomic<bool> finished{false}, second_ran{false};
  ASSERT_TRUE(scope
                  ->Submit([&] {
                    running.Notify();
                    release.WaitForNotification();
                    finished = true;
                  })
                  .ok());
  ASSERT_TRUE(scope->Submit([&] { second_ran = true; }).ok());
  running.WaitForNotification();
  std::thread closer([&] { scope->Close(); });
  // Once Close has begun (Submit then fails), the running task is
  // released, and Close returns after it.
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (scope->Submit([] {}).ok()) {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline);
    std::this_thread::yield();
  }
  release.Notify();
  closer.join();
  EXPECT_TRUE(finished.load());
  EXPECT_EQ(scope->Submit([] {}).code(), absl::StatusCode::kFailedPrecondition);
  // The queued task is run by the pool, finds its scope closed, does nothing.
  absl::Notification drained;
  ASSERT_TRUE(ex->Submit(Priority::kServing, [&] { drained.Notify(); }).ok());
  ASSERT_TRUE(drained.WaitForNotificationWithTimeout(absl::Seconds(60)));
  EXPECT_FALSE(second_ran.load());
}

TEST(TaskScope, ATaskMayCloseItsOwnScope) {
  auto ex = Make(1, 1);
  TaskScope scope(ex.get(), Priority::kServing);
  absl::Notification done;
  ASSERT_TRUE(scope
                  .Submit([&] {
                    scope.Close();  // waits for the others, not for itself
                    done.Notify();
                  })
                  .ok());
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(60)));
}

// Whatever a test waits for happens long before this, on any machine; a
// wait that reaches it is a failure, never a timing.
constexpr auto kBound = std::chrono::seconds(60);

bool PastBound(std::chrono::steady_clock::time_point start) {
  return std::chrono::steady_clock::now() - start > kBound;
}

// Polls `done` until it holds; false once kBound has passed.
bool WaitUntil(const std::function<bool()>& done) {
  return testutil::WaitFor(done, kBound.count(), /*poll_ms=*/1);
}

// The owners of the tasks that ran, in the order they started.
class OwnerLog {
 public:
  // A task that records its owner.
  std::function<void()> Recorder() {
    return [this] {
      absl::MutexLock lock(&mu_);
      order_.push_back(CurrentWork().owner);
    };
  }
  // Waits (up to kBound) until `n` tasks have run; their owners, or an
  // empty list when they did not.
  std::vector<uint64_t> WaitFor(size_t n) {
    if (!WaitUntil([&] {
          absl::MutexLock lock(&mu_);
          return order_.size() == n;
        })) {
      return {};
    }
    absl::MutexLock lock(&mu_);
    return order_;
  }

 private:
  absl::Mutex mu_;
  std::vector<uint64_t> order_ ABSL_GUARDED_BY(mu_);
};

// Queues `n` tasks of owner `flood`, then one of owner `other`, then runs
// `release` (which frees the pool's threads); the owners of the n + 1
// tasks in the order they started, or none when not all were queued or
// ran.
std::vector<uint64_t> OrderAfterAFlood(Executor& ex, uint64_t flood, int n,
                                       uint64_t other,
                                       const std::function<void()>& release) {
  OwnerLog log;
  const std::function<void()> record = log.Recorder();
  const bool queued = SubmitAs(ex, flood, n, record).ok() &&
                      SubmitAs(ex, other, 1, record).ok();
  release();
  // Waited for also when one was refused: the others run, and record.
  std::vector<uint64_t> order = log.WaitFor(size_t(n) + 1);
  return queued ? order : std::vector<uint64_t>();
}

TEST(Executor, AnotherOwnersTaskStartsBeforeAFloodsBacklog) {
  auto ex = Make(1, 1);
  Busy busy(*ex);
  ASSERT_TRUE(busy.started());
  // Owner 1 floods the class while its one thread is busy; owner 2 then
  // queues one task.
  const std::vector<uint64_t> order =
      OrderAfterAFlood(*ex, 1, 50, 2, [&] { busy.Release(); });
  // Turns alternate: owner 1's first task (its turn came first), then
  // owner 2's, then the rest of the flood.
  ASSERT_EQ(order.size(), 51u);
  size_t at = 0;
  while (at < order.size() && order[at] != 2) ++at;
  EXPECT_LE(at, 1u) << "owner 2's task waited for " << at
                    << " tasks of the flood";
}

TEST(Executor, AnOwnerWithFewerTasksRunningGoesFirst) {
  // Two threads, both running owner 1's tasks; owner 1 queues more, then
  // owner 3: the next free thread takes owner 3's, which runs none.
  auto ex = Make(2, 1);
  absl::Notification release;
  std::atomic<int> running{0};
  WorkScope flood(WorkContext{1, nullptr});
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(ex->Submit(Priority::kServing, [&] {
                    ++running;
                    release.WaitForNotification();
                  }).ok());
  }
  ASSERT_TRUE(WaitUntil([&] { return running.load() == 2; }));
  const std::vector<uint64_t> order =
      OrderAfterAFlood(*ex, 1, 10, 3, [&] { release.Notify(); });
  ASSERT_EQ(order.size(), 11u);
  // Both threads free up at about the same time: owner 3's task is among
  // the first two to start.
  EXPECT_TRUE(order[0] == 3 || order[1] == 3)
      << "owner 3 ran after " << order.size() << " tasks";
}

TEST(Executor, ALoopsHelpersGiveTheirThreadsToAnotherOwner) {
  // Owner 1's loop holds both serving threads with its helpers and has
  // items left for ever; owner 2's task must still start, and the loop
  // sees it start.
  auto ex = Make(2, 1);
  std::atomic<bool> other_started{false};
  absl::Mutex mu;
  std::set<std::thread::id> helpers;
  absl::Status loop;
  const auto start = std::chrono::steady_clock::now();
  std::thread caller([&] {
    WorkScope work(WorkContext{1, nullptr});
    loop = ParallelFor(
        ex.get(), Priority::kServing, uint64_t(1) << 40, 3,
        [&](uint64_t) {
          if (ex->OnPoolThread()) {
            absl::MutexLock lock(&mu);
            helpers.insert(std::this_thread::get_id());
          }
          if (other_started.load()) return absl::AbortedError("it started");
          if (PastBound(start)) return absl::DeadlineExceededError("never");
          return absl::OkStatus();
        },
        /*max_chunk=*/1);
  });
  const bool helped = WaitUntil([&] {
    absl::MutexLock lock(&mu);
    return helpers.size() == 2;
  });
  absl::Status queued;
  if (helped) {
    WorkScope other(WorkContext{2, nullptr});
    queued = ex->Submit(Priority::kServing, [&] { other_started = true; });
  }
  if (!helped || !queued.ok()) other_started = true;  // ends the loop
  caller.join();
  ASSERT_TRUE(helped) << "the loop's helpers never ran";
  ASSERT_TRUE(queued.ok()) << queued;
  // Ended by owner 2's task, not by the bound.
  EXPECT_EQ(loop.code(), absl::StatusCode::kAborted) << loop;
}

TEST(Executor, TasksRunUnderTheContextTheySubmittedUnder) {
  auto ex = Make(2, 1);
  auto cancel = std::make_shared<Cancellation>();
  std::atomic<uint64_t> task_owner{0}, helper_owner{0}, scoped_owner{0};
  std::atomic<bool> same_cancel{false};
  std::unique_ptr<TaskScope> scope;
  {
    WorkScope maker(WorkContext{9, std::make_shared<Cancellation>()});
    scope = std::make_unique<TaskScope>(ex.get(), Priority::kServing);
  }
  std::atomic<bool> scoped_cancel{true};
  absl::Notification done, scoped;
  {
    WorkScope work(WorkContext{7, cancel});
    ASSERT_TRUE(ex->Submit(Priority::kBackground, [&] {
                    task_owner = CurrentWork().owner;
                    same_cancel = CurrentWork().cancel == cancel;
                    // A loop inside the task: its helpers are owner 7's.
                    EXPECT_TRUE(ParallelFor(
                                    ex.get(), Priority::kServing, 64, 3,
                                    [&](uint64_t) {
                                      if (ex->OnPoolThread()) {
                                        helper_owner = CurrentWork().owner;
                                      }
                                      return absl::OkStatus();
                                    },
                                    1)
                                    .ok());
                    done.Notify();
                  }).ok());
    // A scope's tasks are its owner's, whoever submits them, and no
    // request's: its maker's cancellation does not reach them.
    ASSERT_TRUE(scope
                    ->Submit([&] {
                      scoped_owner = CurrentWork().owner;
                      scoped_cancel = CurrentWork().cancel != nullptr;
                      scoped.Notify();
                    })
                    .ok());
  }
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(60)));
  ASSERT_TRUE(scoped.WaitForNotificationWithTimeout(absl::Seconds(60)));
  EXPECT_EQ(task_owner.load(), 7u);
  EXPECT_TRUE(same_cancel.load());
  EXPECT_EQ(helper_owner.load(), 7u);
  EXPECT_EQ(scoped_owner.load(), 9u);
  EXPECT_FALSE(scoped_cancel.load());
  EXPECT_EQ(CurrentWork().owner, kNoOwner);  // scopes restore the outer one
}

TEST(Executor, ACancelledLoopStopsWithCancelled) {
  auto ex = Make(2, 1);
  std::atomic<bool> gone{false};
  auto cancel = std::make_shared<Cancellation>(
      [&] { return gone.load(); }, /*deadline_ns=*/0, /*poll_ns=*/0);
  std::atomic<uint64_t> items{0};
  WorkScope work(WorkContext{5, cancel});
  const uint64_t n = uint64_t(1) << 40;
  absl::Status s = ParallelFor(
      ex.get(), Priority::kServing, n, 3,
      [&](uint64_t) {
        if (++items == 1000) gone = true;  // the caller goes mid-loop
        return absl::OkStatus();
      },
      /*max_chunk=*/16);
  EXPECT_EQ(s.code(), absl::StatusCode::kCancelled) << s;
  EXPECT_NE(s.message().find("the caller has gone"), std::string::npos) << s;
  EXPECT_LT(items.load(), n);
  EXPECT_EQ(CheckCancelled("a pass").code(), absl::StatusCode::kCancelled);
}

TEST(Executor, RunStopsWaitingForATaskThatHasNotStarted) {
  auto ex = Make(1, 1);
  Busy busy(*ex);
  ASSERT_TRUE(busy.started());
  std::atomic<bool> ran{false};
  auto cancel = std::make_shared<Cancellation>();
  absl::Status run;
  std::thread waiter([&] {
    WorkScope work(WorkContext{4, cancel});
    run = ex->Run(Priority::kServing, [&] {
      ran = true;
      return absl::OkStatus();
    });
  });
  cancel->Cancel(absl::OkStatus());
  waiter.join();  // returns although the only thread is still busy
  EXPECT_EQ(run.code(), absl::StatusCode::kCancelled) << run;
  busy.Release();
  absl::Notification drained;
  ASSERT_TRUE(ex->Submit(Priority::kServing, [&] { drained.Notify(); }).ok());
  ASSERT_TRUE(drained.WaitForNotificationWithTimeout(absl::Seconds(60)));
  EXPECT_FALSE(ran.load());
}

TEST(Executor, EachOwnerHasItsOwnQueueLimit) {
  auto ex = Make(1, 1, /*max_queued=*/2);
  Busy busy(*ex);
  ASSERT_TRUE(busy.started());
  {
    WorkScope flood(WorkContext{1, nullptr});
    EXPECT_TRUE(ex->Submit(Priority::kServing, [] {}).ok());
    EXPECT_TRUE(ex->Submit(Priority::kServing, [] {}).ok());
    EXPECT_EQ(ex->Submit(Priority::kServing, [] {}).code(),
              absl::StatusCode::kResourceExhausted);
  }
  WorkScope other(WorkContext{2, nullptr});
  absl::Notification ran;
  EXPECT_TRUE(ex->Submit(Priority::kServing, [&] { ran.Notify(); }).ok());
  busy.Release();
  EXPECT_TRUE(ran.WaitForNotificationWithTimeout(absl::Seconds(60)));
}

// The pids controller of cgroup v1, where a test may make a group of its
// own; empty when there is none (the test is skipped).
std::string PidsCgroupRoot() {
  struct stat st;
  if (stat("/sys/fs/cgroup/pids/cgroup.procs", &st) == 0) {
    return "/sys/fs/cgroup/pids";
  }
  return "";
}

bool WriteTo(const std::string& path, const std::string& value) {
  std::ofstream f(path);
  f << value;
  f.flush();
  return bool(f);
}

TEST(Executor, APoolThatCannotStartIsAStatusNotATerminate) {
  const std::string root = PidsCgroupRoot();
  if (root.empty() || geteuid() != 0) {
    GTEST_SKIP() << "needs root and the cgroup v1 pids controller";
  }
  const std::string group =
      root + "/batchd-executor-test-" + std::to_string(getpid());
  ASSERT_EQ(mkdir(group.c_str(), 0755), 0) << strerror(errno);
  int status = 0;
  const std::string report = testutil::RunInChild(
      [&group]() -> std::string {
        // The child alone in a group that allows two more tasks.
        bool ok = WriteTo(group + "/cgroup.procs", std::to_string(getpid()));
        std::ifstream current(group + "/pids.current");
        int tasks = 0;
        current >> tasks;
        ok = ok && WriteTo(group + "/pids.max", std::to_string(tasks + 2));
        ExecutorOptions o;
        o.serving_threads = 8;
        absl::StatusOr<std::unique_ptr<Executor>> e = Executor::Create(o);
        return !ok      ? "setup failed"
               : e.ok() ? "started"
                        : std::to_string(int(e.status().code())) + " " +
                              std::string(e.status().message());
      },
      &status);
  rmdir(group.c_str());
  ASSERT_TRUE(WIFEXITED(status))
      << "the child died of signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_EQ(report.rfind(
                std::to_string(int(absl::StatusCode::kResourceExhausted)), 0),
            0u)
      << report;
  EXPECT_NE(report.find("serving thread 3 of 8"), std::string::npos) << report;
  EXPECT_NE(report.find("--index-threads"), std::string::npos) << report;
}

}  // namespace
}  // namespace batchd

// The context work carries (base/work_context.h): a call's cancellation
// follows its caller's going and its deadline, stops asking once the call
// has ended and keeps what it was; CheckCancelled names what stopped and
// why; scopes nest and restore.
#include "base/work_context.h"

#include <atomic>
#include <thread>

#include "base/clock.h"
#include "gtest/gtest.h"

namespace batchd {
namespace {

TEST(Cancellation, FollowsTheCallerGoing) {
  std::atomic<bool> gone{false};
  Cancellation c([&] { return gone.load(); }, 0, /*poll_ns=*/0);
  EXPECT_FALSE(c.cancelled());
  EXPECT_TRUE(c.status().ok());
  gone = true;
  EXPECT_TRUE(c.cancelled());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(c.status().message(), "the caller has gone");
  EXPECT_FALSE(c.finished());
}

TEST(Cancellation, APassedDeadlineCancels) {
  Cancellation past(nullptr, MonotonicNanos());
  EXPECT_TRUE(past.cancelled());
  EXPECT_EQ(past.status().message(), "the caller's deadline passed");
  Cancellation later(nullptr, MonotonicNanos() + uint64_t(3600e9));
  EXPECT_FALSE(later.cancelled());
}

TEST(Cancellation, FinishStopsAskingAndKeepsTheAnswer) {
  std::atomic<int> asked{0};
  std::atomic<bool> gone{false};
  Cancellation c(
      [&] {
        ++asked;
        return gone.load();
      },
      MonotonicNanos() + uint64_t(3600e9), /*poll_ns=*/0);
  EXPECT_FALSE(c.cancelled());
  EXPECT_GE(asked.load(), 1);
  c.Finish();
  EXPECT_TRUE(c.finished());
  const int before = asked.load();
  gone = true;  // what `gone` asked has gone with its call
  for (int i = 0; i < 100; ++i) EXPECT_FALSE(c.cancelled());
  EXPECT_EQ(asked.load(), before);
  // A cancelled call stays cancelled once finished.
  Cancellation refused;
  refused.Cancel(absl::ResourceExhaustedError("over the quota"));
  refused.Finish();
  EXPECT_TRUE(refused.cancelled());
  EXPECT_FALSE(refused.finished());
  EXPECT_EQ(refused.status().message(), "the request failed: over the quota");
}

TEST(Cancellation, TheFirstReasonIsKept) {
  Cancellation c;
  c.Cancel(absl::NotFoundError("no such data"));
  c.Cancel(absl::OkStatus());
  EXPECT_EQ(c.status().message(), "the request failed: no such data");
}

TEST(WorkScope, NestsAndRestoresPerThread) {
  EXPECT_EQ(CurrentWork().owner, kNoOwner);
  EXPECT_TRUE(CheckCancelled("nothing").ok());
  auto cancel = std::make_shared<Cancellation>();
  {
    WorkScope outer(WorkContext{1000, nullptr});
    {
      WorkScope inner(WorkContext{1001, cancel});
      EXPECT_EQ(CurrentWork().owner, 1001u);
      uint64_t other_thread = 0;
      std::thread([&] { other_thread = CurrentWork().owner; }).join();
      EXPECT_EQ(other_thread, kNoOwner);
      cancel->Cancel(absl::OkStatus());
      absl::Status s = CheckCancelled("listing /data/x");
      EXPECT_EQ(s.code(), absl::StatusCode::kCancelled);
      EXPECT_EQ(s.message(),
                "listing /data/x stopped: the request was cancelled");
    }
    EXPECT_EQ(CurrentWork().owner, 1000u);
    EXPECT_TRUE(CheckCancelled("nothing").ok());
  }
  EXPECT_EQ(CurrentWork().owner, kNoOwner);
}

}  // namespace
}  // namespace batchd

// Streams being prepared (server/stream_preparations.h): a call with a
// deadline is answered "still preparing" with its progress while the
// preparation goes on, the next call joins it (one preparation, never
// restarted), a preparation nobody asks for any more is cancelled after
// its grace, a caller that goes stops waiting at once, another spec is
// refused, and an owner past its turns waits in its queue.
#include "server/stream_preparations.h"

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "base/clock.h"
#include "client/preparing.h"
#include "gtest/gtest.h"
#include "tests/testutil.h"

namespace batchd {
namespace {

// A preparation whose work goes on, counting steps, until released; then
// it fails with "prepared <name>" (a setup is not needed to tell what the
// callers got). CANCELLED once it is no longer wanted.
class SlowMake {
 public:
  StreamPreparations::MakeFn Fn() {
    return [this](const v1::StreamSpec& spec, const ReadAccess&)
               -> absl::StatusOr<std::shared_ptr<StreamSetup>> {
      calls.fetch_add(1);
      absl::Status s;
      while (!released.HasBeenNotified()) {
        s = CheckCancelled("preparing " + spec.name());
        if (!s.ok()) break;
        ReportProgress("listing " + spec.name(), 1, 4, "folders");
        absl::SleepFor(absl::Milliseconds(1));
      }
      if (s.ok()) s = absl::NotFoundError("prepared " + spec.name());
      if (!s.ok() && absl::IsCancelled(s)) cancelled.fetch_add(1);
      returned.fetch_add(1);
      return s;
    };
  }

  std::atomic<int> calls{0}, cancelled{0}, returned{0};
  absl::Notification released;
};

v1::StreamSpec Spec(const std::string& name, uint64_t seed = 1) {
  v1::StreamSpec spec;
  spec.set_name(name);
  spec.set_workload("synthetic");
  spec.set_global_batch_size(4);
  spec.set_world_size(1);
  spec.set_seed(seed);
  return spec;
}

Caller CallerPid(uint32_t pid) {
  Caller c;
  c.known = true;
  c.pid = pid;
  c.uid = 1000;
  return c;
}

// A call that waits `seconds` at most.
std::shared_ptr<Cancellation> Call(double seconds) {
  return std::make_shared<Cancellation>(
      nullptr, MonotonicNanos() + uint64_t(seconds * 1e9));
}

// Waits (bounded) until `done` says so.
bool Eventually(const std::function<bool()>& done) {
  return testutil::WaitFor(done, 30, /*poll_ms=*/2);
}

StreamPreparations::Options Fast(uint64_t grace_ms) {
  StreamPreparations::Options o;
  o.grace_ns = grace_ms * 1'000'000;
  o.answer_ns = 20'000'000;
  return o;
}

// Preparations made by a SlowMake, with `turns` turns an owner, kept
// `grace_ms` after their last caller. No stream is ever open.
struct Preparations {
  Preparations(int turns_per_owner, uint64_t grace_ms)
      : turns(turns_per_owner),
        preps(
            Fast(grace_ms), turns, [](const StreamKey&) { return false; },
            make.Fn()) {}

  // Stream `key` (its spec: Spec(key's name, seed)), asked for by pid
  // `pid` in `call`.
  absl::StatusOr<StreamPreparations::Ticket> Ask(const StreamKey& key,
                                                 uint32_t pid,
                                                 const Cancellation& call,
                                                 uint64_t seed = 1) {
    return preps.Await(key, Spec(key.second, seed), ReadAccess::Daemon(),
                       CallerPid(pid), call);
  }
  // Asks for `key` as pid `pid` in a call of 10 s: success when the answer
  // is that it is being prepared, else a failure that says the answer.
  ::testing::AssertionResult AskPreparing(const StreamKey& key, uint32_t pid) {
    const absl::StatusOr<StreamPreparations::Ticket> r =
        Ask(key, pid, *Call(10));
    if (PreparingOf(r.status()).has_value()) {
      return ::testing::AssertionSuccess();
    }
    return ::testing::AssertionFailure() << r.status();
  }

  PrepareTurns turns;
  SlowMake make;
  StreamPreparations preps;
};

TEST(StreamPreparations, AWaitingCallerIsToldItsProgressAndJoinsTheSameWork) {
  Preparations t(2, 5000);
  const StreamKey key{1000, "s"};
  absl::StatusOr<StreamPreparations::Ticket> first = t.Ask(key, 1, *Call(10));
  ASSERT_TRUE(absl::IsUnavailable(first.status())) << first.status();
  std::optional<v1::Preparing> p = PreparingOf(first.status());
  ASSERT_TRUE(p.has_value()) << first.status();
  EXPECT_EQ(p->stream(), "s");
  EXPECT_EQ(p->owner_uid(), 1000u);
  EXPECT_EQ(p->grace_seconds(), 5.0);
  // Asked again, it goes on: its steps grow, and it says what it does.
  uint64_t steps = p->steps();
  ASSERT_TRUE(Eventually([&] {
    absl::StatusOr<StreamPreparations::Ticket> again = t.Ask(key, 1, *Call(10));
    p = PreparingOf(again.status());
    return p.has_value() && p->steps() > steps && p->what() == "listing s";
  }));
  EXPECT_EQ(p->done(), 1u);
  EXPECT_EQ(p->total(), 4u);
  EXPECT_EQ(t.preps.List().size(), 1u);
  // Done: the next call (and another rank's) gets its result; it was made
  // once.
  t.make.released.Notify();
  Cancellation no_deadline;
  absl::StatusOr<StreamPreparations::Ticket> done = t.Ask(key, 2, no_deadline);
  EXPECT_EQ(done.status(), absl::NotFoundError("prepared s"));
  EXPECT_EQ(t.make.calls.load(), 1);
  EXPECT_EQ(t.make.cancelled.load(), 0);
  EXPECT_TRUE(Eventually([&] { return t.preps.size() == 0; }));
}

TEST(StreamPreparations, OneNobodyAsksForAnyMoreIsCancelledAfterTheGrace) {
  Preparations t(2, 100);
  ASSERT_TRUE(t.AskPreparing({1000, "s"}, 1));
  // Nobody asks again: its work stops (never released), and it is gone.
  ASSERT_TRUE(Eventually([&] { return t.make.returned.load() == 1; }));
  EXPECT_EQ(t.make.cancelled.load(), 1);
  EXPECT_TRUE(Eventually([&] { return t.preps.size() == 0; }));
  EXPECT_EQ(t.turns.taken(1000), 0);
}

TEST(StreamPreparations, ACallerThatGoesStopsWaitingAtOnce) {
  Preparations t(2, 100);
  auto gone = std::make_shared<Cancellation>();  // no deadline
  std::thread cancel([&] {
    EXPECT_TRUE(Eventually([&] { return t.make.calls.load() == 1; }));
    gone->Cancel(absl::CancelledError("the client went"));
  });
  absl::StatusOr<StreamPreparations::Ticket> r = t.Ask({1000, "s"}, 1, *gone);
  cancel.join();
  EXPECT_TRUE(absl::IsCancelled(r.status())) << r.status();
  // And its preparation stops after the grace.
  EXPECT_TRUE(Eventually([&] { return t.make.cancelled.load() == 1; }));
}

TEST(StreamPreparations, AnotherSpecIsRefusedWhileOneIsPrepared) {
  Preparations t(2, 5000);
  ASSERT_TRUE(t.AskPreparing({1000, "s"}, 1));
  absl::StatusOr<StreamPreparations::Ticket> other =
      t.Ask({1000, "s"}, 2, *Call(10), /*seed=*/2);
  EXPECT_TRUE(absl::IsFailedPrecondition(other.status())) << other.status();
  t.make.released.Notify();
}

TEST(StreamPreparations, AnOwnerPastItsTurnsWaitsInItsQueue) {
  Preparations t(1, 5000);
  ASSERT_TRUE(t.AskPreparing({1000, "a"}, 1));
  absl::StatusOr<StreamPreparations::Ticket> b =
      t.Ask({1000, "b"}, 1, *Call(10));
  std::optional<v1::Preparing> pb = PreparingOf(b.status());
  ASSERT_TRUE(pb.has_value()) << b.status();
  EXPECT_TRUE(pb->queued());
  EXPECT_EQ(t.make.calls.load(), 1);
  // Another owner is not held by it.
  ASSERT_TRUE(t.AskPreparing({2000, "c"}, 3));
  EXPECT_TRUE(Eventually([&] { return t.make.calls.load() == 2; }));
  // a ends (its result taken): b starts on a's turn.
  t.make.released.Notify();
  Cancellation no_deadline;
  EXPECT_EQ(t.Ask({1000, "a"}, 1, no_deadline).status(),
            absl::NotFoundError("prepared a"));
  absl::StatusOr<StreamPreparations::Ticket> b2 =
      t.Ask({1000, "b"}, 1, no_deadline);
  EXPECT_EQ(b2.status(), absl::NotFoundError("prepared b"));
  EXPECT_EQ(t.make.calls.load(), 3);
  EXPECT_EQ(t.make.cancelled.load(), 0);
}

}  // namespace
}  // namespace batchd

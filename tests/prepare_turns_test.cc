// Turns at making streams (server/prepare_turns.h): an owner makes at most
// its turns' worth of streams at once, another owner is never held by it,
// a waiter gets the turn given back, and a cancelled waiter stops waiting.
#include "server/prepare_turns.h"

#include <atomic>
#include <memory>
#include <optional>
#include <thread>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"

namespace batchd {
namespace {

TEST(PrepareTurns, AnOwnerPastItsTurnsWaitsAndOthersDoNot) {
  PrepareTurns turns(2);
  absl::StatusOr<PrepareTurns::Turn> a = turns.Take(1, nullptr);
  absl::StatusOr<PrepareTurns::Turn> b = turns.Take(1, nullptr);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(turns.taken(1), 2);
  // Another owner takes a turn at once.
  {
    absl::StatusOr<PrepareTurns::Turn> other = turns.Take(2, nullptr);
    ASSERT_TRUE(other.ok());
    EXPECT_EQ(turns.taken(2), 1);
  }
  EXPECT_EQ(turns.taken(2), 0);
  // A third of owner 1 waits until one is given back.
  absl::Notification got;
  std::thread third([&] {
    absl::StatusOr<PrepareTurns::Turn> c = turns.Take(1, nullptr);
    EXPECT_TRUE(c.ok());
    got.Notify();
  });
  EXPECT_FALSE(got.HasBeenNotified());
  *a = PrepareTurns::Turn();  // given back
  third.join();
  EXPECT_TRUE(got.HasBeenNotified());
  EXPECT_EQ(turns.taken(1), 1);  // b's; the third's went with its thread
}

TEST(PrepareTurns, ACancelledWaiterStopsWaiting) {
  PrepareTurns turns(1);
  absl::StatusOr<PrepareTurns::Turn> held = turns.Take(7, nullptr);
  ASSERT_TRUE(held.ok());
  auto cancel = std::make_shared<Cancellation>();
  std::optional<absl::Status> waited;
  std::thread waiter([&] { waited = turns.Take(7, cancel.get()).status(); });
  cancel->Cancel(absl::OkStatus());  // its caller went
  waiter.join();                     // although the turn is still held
  ASSERT_TRUE(waited.has_value());
  EXPECT_EQ(waited->code(), absl::StatusCode::kCancelled) << *waited;
  EXPECT_EQ(turns.taken(7), 1);
}

}  // namespace
}  // namespace batchd

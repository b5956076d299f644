// The packed rows' schedule (workloads/packed_schedule.h) on the daemon's
// executor: counting starts no thread of its own, runs on the executor it is
// given, and every final error of the packer reaches Ready as an error, even
// one whose code Ready's contract reads as "being prepared" (Unavailable)
// or "ended" (OutOfRange).
#include "workloads/packed_schedule.h"

#include <dirent.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "gtest/gtest.h"
#include "tests/testutil.h"

namespace batchd {
namespace {

int ThreadsOfThisProcess() {
  int n = 0;
  DIR* d = opendir("/proc/self/task");
  while (dirent* e = readdir(d)) n += e->d_name[0] != '.';
  closedir(d);
  return n;
}

// Ten rows an epoch, or `error` from every count.
class Rows : public RowPacking {
 public:
  explicit Rows(absl::Status error = absl::OkStatus())
      : error_(std::move(error)) {}
  absl::StatusOr<uint64_t> RowsInEpoch(const EpochOrder&) const override {
    ++counts;
    on_pool = executor != nullptr && executor->OnPoolThread();
    if (!error_.ok()) return error_;
    return 10;
  }
  absl::StatusOr<RowCursor> CursorOfRow(const EpochOrder& o,
                                        uint64_t row) const override {
    return RowCursor{o.epoch, row, 0};
  }
  absl::StatusOr<uint64_t> RowAtCursor(const EpochOrder&, const RowCursor& c,
                                       const StopFlag*) const override {
    return c.window;
  }
  // Row r holds two pairs, ids 2r and 2r + 1.
  bool ExamplesOfRows(const EpochOrder& o, uint64_t first, uint64_t count,
                      std::vector<ExampleKey>* keys) const override {
    ++listings;
    for (uint64_t r = first; r < first + count; ++r) {
      keys->push_back({o.epoch, 2 * r, 2 * r});
      keys->push_back({o.epoch, 2 * r + 1, 2 * r + 1});
    }
    return true;
  }
  mutable std::atomic<int> counts{0};
  mutable std::atomic<int> listings{0};
  mutable std::atomic<bool> on_pool{false};
  Executor* executor = nullptr;

 private:
  const absl::Status error_;
};

// Ready(step) once it is no longer "being prepared", within a generous
// bound.
absl::Status ReadyWithin(PackedSchedule& s, uint64_t step) {
  absl::Status r;
  testutil::WaitFor([&] { return !absl::IsUnavailable(r = s.Ready(step)); }, 60,
                    5);
  return r;
}

// The schedules' sampler: global batches of `global` over `world` ranks
// (seed 3) of 100 examples, which the fake rows' counts stand in for.
Sampler RowSampler(uint64_t global = 2, uint32_t world = 1) {
  absl::StatusOr<Sampler> sampler =
      Sampler::Create(100, global, world, 3, true);
  EXPECT_TRUE(sampler.ok()) << sampler.status();
  return std::move(sampler).value();
}

std::unique_ptr<Executor> MakeExecutor() {
  ExecutorOptions o;
  o.serving_threads = 1;
  o.background_threads = 1;
  auto e = Executor::Create(o);
  EXPECT_TRUE(e.ok()) << e.status();
  return *std::move(e);
}

TEST(PackedSchedule, CountsOnTheExecutorItIsGivenAndStartsNoThread) {
  auto executor = MakeExecutor();
  Rows rows;
  rows.executor = executor.get();
  const Sampler sampler = RowSampler();
  const int before = ThreadsOfThisProcess();
  PackedSchedule schedule(rows, sampler, executor.get());
  // Step 40 lies in epoch 8 (5 steps an epoch): nine epochs are counted.
  ASSERT_TRUE(ReadyWithin(schedule, 40).ok());
  EXPECT_TRUE(rows.on_pool.load());
  EXPECT_GE(rows.counts.load(), 9);
  absl::StatusOr<StepItems> items = schedule.Locate(40, 0);
  ASSERT_TRUE(items.ok()) << items.status();
  EXPECT_EQ(items->epoch, 8u);
  EXPECT_EQ(ThreadsOfThisProcess(), before);
}

// Every located step says where its epoch lies in global steps, also in
// the epoch a cursor resumes in, whose earlier steps were never counted.
TEST(PackedSchedule, StepsSayTheirEpochsFirstStepAndLength) {
  auto executor = MakeExecutor();
  Rows rows;  // ten rows an epoch, G = 2: five steps
  const Sampler sampler = RowSampler();
  PackedSchedule schedule(rows, sampler, executor.get());
  for (uint64_t step : {0, 4, 5, 12}) {
    ASSERT_TRUE(ReadyWithin(schedule, step).ok());
    absl::StatusOr<StepItems> items = schedule.Locate(step, 0);
    ASSERT_TRUE(items.ok()) << items.status();
    EXPECT_EQ(items->epoch_first_step, step - step % 5) << step;
    EXPECT_EQ(items->epoch_steps, 5u) << step;
  }
  // Resumed at step 7 from the cursor of row 4 of epoch 2 (its third
  // step): that epoch began at step 5 and ends before step 10.
  PackedSchedule resumed(rows, sampler, executor.get());
  ASSERT_TRUE(resumed.Anchor(7, RowCursor{2, 4, 0}, false).ok());
  for (uint64_t step : {7, 9, 10}) {
    ASSERT_TRUE(ReadyWithin(resumed, step).ok());
    absl::StatusOr<StepItems> items = resumed.Locate(step, 0);
    ASSERT_TRUE(items.ok()) << items.status();
    EXPECT_EQ(items->epoch, step < 10 ? 2u : 3u);
    EXPECT_EQ(items->epoch_first_step, step < 10 ? 5u : 10u) << step;
    EXPECT_EQ(items->epoch_steps, 5u) << step;
  }
}

// The pairs a step's rows read, listed once for the read-ahead, are what
// each row's item reads (the engine hands them in the context) without
// asking the packer again.
TEST(PackedSchedule, ARowsPairsAreListedOnceForReadAheadAndItem) {
  auto executor = MakeExecutor();
  Rows rows;
  const Sampler sampler = RowSampler(4, 2);
  PackedSchedule schedule(rows, sampler, executor.get());
  ASSERT_TRUE(ReadyWithin(schedule, 1).ok());
  std::vector<ExampleKey> step_keys;
  ASSERT_TRUE(schedule.ExamplesOf(1, 1, &step_keys));
  const int listed = rows.listings.load();
  absl::StatusOr<StepItems> items = schedule.Locate(1, 1);
  ASSERT_TRUE(items.ok()) << items.status();
  ASSERT_EQ(items->count, 2u);
  std::vector<ExampleKey> item_keys;
  for (uint64_t i = 0; i < items->count; ++i) {
    std::vector<ExampleKey> keys;
    ASSERT_TRUE(schedule.ExamplesOfItem(*items, i, &keys));
    const uint64_t row = items->first + i;
    ASSERT_EQ(keys.size(), 2u);
    EXPECT_EQ(keys[0].id, 2 * row);
    EXPECT_EQ(keys[1].id, 2 * row + 1);
    item_keys.insert(item_keys.end(), keys.begin(), keys.end());
  }
  EXPECT_EQ(item_keys, step_keys);
  EXPECT_EQ(rows.listings.load(), listed);
  // A rank batch never listed for the read-ahead is asked of the packer
  // at its first row, for all its rows (KeysOfRows, here row by row); its
  // other rows ask nothing more.
  absl::StatusOr<StepItems> other = schedule.Locate(0, 0);
  ASSERT_TRUE(other.ok()) << other.status();
  for (uint64_t i = 0; i < other->count; ++i) {
    std::vector<ExampleKey> keys;
    ASSERT_TRUE(schedule.ExamplesOfItem(*other, i, &keys));
    ASSERT_EQ(keys.size(), 2u);
    EXPECT_EQ(keys[0].id, 2 * (other->first + i));
    EXPECT_EQ(keys[1].id, 2 * (other->first + i) + 1);
    EXPECT_EQ(rows.listings.load(), listed + int(other->count));
  }
}

TEST(PackedSchedule, ACountThatFailsUnavailableIsAFinalErrorWithItsMessage) {
  // A cache directory removed under the daemon: its I/O errors are
  // Unavailable, which Ready must not pass on as "being prepared" (the
  // engine would wait for ever, and the client never learn why).
  auto executor = MakeExecutor();
  for (const absl::Status& error :
       {absl::UnavailableError("cache: cannot open the lock /gone/x.lock"),
        absl::OutOfRangeError("row 12 of epoch 0 (which has 10)")}) {
    SCOPED_TRACE(error.ToString());
    Rows rows(error);
    const Sampler sampler = RowSampler();
    PackedSchedule schedule(rows, sampler, executor.get());
    const absl::Status r = ReadyWithin(schedule, 0);
    EXPECT_FALSE(r.ok());
    EXPECT_FALSE(absl::IsUnavailable(r)) << r;
    EXPECT_FALSE(absl::IsOutOfRange(r)) << r;
    EXPECT_EQ(r.message(), error.message());
  }
}

TEST(PackedSchedule, ACountThatCannotBeQueuedIsAnError) {
  auto executor = MakeExecutor();
  executor->Shutdown();
  Rows rows;
  const Sampler sampler = RowSampler();
  PackedSchedule schedule(rows, sampler, executor.get());
  const absl::Status r = schedule.Ready(0);
  EXPECT_EQ(r.code(), absl::StatusCode::kFailedPrecondition) << r;
  EXPECT_NE(r.message().find("cannot count the epochs"), std::string::npos);
}

// Finding a cursor's row takes until it is stopped, or until `release`;
// cursors past window 99 cannot be in any epoch (CheckCursor).
class SlowCursorRows : public Rows {
 public:
  absl::StatusOr<uint64_t> RowAtCursor(const EpochOrder&, const RowCursor& c,
                                       const StopFlag* stop) const override {
    looking = true;
    while (!release.load()) {
      if (stop != nullptr && stop->load()) {
        stopped = true;
        return absl::CancelledError("stopped");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    on_pool = executor != nullptr && executor->OnPoolThread();
    return c.window;
  }
  absl::Status CheckCursor(uint64_t, const RowCursor& c) const override {
    if (c.window > 99) return absl::InvalidArgumentError("beyond any epoch");
    return absl::OkStatus();
  }
  mutable std::atomic<bool> looking{false}, stopped{false}, release{false};
};

void WaitFor(const std::atomic<bool>& flag) {
  ASSERT_TRUE(testutil::WaitFor([&] { return flag.load(); }, 60, 1));
}

TEST(PackedSchedule, AnchorFindsTheRowOnTheExecutorNotOnItsCaller) {
  auto executor = MakeExecutor();
  SlowCursorRows rows;
  rows.executor = executor.get();
  const Sampler sampler = RowSampler();
  PackedSchedule schedule(rows, sampler, executor.get());
  // Returns while the row cannot be found yet: nothing is looked up here.
  ASSERT_TRUE(schedule.Anchor(7, RowCursor{2, 4, 0}, false).ok());
  EXPECT_FALSE(rows.looking.load());
  EXPECT_TRUE(absl::IsUnavailable(schedule.Ready(7)));
  WaitFor(rows.looking);
  EXPECT_TRUE(absl::IsUnavailable(schedule.Ready(7)));  // being prepared
  rows.release = true;
  ASSERT_TRUE(ReadyWithin(schedule, 7).ok());
  EXPECT_TRUE(rows.on_pool.load());
  absl::StatusOr<StepItems> items = schedule.Locate(7, 0);
  ASSERT_TRUE(items.ok()) << items.status();
  EXPECT_EQ(items->epoch, 2u);
  EXPECT_EQ(items->first, 4u);  // the cursor's row (the fake's window)
}

TEST(PackedSchedule, CancelStopsFindingTheRowAndACursorBeyondIsRefusedAtOnce) {
  auto executor = MakeExecutor();
  SlowCursorRows rows;
  const Sampler sampler = RowSampler();
  {
    PackedSchedule schedule(rows, sampler, executor.get());
    const absl::Status far = schedule.Anchor(7, RowCursor{0, 1000, 0}, true);
    EXPECT_EQ(far.code(), absl::StatusCode::kInvalidArgument) << far;
    EXPECT_FALSE(rows.looking.load());
    ASSERT_TRUE(schedule.Anchor(7, RowCursor{0, 4, 0}, true).ok());
    EXPECT_TRUE(absl::IsUnavailable(schedule.Ready(7)));
    WaitFor(rows.looking);
    schedule.Cancel();
    WaitFor(rows.stopped);
    EXPECT_FALSE(schedule.Ready(7).ok());
  }  // the destructor does not wait for a row nobody releases
}

}  // namespace
}  // namespace batchd

// A worker's reads with read-ahead on (server/readahead.h): while a stream's
// reads return at once they are made inline, however long a busy machine
// keeps the reading thread from a CPU, and go ahead again once a worker's
// read is blocked in storage; bytes read ahead are handed over to an item
// that will not run again and copied to one that may; and the thread clock
// behind the rule (server/readahead_clock.h). Nothing waits for a time to
// pass: threads that must be "long" in a read stay there until the test
// lets them go, and the test's own thread spins on the clock.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "base/clock.h"
#include "server/readahead.h"
#include "server/readahead_clock.h"
#include "tests/readahead_testutil.h"
#include "workloads/workload.h"

namespace batchd {
namespace {

using readahead_testutil::Budget;
using readahead_testutil::Gate;
using readahead_testutil::kBatch;
using readahead_testutil::kExampleBytes;
using readahead_testutil::PlainOrder;
using readahead_testutil::RecordingReader;

// Spins on a CPU until MonotonicNanos passes `until`.
void SpinUntil(uint64_t until) {
  while (MonotonicNanos() < until) {
  }
}

constexpr uint64_t kMs = 1000 * 1000;

// ------------------------------------------------------------ ThreadClock

TEST(ThreadClock, ASleepIsBlockedTimeASpinIsNot) {
  const ThreadClock& clock = ThreadClock::Self();
  ThreadSample start = clock.Sample();
  std::this_thread::sleep_for(std::chrono::milliseconds(60));
  ThreadSample end = clock.Sample();
  EXPECT_GE(clock.BlockedNs(start, end), 60 * kMs);
  // On a CPU (or waiting for one, on a busy machine) is not blocked.
  start = clock.Sample();
  SpinUntil(start.wall_ns + 100 * kMs);
  end = clock.Sample();
  EXPECT_LT(clock.BlockedNs(start, end), 50 * kMs);
}

TEST(ThreadClock, AnotherThreadSeesWhetherTheClocksThreadIsBlockedNow) {
  Gate gate;
  gate.Set(false);
  std::atomic<bool> spin{true};
  ThreadSample started;
  const ThreadClock* clock = nullptr;
  absl::Notification ready;
  std::thread t([&] {
    clock = &ThreadClock::Self();
    started = clock->Sample();
    ready.Notify();
    gate.Pass();  // blocked until the gate opens
    while (spin.load()) {
    }
  });
  ready.WaitForNotification();
  ASSERT_TRUE(gate.WaitEntered(1, 60));
  SpinUntil(started.wall_ns + 200 * kMs);
  EXPECT_GE(clock->BlockedNowNs(started, MonotonicNanos()), 100 * kMs);
  gate.Set(true);
  // Spinning (on a CPU, or runnable): not blocked now, however long.
  uint64_t blocked = 1;
  for (const uint64_t until = MonotonicNanos() + 60000 * kMs;
       blocked != 0 && MonotonicNanos() < until;) {
    blocked = clock->BlockedNowNs(started, MonotonicNanos());
  }
  EXPECT_EQ(blocked, 0u);
  spin = false;
  t.join();
}

// ------------------------------------------------------------ inline reads

// A stream that reads inline once kFastReadsForInline reads ahead returned
// at once: example `slow_id`'s read spins on a CPU, or blocks at `gate`,
// until the test lets it go; `past` is set once it has been in its read
// longer than the stall bound.
struct InlineStream {
  static constexpr uint64_t kInlineNs = 1 * kMs;  // bound: 100 ms
  static constexpr uint64_t kBoundNs =
      ReadAhead::kInlineStallFactor * kInlineNs;
  enum class Slow { kSpin, kBlock };

  // `drained`: what the lane read ahead is read and done with, so that
  // nothing is held and workers read without the read-ahead's lock.
  explicit InlineStream(Slow slow, bool drained = false) : ra(Options()) {
    gate.Set(false);
    stream = ra.AddStream(
        "s", [this, slow](uint64_t id, std::string* b, int64_t* l) {
          if (id >= kSleepyId) {
            std::this_thread::sleep_for(std::chrono::milliseconds(3));
          }
          if (id == kSlowId) {
            const uint64_t start = MonotonicNanos();
            if (slow == Slow::kSpin) {
              SpinUntil(start + kBoundNs + 5 * kMs);
              past = true;
              while (!release.load()) {
              }
            } else {
              gate.Pass();
            }
          }
          b->assign(100, char('a' + id % 26));
          *l = int64_t(id);
          return absl::OkStatus();
        });
    lane = ra.AddLane(stream, PlainOrder(drained ? kDrainSteps : 1000), 0);
    ra.WaitIdleForTest();
    for (uint64_t p = 0; drained && p < kDrainSteps * kBatch; ++p) {
      EXPECT_TRUE(Read(p / kBatch, p).ok());
    }
  }
  // A worker's item of `step` reads example `id`.
  absl::Status Read(uint64_t step, uint64_t id, bool* pending = nullptr) {
    ReadAheadItem item(stream.get(), lane, step);
    item.BeginAttempt();
    std::string bytes;
    int64_t label = -1;
    absl::Status st = item.Read({0, id, id}, &bytes, &label);
    if (pending != nullptr) *pending = item.pending();
    if (st.ok() && label != int64_t(id)) st = absl::InternalError("label");
    ra.FinishItem(&item);
    return st;
  }
  ~InlineStream() {
    release = true;
    gate.Set(true);
    if (slow_reader.joinable()) slow_reader.join();
    ra.RemoveLane(lane);
  }
  static ReadAhead::Options Options() {
    ReadAhead::Options o = Budget(1 << 20, 2);
    o.inline_read_ns = kInlineNs;
    return o;
  }
  // A worker's item reads the slow example, on a thread of its own.
  void StartSlowRead() {
    slow_reader = std::thread([this] {
      ReadAheadItem item(stream.get(), lane, 500);
      item.BeginAttempt();
      std::string bytes;
      int64_t label;
      slow_status = item.Read({0, kSlowId, kSlowId}, &bytes, &label);
      ra.FinishItem(&item);
    });
  }

  static constexpr uint64_t kSlowId = 2000;
  static constexpr uint64_t kSleepyId = 3000;  // and above: blocked 3 ms
  // Steps the drained lane reads ahead: enough reads to read inline.
  static constexpr uint64_t kDrainSteps =
      ReadAheadReader::kFastReadsForInline / kBatch + 2;
  ReadAhead ra;
  Gate gate;
  std::atomic<bool> release{false}, past{false};
  std::shared_ptr<ReadAheadStream> stream;
  ReadAhead::LaneId lane = 0;
  std::thread slow_reader;
  absl::Status slow_status;
};

TEST(ReadAheadWorkerTest, AnInlineReadKeptFromTheCpuSendsNothingAhead) {
  InlineStream s(InlineStream::Slow::kSpin);
  const uint64_t ahead = s.stream->stats().reads_issued;
  s.StartSlowRead();
  while (!s.past.load()) std::this_thread::yield();
  // Another worker's read, while the first has been in its read longer
  // than the bound (on a CPU, as a read of the page cache is, whether it
  // runs or waits for one): still inline, nothing pending or read ahead.
  ReadAheadItem item(s.stream.get(), s.lane, 501);
  item.BeginAttempt();
  std::string bytes;
  int64_t label;
  ASSERT_TRUE(item.Read({0, 2004, 2004}, &bytes, &label).ok());
  EXPECT_FALSE(item.pending());
  EXPECT_EQ(label, 2004);
  s.ra.Decoding(s.lane, 501);
  s.ra.WaitIdleForTest();
  EXPECT_EQ(s.stream->stats().inline_reads, 2u);
  EXPECT_EQ(s.stream->stats().reads_issued, ahead);
  s.ra.FinishItem(&item);
  s.release = true;
  s.slow_reader.join();
  EXPECT_TRUE(s.slow_status.ok());
}

TEST(ReadAheadWorkerTest, AnInlineReadBlockedPastTheBoundSendsTheNextAhead) {
  InlineStream s(InlineStream::Slow::kBlock);
  s.StartSlowRead();
  ASSERT_TRUE(s.gate.WaitEntered(1, 60));
  SpinUntil(MonotonicNanos() + 3 * InlineStream::kBoundNs);
  // The storage stopped answering (the read is blocked in it): the next
  // read goes ahead, and the worker does not wait for it.
  ReadAheadItem item(s.stream.get(), s.lane, 501);
  item.BeginAttempt();
  std::string bytes;
  int64_t label;
  EXPECT_TRUE(IsReadPending(item.Read({0, 2004, 2004}, &bytes, &label)));
  EXPECT_EQ(s.stream->stats().inline_reads, 1u);
  s.gate.Set(true);
  s.slow_reader.join();
  s.ra.FinishItem(&item);
}

TEST(ReadAheadWorkerTest, ReadsThatSpinLongerThanTheBoundStillReturnAtOnce) {
  // A read on a CPU for longer than inline_read_ns (a large file copied
  // out of the page cache, a busy machine) is not slow storage.
  ReadAhead::Options o = Budget(1 << 20, 2);
  o.inline_read_ns = 5 * kMs;
  ReadAhead ra(o);
  auto stream = ra.AddStream("s", [](uint64_t id, std::string* b, int64_t* l) {
    if (id >= 1000) SpinUntil(MonotonicNanos() + 12 * kMs);
    b->assign(100, 'x');
    *l = 0;
    return absl::OkStatus();
  });
  const auto lane = ra.AddLane(stream, PlainOrder(), 0);
  ra.WaitIdleForTest();
  ReadAheadItem item(stream.get(), lane, 300);
  std::string bytes;
  int64_t label;
  for (uint64_t p = 1000; p < 1010; ++p) {
    item.BeginAttempt();
    ASSERT_TRUE(item.Read({0, p, p}, &bytes, &label).ok()) << p;
    EXPECT_FALSE(item.pending());
  }
  EXPECT_EQ(stream->stats().inline_reads, 10u);
  ra.FinishItem(&item);
  ra.RemoveLane(lane);
}

// ------------------------------------------------------------ without the lock

TEST(ReadAheadWorkerTest, OnceNothingIsHeldInlineReadsTakeNoLock) {
  InlineStream s(InlineStream::Slow::kSpin, /*drained=*/true);
  const ReadAheadStats before = s.stream->stats();
  EXPECT_EQ(before.depth_examples + before.on_demand_examples, 0u);
  for (uint64_t id = 1000; id < 1010; ++id) {
    bool pending = true;
    ASSERT_TRUE(s.Read(600, id, &pending).ok()) << id;
    EXPECT_FALSE(pending);
  }
  const ReadAheadStats after = s.stream->stats();
  EXPECT_EQ(after.unlocked_reads - before.unlocked_reads, 10u);
  EXPECT_EQ(after.inline_reads - before.inline_reads, 10u);
  EXPECT_EQ(after.sync_reads - before.sync_reads, 10u);
  EXPECT_EQ(after.reads_issued, before.reads_issued);
}

TEST(ReadAheadWorkerTest, AReadWithoutTheLockKeptFromTheCpuSendsNothingAhead) {
  InlineStream s(InlineStream::Slow::kSpin, /*drained=*/true);
  const ReadAheadStats before = s.stream->stats();
  s.StartSlowRead();
  while (!s.past.load()) std::this_thread::yield();
  bool pending = true;
  ASSERT_TRUE(s.Read(601, 2004, &pending).ok());
  EXPECT_FALSE(pending);
  s.release = true;
  s.slow_reader.join();
  EXPECT_TRUE(s.slow_status.ok());
  const ReadAheadStats after = s.stream->stats();
  EXPECT_EQ(after.inline_reads - before.inline_reads, 2u);
  EXPECT_GE(after.unlocked_reads - before.unlocked_reads, 1u);  // the slow one
  EXPECT_EQ(after.reads_issued, before.reads_issued);
}

TEST(ReadAheadWorkerTest,
     AReadWithoutTheLockBlockedPastTheBoundSendsTheNextAhead) {
  InlineStream s(InlineStream::Slow::kBlock, /*drained=*/true);
  const ReadAheadStats before = s.stream->stats();
  s.StartSlowRead();
  ASSERT_TRUE(s.gate.WaitEntered(1, 60));
  EXPECT_EQ(s.stream->stats().unlocked_reads - before.unlocked_reads, 1u);
  SpinUntil(MonotonicNanos() + 3 * InlineStream::kBoundNs);
  // Seen from the other worker as a read under the lock would be.
  ReadAheadItem item(s.stream.get(), s.lane, 601);
  item.BeginAttempt();
  std::string bytes;
  int64_t label;
  EXPECT_TRUE(IsReadPending(item.Read({0, 2004, 2004}, &bytes, &label)));
  s.gate.Set(true);
  s.slow_reader.join();
  s.ra.FinishItem(&item);
}

TEST(ReadAheadWorkerTest, SlowReadsWithoutTheLockSendTheStreamAhead) {
  InlineStream s(InlineStream::Slow::kSpin, /*drained=*/true);
  const ReadAheadStats before = s.stream->stats();
  // Each read blocked 3 ms (over the 1 ms a read returning at once may
  // be): the first closes the path without the lock, a few more send the
  // stream back to reading ahead.
  bool pending = false;
  uint64_t id = InlineStream::kSleepyId;
  for (; id < InlineStream::kSleepyId + 20 && !pending; ++id) {
    const absl::Status st = s.Read(700, id, &pending);
    ASSERT_TRUE(st.ok() || IsReadPending(st)) << st;
  }
  EXPECT_TRUE(pending);
  const ReadAheadStats after = s.stream->stats();
  EXPECT_EQ(after.unlocked_reads - before.unlocked_reads, 1u);
  EXPECT_GT(after.inline_reads - before.inline_reads, 1u);
}

// ------------------------------------------------------------ handing over

// Reads ahead into buffers of 64 KiB (not a short string's inline storage)
// and records where each read put its bytes.
struct AddressRecorder {
  std::mutex mu;
  std::map<uint64_t, const char*> where;
  ExampleReadFn Fn() {
    return [this](uint64_t id, std::string* b, int64_t* l) {
      b->assign(64 << 10, char('a' + id % 26));
      *l = int64_t(id);
      std::lock_guard<std::mutex> lock(mu);
      where[id] = b->data();
      return absl::OkStatus();
    };
  }
  const char* At(uint64_t id) {
    std::lock_guard<std::mutex> lock(mu);
    return where.at(id);
  }
};

std::vector<ExampleKey> StepKeys(uint64_t step) {
  std::vector<ExampleKey> keys;
  for (uint64_t i = 0; i < kBatch; ++i) {
    keys.push_back({0, step * kBatch + i, step * kBatch + i});
  }
  return keys;
}

// A stream read ahead into an AddressRecorder from step 1 while step 0 is
// decoded, until idle; then step 1 is decoded, and `item` is step 1's, in
// its first attempt.
struct StepOneReadAhead {
  StepOneReadAhead() {
    ra.Decoding(lane, 0);
    ra.WaitIdleForTest();
    ra.Decoding(lane, 1);
    item.BeginAttempt();
  }

  ReadAhead ra{Budget(4 << 20)};
  AddressRecorder source;
  const std::shared_ptr<ReadAheadStream> stream =
      ra.AddStream("s", source.Fn());
  const ReadAhead::LaneId lane = ra.AddLane(stream, PlainOrder(), 1);
  ReadAheadItem item{stream.get(), lane, 1};
};

TEST(ReadAheadWorkerTest, BytesAreHandedOverToAnItemThatWillNotRunAgain) {
  StepOneReadAhead s;
  // Every example of the item is there: each is handed over, not copied
  // (the bytes are where the I/O thread read them).
  const std::vector<ExampleKey> keys = StepKeys(1);
  std::vector<std::string> buffers;
  WorkloadCounters counters;
  FillContext ctx(ItemRef{}, &counters, nullptr, &s.item);
  s.item.ReadInto(keys, &buffers, &ctx);
  ASSERT_FALSE(s.item.pending());
  for (const ExampleKey& k : keys) {
    std::string bytes;
    int64_t label = -1;
    ASSERT_TRUE(ctx.Read(k, &bytes, &label).ok());
    EXPECT_EQ(bytes, std::string(64 << 10, char('a' + k.id % 26)));
    EXPECT_EQ(label, int64_t(k.id));
    EXPECT_EQ(static_cast<const void*>(bytes.data()),
              static_cast<const void*>(s.source.At(k.id)))
        << k.id;
  }
  EXPECT_EQ(ctx.reader_reads(), 0u);
  EXPECT_EQ(s.stream->stats().hits, kBatch);
  // The item will not run again: a substitute it reads now (not read
  // ahead) is read by the worker, not left pending.
  std::string bytes;
  int64_t label;
  ASSERT_TRUE(
      ctx.Read({0, 4, 77, ExampleKey::Kind::kSubstitute}, &bytes, &label).ok());
  EXPECT_FALSE(s.item.pending());
  EXPECT_EQ(label, 77);
  EXPECT_EQ(s.stream->stats().sync_reads, 1u);
  s.ra.FinishItem(&s.item);
  s.ra.RemoveLane(s.lane);
}

TEST(ReadAheadWorkerTest, BytesAreCopiedWhileTheItemMayRunAgain) {
  StepOneReadAhead s;
  // One example there, the next not: nothing is given, the item waits.
  std::vector<ExampleKey> keys = {{0, 4, 4}, {0, 900, 900}};
  std::vector<std::string> buffers;
  WorkloadCounters counters;
  {
    FillContext ctx(ItemRef{}, &counters, nullptr, &s.item);
    s.item.ReadInto(keys, &buffers, &ctx);
    EXPECT_TRUE(s.item.pending());
    EXPECT_TRUE(buffers[0].empty());
  }
  while (!s.item.landed()) std::this_thread::yield();
  // A read the item makes itself while it may run again is a copy; the
  // bytes stay for its next attempt.
  for (int attempt = 0; attempt < 2; ++attempt) {
    s.item.BeginAttempt();
    std::string bytes;
    int64_t label;
    ASSERT_TRUE(s.item.Read(keys[0], &bytes, &label).ok());
    EXPECT_EQ(bytes, std::string(64 << 10, char('a' + 4)));
    EXPECT_NE(static_cast<const void*>(bytes.data()),
              static_cast<const void*>(s.source.At(4)));
  }
  // Then both are there: handed over.
  s.item.BeginAttempt();
  FillContext ctx(ItemRef{}, &counters, nullptr, &s.item);
  s.item.ReadInto(keys, &buffers, &ctx);
  ASSERT_FALSE(s.item.pending());
  for (const ExampleKey& k : keys) {
    std::string bytes;
    int64_t label;
    ASSERT_TRUE(ctx.Read(k, &bytes, &label).ok());
    EXPECT_EQ(static_cast<const void*>(bytes.data()),
              static_cast<const void*>(s.source.At(k.id)));
  }
  s.ra.FinishItem(&s.item);
  s.ra.RemoveLane(s.lane);
}

// The bytes a worker held before (its buffer, given to the entry whose
// bytes it took) are no file's: a later epoch's read ahead of the same file
// must not copy them.
TEST(ReadAheadWorkerTest, AnEntryHandedOverIsNoTwinOfALaterEpoch) {
  constexpr uint64_t kEpoch = 8;  // examples an epoch; the budget holds 5
  ReadAhead ra(Budget(5 * kEpoch * kExampleBytes));
  RecordingReader reader;
  auto stream = ra.AddStream("s", reader.Fn());
  // Example n is position n % kEpoch of epoch n / kEpoch, file n % kEpoch.
  auto key = [](uint64_t n) {
    return ExampleKey{n / kEpoch, n % kEpoch, n % kEpoch};
  };
  const auto lane = ra.AddLane(
      stream,
      [&key](uint64_t step, std::vector<ReadAheadKey>* keys) {
        for (uint64_t i = 0; i < kBatch; ++i)
          keys->push_back(key(step * kBatch + i));
        return true;
      },
      0);
  ra.WaitIdleForTest();  // examples 0..39 buffered
  WorkloadCounters counters;
  // Item a takes example 0's bytes; its worker's buffer held other bytes.
  ReadAheadItem a(stream.get(), lane, 0);
  a.BeginAttempt();
  std::vector<std::string> a_buffers = {std::string(kExampleBytes, 'Z')};
  FillContext a_ctx(ItemRef{}, &counters, nullptr, &a);
  a.ReadInto({key(0)}, &a_buffers, &a_ctx);
  ASSERT_FALSE(a.pending());
  // Item b is done: the lane reads example 40 (file 0) ahead, a copy of a
  // buffered twin's bytes.
  ReadAheadItem b(stream.get(), lane, 0);
  b.BeginAttempt();
  std::vector<std::string> b_buffers;
  FillContext b_ctx(ItemRef{}, &counters, nullptr, &b);
  b.ReadInto({key(1)}, &b_buffers, &b_ctx);
  ra.FinishItem(&b);
  ra.WaitIdleForTest();
  ra.FinishItem(&a);
  EXPECT_EQ(reader.Count(), kEpoch);  // each file read once
  for (uint64_t n = 2; n <= 40; ++n) {
    ra.Decoding(lane, n / kBatch);
    ReadAheadItem item(stream.get(), lane, n / kBatch);
    item.BeginAttempt();
    std::vector<std::string> buffers;
    FillContext ctx(ItemRef{}, &counters, nullptr, &item);
    item.ReadInto({key(n)}, &buffers, &ctx);
    ASSERT_FALSE(item.pending()) << n;
    std::string bytes;
    int64_t label;
    ASSERT_TRUE(ctx.Read(key(n), &bytes, &label).ok());
    EXPECT_EQ(bytes, std::string(kExampleBytes, char('a' + n % kEpoch))) << n;
    ra.FinishItem(&item);
  }
  ra.RemoveLane(lane);
}

}  // namespace
}  // namespace batchd

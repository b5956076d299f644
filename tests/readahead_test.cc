// The read-ahead stage: which reads it issues (only for steps after the one
// being decoded, within the byte budget, shared between streams), that a
// failed or vanished read is reported exactly as a synchronous read, and that
// the engine delivers the same bytes with and without it. No test depends on
// timing: WaitIdleForTest waits until no read can be issued.
#include "server/readahead.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <future>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/clock.h"
#include "ring/ring.h"
#include "server/engine.h"
#include "tests/testutil.h"
#include "workloads/imagenet/image_source.h"

namespace batchd {
namespace {

constexpr uint64_t kBatch = 4;  // examples a step of the fake lane
constexpr uint64_t kExampleBytes = 1000;

// Step s holds positions [s*kBatch, (s+1)*kBatch) of epoch 0, id = position.
LaneOrderFn PlainOrder(uint64_t steps = 1000) {
  return [steps](uint64_t step, std::vector<ReadAheadKey>* keys) {
    if (step >= steps) return false;
    for (uint64_t i = 0; i < kBatch; ++i) {
      keys->push_back({0, step * kBatch + i, step * kBatch + i});
    }
    return true;
  };
}

// A reader that records the ids it was asked for and returns kExampleBytes
// bytes of the id.
struct RecordingReader {
  std::mutex mu;
  std::vector<uint64_t> ids;
  ExampleReadFn Fn() {
    return [this](uint64_t id, std::string* bytes, int64_t* label) {
      {
        std::lock_guard<std::mutex> lock(mu);
        ids.push_back(id);
      }
      bytes->assign(kExampleBytes, char('a' + id % 26));
      *label = int64_t(id);
      return absl::OkStatus();
    };
  }
  std::set<uint64_t> Set() {
    std::lock_guard<std::mutex> lock(mu);
    return std::set<uint64_t>(ids.begin(), ids.end());
  }
  size_t Count() {
    std::lock_guard<std::mutex> lock(mu);
    return ids.size();
  }
};

ReadAhead::Options Budget(uint64_t bytes, int threads = 4) {
  ReadAhead::Options o;
  o.budget_bytes = bytes;
  o.io_threads = threads;
  return o;
}

TEST(ReadAheadTest, OffWhenTheBudgetIsZero) {
  ReadAhead ra(Budget(0));
  RecordingReader reader;
  EXPECT_FALSE(ra.enabled());
  EXPECT_EQ(ra.io_threads(), 0);
  EXPECT_EQ(ra.AddStream("s", reader.Fn()), nullptr);
}

TEST(ReadAheadTest, ReadsOnlyStepsAfterTheDecodedOneWithinTheBudget) {
  ReadAhead ra(Budget(10 * kExampleBytes));
  RecordingReader reader;
  auto stream = ra.AddStream("s", reader.Fn());
  ASSERT_NE(stream, nullptr);
  // The workers decode step 3: read-ahead starts at step 4.
  const ReadAhead::LaneId lane = ra.AddLane(stream, PlainOrder(), 4);
  ra.Decoding(lane, 3);
  ra.WaitIdleForTest();
  // The budget holds 10 examples: steps 4, 5 and half of 6 (the first read
  // is made alone, at a guessed size, then the mean is known).
  std::set<uint64_t> expected;
  for (uint64_t p = 16; p < 26; ++p) expected.insert(p);
  EXPECT_EQ(reader.Set(), expected);
  ReadAheadStats st = stream->stats();
  EXPECT_EQ(st.reads_issued, 10u);
  EXPECT_EQ(st.depth_examples, 10u);
  EXPECT_EQ(st.bytes_buffered, 10 * kExampleBytes);
  EXPECT_EQ(st.bytes_in_flight, 0u);
  EXPECT_EQ(st.min_steps_ahead, 1u);
  EXPECT_EQ(st.max_steps_ahead, 3u);
  EXPECT_LE(st.max_held_bytes, 10 * kExampleBytes);

  // The workers move to step 4 and take its examples: no new read, the
  // freed budget goes to the steps after.
  ra.Decoding(lane, 4);
  for (uint64_t p = 16; p < 20; ++p) {
    std::string bytes;
    int64_t label = -1;
    ASSERT_TRUE(stream->Read(0, p, p, &bytes, &label).ok());
    EXPECT_EQ(bytes, std::string(kExampleBytes, char('a' + p % 26)));
    EXPECT_EQ(label, int64_t(p));
  }
  ra.WaitIdleForTest();
  st = stream->stats();
  EXPECT_EQ(st.hits, 4u);
  EXPECT_EQ(st.sync_reads, 0u);
  EXPECT_EQ(st.reads_issued, 14u);
  EXPECT_EQ(reader.Count(), 14u);  // nothing read twice
  EXPECT_EQ(st.min_steps_ahead, 1u);
  EXPECT_LE(st.max_held_bytes, 10 * kExampleBytes);
  EXPECT_LE(ra.max_total_held_bytes(), 10 * kExampleBytes);
  EXPECT_EQ(st.depth_examples, 10u);

  ra.RemoveLane(lane);
  EXPECT_EQ(stream->stats().depth_examples, 0u);
}

// Blocks every read until Open(), so that lanes can all be added before
// any read lands (a lane's first read is counted at its whole share until
// it lands, so it is the only one in flight).
struct GatedReader : RecordingReader {
  std::mutex gate_mu;
  std::condition_variable gate_cv;
  bool open = false;
  void Open() {
    std::lock_guard<std::mutex> lock(gate_mu);
    open = true;
    gate_cv.notify_all();
  }
  ExampleReadFn Gated() {
    ExampleReadFn inner = Fn();
    return [this, inner](uint64_t id, std::string* b, int64_t* l) {
      std::unique_lock<std::mutex> lock(gate_mu);
      gate_cv.wait(lock, [this] { return open; });
      lock.unlock();
      return inner(id, b, l);
    };
  }
};

TEST(ReadAheadTest, BudgetIsSharedEvenlyBetweenStreams) {
  ReadAhead ra(Budget(16 * kExampleBytes));
  GatedReader a_reader, b_reader;
  auto a = ra.AddStream("a", a_reader.Gated());
  auto b = ra.AddStream("b", b_reader.Gated());
  // Stream a has two ranks, b one: a's ranks get 4 examples each, b 8.
  const auto a0 = ra.AddLane(a, PlainOrder(), 0);
  const auto a1 = ra.AddLane(a, PlainOrder(), 500);
  const auto b0 = ra.AddLane(b, PlainOrder(), 0);
  a_reader.Open();
  b_reader.Open();
  ra.WaitIdleForTest();
  EXPECT_EQ(a->stats().depth_examples, 8u);
  EXPECT_EQ(b->stats().depth_examples, 8u);
  EXPECT_EQ(a->stats().budget_bytes, 8 * kExampleBytes);
  EXPECT_LE(ra.max_total_held_bytes(), 16 * kExampleBytes);
  // A stream that goes gives its share to the other.
  ra.RemoveLane(b0);
  ra.WaitIdleForTest();
  EXPECT_EQ(a->stats().depth_examples, 16u);
  ra.RemoveLane(a0);
  ra.RemoveLane(a1);
}

TEST(ReadAheadTest, FiniteLaneStopsAtItsEnd) {
  ReadAhead ra(Budget(1000 * kExampleBytes));
  RecordingReader reader;
  auto stream = ra.AddStream("s", reader.Fn());
  ra.AddLane(stream, PlainOrder(3), 0);
  ra.WaitIdleForTest();
  EXPECT_EQ(reader.Count(), 3 * kBatch);
}

// Issue 26: a stream whose epoch fits its budget many times read every
// file again for each epoch it held.
TEST(ReadAheadTest, AnEpochThatFitsTheBudgetManyTimesIsReadOnce) {
  constexpr uint64_t kEpoch = 8;  // examples an epoch; the budget holds 5
  ReadAhead ra(Budget(5 * kEpoch * kExampleBytes));
  RecordingReader reader;
  auto stream = ra.AddStream("s", reader.Fn());
  // Step s holds examples [s*kBatch, (s+1)*kBatch) of the endless order;
  // example n is position n % kEpoch of epoch n / kEpoch, file n % kEpoch.
  const auto lane = ra.AddLane(
      stream,
      [](uint64_t step, std::vector<ReadAheadKey>* keys) {
        for (uint64_t i = 0; i < kBatch; ++i) {
          const uint64_t n = step * kBatch + i;
          keys->push_back({n / kEpoch, n % kEpoch, n % kEpoch});
        }
        return true;
      },
      0);
  ra.WaitIdleForTest();
  // Ten epochs decoded, every example taken from the read-ahead.
  for (uint64_t step = 0; step < 10 * kEpoch / kBatch; ++step) {
    ra.Decoding(lane, step);
    for (uint64_t i = 0; i < kBatch; ++i) {
      const uint64_t n = step * kBatch + i;
      std::string bytes;
      int64_t label = -1;
      ASSERT_TRUE(
          stream->Read(n / kEpoch, n % kEpoch, n % kEpoch, &bytes, &label)
              .ok());
      EXPECT_EQ(bytes, std::string(kExampleBytes, char('a' + n % kEpoch)));
      EXPECT_EQ(label, int64_t(n % kEpoch));
    }
    ra.WaitIdleForTest();
  }
  EXPECT_EQ(reader.Count(), kEpoch);  // each file read once
  const ReadAheadStats st = stream->stats();
  EXPECT_EQ(st.sync_reads, 0u);
  EXPECT_EQ(st.hits, 10 * kEpoch);
  EXPECT_GE(st.copies, 9 * kEpoch);
  ra.RemoveLane(lane);
}

// Issue 26: on local storage, reading ahead cost ImageNet 6-19 %: every
// read hopped to an I/O thread and back. Reads that return at once are
// made inline by the worker, and nothing is read ahead for them; slow ones
// turn reading ahead back on.
TEST(ReadAheadTest, ReadsThatReturnAtOnceAreMadeInlineUntilReadsAreSlow) {
  ReadAhead::Options o = Budget(1000 * kExampleBytes, 2);
  o.inline_read_ns = 50 * 1000 * 1000;  // 50 ms: these reads take us
  ReadAhead ra(o);
  RecordingReader reader;
  std::atomic<int> delay_ms{0};
  ExampleReadFn fast = reader.Fn();
  auto stream = ra.AddStream("s", [&delay_ms, fast](uint64_t id, std::string* b,
                                                    int64_t* l) {
    if (delay_ms.load() > 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms.load()));
    }
    return fast(id, b, l);
  });
  const auto lane = ra.AddLane(stream, PlainOrder(), 0);
  ra.WaitIdleForTest();
  // The budget holds 1000 examples; reading ahead stopped once
  // kFastReadsForInline reads in a row had returned at once (those in
  // flight then, one a thread, landed too).
  const uint64_t ahead = stream->stats().reads_issued;
  EXPECT_GE(ahead, ReadAhead::kFastReadsForInline);
  EXPECT_LE(ahead, ReadAhead::kFastReadsForInline + 2);
  // A worker's read of what is not read ahead is made at once, inline.
  ReadAheadItem item(stream.get(), lane, 100);
  std::string bytes;
  int64_t label = -1;
  item.BeginAttempt();
  ASSERT_TRUE(item.Read({0, 400, 400}, &bytes, &label).ok());
  EXPECT_FALSE(item.pending());
  EXPECT_EQ(bytes, std::string(kExampleBytes, char('a' + 400 % 26)));
  EXPECT_EQ(stream->stats().inline_reads, 1u);
  // The storage slows down: the reads that show it (six: a few are noise
  // on a busy machine) are still the worker's; then a read not read ahead
  // is pending, and reads go ahead again.
  delay_ms.store(100);
  for (uint64_t p = 401; p <= 406; ++p) {
    ASSERT_TRUE(item.Read({0, p, p}, &bytes, &label).ok());
  }
  EXPECT_EQ(stream->stats().inline_reads, 7u);
  ra.FinishItem(&item);
  ReadAheadItem later(stream.get(), lane, 101);
  later.BeginAttempt();
  EXPECT_TRUE(IsReadPending(later.Read({0, 900, 900}, &bytes, &label)));
  EXPECT_EQ(stream->stats().inline_reads, 7u);
  delay_ms.store(0);
  ra.Decoding(lane, 100);
  ra.WaitIdleForTest();
  EXPECT_GT(stream->stats().reads_issued, ahead);
  ra.FinishItem(&later);
  ra.RemoveLane(lane);
}

// A tree with one file per example, read by the ImageFolder source: the
// read-ahead must report what the source reports.
class FileTreeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(mkdir((dir_ + "/c").c_str(), 0755), 0);
    for (int i = 0; i < 8; ++i) {
      std::ofstream(Path(i)) << "image " << i;
    }
    auto src = OpenImageFolder(dir_, false);
    ASSERT_TRUE(src.ok()) << src.status();
    source_ = std::move(*src);
  }
  std::string Path(int i) const { return absl::StrCat(dir_, "/c/", i, ".jpg"); }
  ExampleReadFn Reader() const {
    return [src = source_.get()](uint64_t id, std::string* b, int64_t* l) {
      return src->Read(id, b, l);
    };
  }
  testutil::TempDir tmp_{"readahead"};
  const std::string dir_ = tmp_.path();
  std::unique_ptr<ImageSource> source_;
};

TEST_F(FileTreeTest, FileDeletedBeforeTheReadAheadFailsAsASynchronousRead) {
  ReadAhead ra(Budget(1 << 20));
  auto stream = ra.AddStream("s", Reader());
  // Example 5 (step 1 of a 4-example lane) vanishes before it is read.
  ASSERT_EQ(unlink(Path(5).c_str()), 0);
  std::string direct_bytes;
  int64_t direct_label;
  const absl::Status direct = source_->Read(5, &direct_bytes, &direct_label);
  ASSERT_FALSE(direct.ok());
  const auto lane = ra.AddLane(stream, PlainOrder(2), 1);
  ra.Decoding(lane, 0);
  ra.WaitIdleForTest();
  EXPECT_EQ(stream->stats().failed_reads, 1u);
  ra.Decoding(lane, 1);
  std::string bytes;
  int64_t label;
  const absl::Status st = stream->Read(0, 5, 5, &bytes, &label);
  EXPECT_EQ(st, direct);  // same code, same message
  EXPECT_EQ(stream->stats().sync_reads, 1u);
  // The others came from the read-ahead.
  ASSERT_TRUE(stream->Read(0, 4, 4, &bytes, &label).ok());
  EXPECT_EQ(bytes, "image 4");
  EXPECT_EQ(stream->stats().hits, 1u);
}

TEST_F(FileTreeTest, FileDeletedAfterTheReadAheadKeepsTheBytesRead) {
  ReadAhead ra(Budget(1 << 20));
  auto stream = ra.AddStream("s", Reader());
  const auto lane = ra.AddLane(stream, PlainOrder(2), 1);
  ra.Decoding(lane, 0);
  ra.WaitIdleForTest();
  // Read before the delete, as a synchronous read that came first would
  // have been: the bytes stand.
  ASSERT_EQ(unlink(Path(6).c_str()), 0);
  ra.Decoding(lane, 1);
  std::string bytes;
  int64_t label;
  ASSERT_TRUE(stream->Read(0, 6, 6, &bytes, &label).ok());
  EXPECT_EQ(bytes, "image 6");
  // A file that is read again (its read ahead was taken) fails as the
  // source fails.
  std::string direct_bytes;
  EXPECT_EQ(stream->Read(0, 6, 6, &bytes, &label),
            source_->Read(6, &direct_bytes, &label));
}

TEST(ReadAheadTest, FailedReadAheadIsReadAgainByTheWorker) {
  ReadAhead ra(Budget(1 << 20));
  std::atomic<int> calls{0};
  // The first read of id 2 fails (a transient EIO); later ones succeed.
  auto stream =
      ra.AddStream("s", [&calls](uint64_t id, std::string* b, int64_t* l) {
        if (id == 2 && calls.fetch_add(1) == 0) {
          return absl::InternalError("cannot read x: Input/output error");
        }
        b->assign("ok");
        *l = 0;
        return absl::OkStatus();
      });
  const auto lane = ra.AddLane(stream, PlainOrder(1), 0);
  ra.WaitIdleForTest();
  ra.Decoding(lane, 0);
  std::string bytes;
  int64_t label;
  EXPECT_TRUE(stream->Read(0, 2, 2, &bytes, &label).ok());
  EXPECT_EQ(calls.load(), 2);
  EXPECT_EQ(stream->stats().failed_reads, 1u);
}

// The engine over a workload whose examples are stored bytes: example id
// is 64 bytes derived from the id; FillItem copies them into the slot.
class StoredBytesWorkload : public Workload {
 public:
  static constexpr int kBytes = 64;
  explicit StoredBytesWorkload(uint64_t n) : n_(n) {
    tensors_ = {{"bytes", DType::kUInt8, {kBytes}}};
  }
  uint64_t num_examples() const override { return n_; }
  bool shuffle() const override { return true; }
  const std::vector<TensorLayout>& tensors() const override { return tensors_; }
  const ExampleSource* source() const override { return &stored_; }
  absl::Status FillItem(FillContext& ctx, uint8_t* const* out) const override {
    std::string bytes;
    int64_t label;
    absl::Status st = ctx.Read(ctx.key(), &bytes, &label);
    if (!st.ok()) return st;
    memcpy(out[0], bytes.data(), kBytes);
    return absl::OkStatus();
  }
  mutable std::atomic<uint64_t> reads{0};

 protected:
  virtual absl::Status ReadStored(uint64_t id, std::string* b,
                                  int64_t* l) const {
    reads.fetch_add(1);
    b->resize(kBytes);
    for (int i = 0; i < kBytes; ++i) (*b)[i] = char((id * 131 + i * 7) & 0xff);
    *l = 0;
    return absl::OkStatus();
  }
  class Stored : public ExampleSource {
   public:
    explicit Stored(const StoredBytesWorkload* w) : w_(*w) {}
    absl::Status Read(const ExampleKey& key, std::string* b,
                      int64_t* l) const override {
      return w_.ReadStored(key.id, b, l);
    }
    std::string Describe(const ExampleKey& key) const override {
      return w_.DescribeStored(key.id);
    }

   private:
    const StoredBytesWorkload& w_;
  };
  virtual std::string DescribeStored(uint64_t id) const {
    return absl::StrCat("example ", id);
  }
  uint64_t n_;
  std::vector<TensorLayout> tensors_;
  const Stored stored_{this};
};

struct EngineRun {
  std::vector<std::string> batches;  // global batches, ranks concatenated
  ReadAheadStats stats;
  uint64_t max_total_held = 0;
  uint64_t reads = 0;
};

EngineRun RunEngine(uint64_t budget, uint32_t w, uint64_t start, int steps) {
  const uint64_t g = 8, n = 101;
  auto sampler = Sampler::Create(n, g, w, 5, true);
  EXPECT_TRUE(sampler.ok());
  auto owned = std::make_unique<StoredBytesWorkload>(n);
  StoredBytesWorkload* workload = owned.get();
  BatchLayout layout = *BatchLayout::Make(owned->tensors(), g / w);
  ReadAhead ra(Budget(budget));
  EngineRun run;
  {
    auto stream = std::make_shared<StreamSetup>("s", std::move(owned),
                                                *sampler, layout);
    Engine engine(2, &ra);
    EXPECT_TRUE(engine.Prepare(stream.get()).ok());
    EXPECT_EQ(stream->readahead != nullptr, budget > 0);
    std::vector<std::unique_ptr<RingReader>> readers;
    std::vector<std::shared_ptr<RankProducer>> producers;
    for (uint32_t r = 0; r < w; ++r) {
      RingGeometry geo;
      geo.slot_count = 2;
      geo.payload_bytes = layout.payload_bytes;
      const std::string name = absl::StrCat("/bdreadahead", getpid(), ".", r);
      auto ring = RingWriter::Create(name, geo);
      EXPECT_TRUE(ring.ok()) << ring.status();
      readers.push_back(std::move(*RingReader::Attach(name)));
      producers.push_back(
          std::make_shared<RankProducer>(stream, r, start, std::move(*ring),
                                         SharedSchedule(stream)));
      engine.Add(producers.back());
    }
    for (int s = 0; s < steps; ++s) {
      std::string batch;
      for (uint32_t r = 0; r < w; ++r) {
        // Let the read-ahead run to its budget (not a race with the
        // workers, who would otherwise read everything themselves).
        if (budget > 0) ra.WaitIdleForTest();
        absl::StatusOr<uint64_t> pos = readers[r]->Acquire(10.0);
        EXPECT_TRUE(pos.ok()) << pos.status();
        if (!pos.ok()) return run;
        EXPECT_EQ(readers[r]->Slot(*pos)->step, start + s);
        batch.append(reinterpret_cast<const char*>(readers[r]->SlotBase(*pos) +
                                                   layout.entries[0].offset),
                     (g / w) * StoredBytesWorkload::kBytes);
        readers[r]->Release(*pos);
      }
      run.batches.push_back(batch);
    }
    if (stream->readahead != nullptr) run.stats = stream->readahead->stats();
    run.max_total_held = ra.max_total_held_bytes();
    for (auto& p : producers) engine.Retire(p);
    engine.Stop();
    run.reads = workload->reads.load();
  }
  return run;
}

TEST(ReadAheadEngineTest, SameBytesWithAndWithoutReadAheadFromAResumePoint) {
  const EngineRun off = RunEngine(0, 2, 7, 30);
  // 40 examples of 64 bytes over 2 ranks: 20 a rank, 5 batches.
  const EngineRun on = RunEngine(40 * StoredBytesWorkload::kBytes, 2, 7, 30);
  ASSERT_EQ(off.batches.size(), 30u);
  EXPECT_EQ(off.batches, on.batches);
  EXPECT_EQ(off.stats.reads_issued, 0u);
  // Reads were issued ahead, only for steps after the decoded one, and the
  // workers took them.
  EXPECT_GT(on.stats.reads_issued, 0u);
  EXPECT_GE(on.stats.min_steps_ahead, 1u);
  EXPECT_GT(on.stats.max_steps_ahead, 1u);
  EXPECT_GT(on.stats.hits, 0u);
  EXPECT_LE(on.stats.max_held_bytes, on.stats.max_lane_share);
  EXPECT_LE(on.max_total_held, 40u * StoredBytesWorkload::kBytes);
}

// ------------------------------------------- workers never wait (issue 22)

// Blocks every read while closed, like a mount that stops answering;
// `entered` counts the reads that reached it.
struct Gate {
  std::mutex mu;
  std::condition_variable cv;
  bool open = true;
  int entered = 0;
  void Set(bool o) {
    std::lock_guard<std::mutex> lock(mu);
    open = o;
    cv.notify_all();
  }
  void Pass() {
    std::unique_lock<std::mutex> lock(mu);
    ++entered;
    cv.notify_all();
    cv.wait(lock, [this] { return open; });
  }
  bool WaitEntered(int n, double seconds) {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, std::chrono::duration<double>(seconds),
                       [&] { return entered >= n; });
  }
};

TEST(ReadAheadTest, AReadInAnItemScopeNeverWaitsAndIsKeptForTheNextAttempt) {
  ReadAhead ra(Budget(1 << 20));
  RecordingReader reader;
  auto stream = ra.AddStream("s", reader.Fn());
  ReadAheadItem item(stream.get(), 0, 0);
  std::string bytes;
  int64_t label = -1;
  {
    item.BeginAttempt();
    EXPECT_TRUE(IsReadPending(item.Read({0, 7, 7}, &bytes, &label)));
  }
  ASSERT_TRUE(item.pending());
  for (int i = 0; i < 3000 && !item.landed(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_TRUE(item.landed());
  // The next attempt finds the bytes, as often as it asks, until the item
  // is finished.
  for (int attempt = 0; attempt < 2; ++attempt) {
    item.BeginAttempt();
    ASSERT_TRUE(item.Read({0, 7, 7}, &bytes, &label).ok());
    EXPECT_EQ(bytes, std::string(kExampleBytes, char('a' + 7)));
    EXPECT_EQ(label, 7);
  }
  EXPECT_FALSE(item.pending());
  // Kept for the item until it is finished: a read on demand, not ahead.
  EXPECT_EQ(stream->stats().on_demand_examples, 1u);
  EXPECT_EQ(stream->stats().depth_examples, 0u);
  ra.FinishItem(&item);
  EXPECT_EQ(stream->stats().on_demand_examples, 0u);
  EXPECT_EQ(stream->stats().sync_reads, 1u);
  EXPECT_EQ(reader.Count(), 1u);
}

TEST(ReadAheadTest, ThreadsStartWhenReadsWaitAndEndWhenIdle) {
  ReadAhead ra(Budget(100 * kExampleBytes, 4));
  EXPECT_EQ(ra.live_threads(), 0);  // none before any stream reads
  RecordingReader reader;
  auto stream = ra.AddStream("s", reader.Fn());
  EXPECT_EQ(ra.live_threads(), 0);
  const auto lane = ra.AddLane(stream, PlainOrder(), 0);
  ra.WaitIdleForTest();
  EXPECT_GE(ra.live_threads(), 1);
  EXPECT_LE(ra.live_threads(), 4);
  ra.RemoveLane(lane);
  // Idle threads end after kIdleExitSeconds.
  for (int i = 0; i < 3000 && ra.live_threads() > 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(ra.live_threads(), 0);
}

TEST(ReadAheadTest, AStreamGoesAndStopEndsWithoutAReadThatDoesNotReturn) {
  auto gate = std::make_shared<Gate>();
  auto ra = std::make_unique<ReadAhead>(Budget(1 << 20, 2));
  struct Reopen {
    Gate& gate;
    ~Reopen() { gate.Set(true); }
  } reopen{*gate};
  gate->Set(false);
  auto stream = ra->AddStream(
      "s", [gate](uint64_t id, std::string* b, int64_t* l) {
        gate->Pass();
        b->assign("x");
        *l = 0;
        return absl::OkStatus();
      });
  ra->AddLane(stream, PlainOrder(), 0);
  ASSERT_TRUE(gate->WaitEntered(1, 30));
  // The stream goes while its read is stuck: nothing waits for that read.
  auto gone = std::async(std::launch::async, [&stream] { stream.reset(); });
  EXPECT_EQ(gone.wait_for(std::chrono::seconds(30)),
            std::future_status::ready);
  // Stop gives up on it at its deadline.
  EXPECT_FALSE(ra->Stop(MonotonicNanos() + 200 * 1000 * 1000));
  gate->Set(true);  // the mount answers: the threads end, and may go
  EXPECT_TRUE(ra->Stop());
  ra.reset();
}

// Stored bytes whose reads pass through a gate; files are named.
class GatedWorkload : public StoredBytesWorkload {
 public:
  GatedWorkload(uint64_t n, std::shared_ptr<Gate> gate)
      : StoredBytesWorkload(n), gate_(std::move(gate)) {}

 protected:
  absl::Status ReadStored(uint64_t id, std::string* b,
                          int64_t* l) const override {
    gate_->Pass();
    return StoredBytesWorkload::ReadStored(id, b, l);
  }
  std::string DescribeStored(uint64_t id) const override {
    return absl::StrCat("/mnt/stalled/file-", id);
  }

 private:
  const std::shared_ptr<Gate> gate_;
};

TEST(ReadAheadEngineTest, AStalledStreamHoldsNoWorkerAndFailsNamingTheFile) {
  const uint64_t g = 4, n = 64;
  auto sampler = Sampler::Create(n, g, 1, 5, true);
  ASSERT_TRUE(sampler.ok());
  auto gate = std::make_shared<Gate>();
  auto stalled_owned = std::make_unique<GatedWorkload>(n, gate);
  auto local_owned = std::make_unique<StoredBytesWorkload>(n);
  const BatchLayout layout = *BatchLayout::Make(local_owned->tensors(), g);
  ReadAhead ra(Budget(16 * StoredBytesWorkload::kBytes));
  // Whatever fails below, the mount answers before the read-ahead goes.
  struct Reopen {
    Gate& gate;
    ~Reopen() { gate.Set(true); }
  } reopen{*gate};
  {
    auto stalled = std::make_shared<StreamSetup>(
        "stalled", std::move(stalled_owned), *sampler, layout);
    auto local = std::make_shared<StreamSetup>(
        "local", std::move(local_owned), *sampler, layout);
    // One worker: had it waited for the stalled stream's read, the other
    // stream would get nothing.
    Engine engine(1, &ra, 3);
    ASSERT_TRUE(engine.Prepare(stalled.get()).ok());
    ASSERT_TRUE(engine.Prepare(local.get()).ok());
    gate->Set(false);  // the stalled stream's storage stops answering
    std::vector<std::unique_ptr<RingReader>> readers;
    std::vector<std::shared_ptr<RankProducer>> producers;
    for (const auto& setup : {stalled, local}) {
      RingGeometry geo;
      geo.slot_count = 2;
      geo.payload_bytes = layout.payload_bytes;
      const std::string name =
          absl::StrCat("/bdstall", getpid(), ".", setup->name);
      auto ring = RingWriter::Create(name, geo);
      ASSERT_TRUE(ring.ok()) << ring.status();
      readers.push_back(std::move(*RingReader::Attach(name)));
      producers.push_back(
          std::make_shared<RankProducer>(setup, 0, 0, std::move(*ring),
                                         SharedSchedule(setup)));
      engine.Add(producers.back());
    }
    // The server's heartbeat, as the core's thread beats it: the clients
    // below wait longer than a heartbeat may be old.
    std::atomic<bool> beating{true};
    std::thread heart([&] {
      while (beating.load()) {
        for (auto& p : producers) p->ring().Heartbeat(MonotonicNanos());
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
    });
    struct Join {
      std::atomic<bool>& beating;
      std::thread& heart;
      ~Join() {
        beating.store(false);
        heart.join();
      }
    } join{beating, heart};
    ASSERT_TRUE(gate->WaitEntered(1, 30));
    for (int s = 0; s < 20; ++s) {
      absl::StatusOr<uint64_t> pos = readers[1]->Acquire(30.0);
      ASSERT_TRUE(pos.ok()) << "step " << s << ": " << pos.status();
      EXPECT_EQ(readers[1]->Slot(*pos)->step, uint64_t(s));
      readers[1]->Release(*pos);
    }
    absl::StatusOr<uint64_t> got = readers[0]->Acquire(60.0);
    ASSERT_FALSE(got.ok());
    const std::string why(got.status().message());
    EXPECT_NE(why.find("step 0 failed: storage stalled: reading "
                       "/mnt/stalled/file-"),
              std::string::npos)
        << why;
    EXPECT_NE(why.find("has not returned for"), std::string::npos) << why;
    EXPECT_NE(why.find("(--read-stall-seconds 3)"), std::string::npos)
        << why;
    EXPECT_TRUE(producers[0]->failed.load());
    EXPECT_FALSE(producers[1]->failed.load());
    gate->Set(true);
    for (auto& p : producers) engine.Retire(p);
    EXPECT_TRUE(engine.Stop());
  }
}

}  // namespace
}  // namespace batchd

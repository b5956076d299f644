// The engine with read-ahead on: the same bytes with and without it, from a
// resume point; a stream whose storage stops answering holds no worker and
// fails naming the file; a stream goes, and the read-ahead stops, without
// waiting for a read that does not return. No test depends on timing.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <future>
#include <memory>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/clock.h"
#include "ring/ring.h"
#include "server/engine.h"
#include "server/readahead.h"
#include "tests/readahead_testutil.h"
#include "tests/testutil.h"

namespace batchd {
namespace {

using readahead_testutil::Budget;
using readahead_testutil::Gate;
using readahead_testutil::PlainOrder;

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
  auto owned = std::make_unique<StoredBytesWorkload>(n);
  StoredBytesWorkload* workload = owned.get();
  ReadAhead ra(Budget(budget));
  EngineRun run;
  {
    testutil::ServedStream served("s", std::move(owned), g, w, 5, &ra, start);
    if (!served.ok()) return run;
    EXPECT_EQ(served.stream().readahead != nullptr, budget > 0);
    for (int s = 0; s < steps; ++s) {
      std::string batch;
      for (uint32_t r = 0; r < w; ++r) {
        // Let the read-ahead run to its budget (not a race with the
        // workers, who would otherwise read everything themselves).
        if (budget > 0) ra.WaitIdleForTest();
        absl::StatusOr<testutil::RankBatch> got = served.Next(r, 10.0);
        EXPECT_TRUE(got.ok()) << got.status();
        if (!got.ok()) return run;
        EXPECT_EQ(got->step, start + s);
        batch += got->tensors[0];
      }
      run.batches.push_back(batch);
    }
    if (served.stream().readahead != nullptr) {
      run.stats = served.stream().readahead->stats();
    }
    run.max_total_held = ra.max_total_held_bytes();
    served.Stop();
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

TEST(ReadAheadTest, AStreamGoesAndStopEndsWithoutAReadThatDoesNotReturn) {
  auto gate = std::make_shared<Gate>();
  auto ra = std::make_unique<ReadAhead>(Budget(1 << 20, 2));
  struct Reopen {
    Gate& gate;
    ~Reopen() { gate.Set(true); }
  } reopen{*gate};
  gate->Set(false);
  auto stream =
      ra->AddStream("s", [gate](uint64_t id, std::string* b, int64_t* l) {
        gate->Pass();
        b->assign("x");
        *l = 0;
        return absl::OkStatus();
      });
  ra->AddLane(stream, PlainOrder(), 0);
  ASSERT_TRUE(gate->WaitEntered(1, 30));
  // The stream goes while its read is stuck: nothing waits for that read.
  auto gone = std::async(std::launch::async, [&stream] { stream.reset(); });
  EXPECT_EQ(gone.wait_for(std::chrono::seconds(30)), std::future_status::ready);
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
    auto local = std::make_shared<StreamSetup>("local", std::move(local_owned),
                                               *sampler, layout);
    // One worker: had it waited for the stalled stream's read, the other
    // stream would get nothing.
    Engine engine(1, &ra, 3);
    ASSERT_TRUE(engine.Prepare(stalled.get()).ok());
    ASSERT_TRUE(engine.Prepare(local.get()).ok());
    gate->Set(false);  // the stalled stream's storage stops answering
    testutil::ServedRanks stalled_rank(stalled, 1), local_rank(local, 1);
    ASSERT_TRUE(stalled_rank.ok() && local_rank.ok());
    stalled_rank.AddTo(engine);
    local_rank.AddTo(engine);
    const std::shared_ptr<RankProducer> producers[] = {
        stalled_rank.producers()[0], local_rank.producers()[0]};
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
      absl::StatusOr<testutil::RankBatch> batch = local_rank.Next(0, 30.0);
      ASSERT_TRUE(batch.ok()) << "step " << s << ": " << batch.status();
      EXPECT_EQ(batch->step, uint64_t(s));
    }
    absl::StatusOr<testutil::RankBatch> got = stalled_rank.Next(0, 60.0);
    ASSERT_FALSE(got.ok());
    const std::string why(got.status().message());
    EXPECT_NE(why.find("step 0 failed: storage stalled: reading "
                       "/mnt/stalled/file-"),
              std::string::npos)
        << why;
    EXPECT_NE(why.find("has not returned for"), std::string::npos) << why;
    EXPECT_NE(why.find("(--read-stall-seconds 3)"), std::string::npos) << why;
    EXPECT_TRUE(producers[0]->failed.load());
    EXPECT_FALSE(producers[1]->failed.load());
    gate->Set(true);
    stalled_rank.Retire();
    local_rank.Retire();
    EXPECT_TRUE(engine.Stop());
  }
}

}  // namespace
}  // namespace batchd

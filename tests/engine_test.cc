// The engine with a row-packing workload: batches are made of rows, rows of
// examples in the epoch's order; the result must not depend on threads,
// world size or where the stream starts.
#include "server/engine.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "base/clock.h"
#include "ring/ring.h"
#include "workloads/packed_schedule.h"
#include "workloads/synthetic.h"

namespace batchd {
namespace {

// Examples have length 1 + id % 7; windows of 4 consecutive examples are
// packed greedily into rows of capacity 10. A row lists its example ids
// (kMaxIds slots, unused = -1).
constexpr int kWindow = 4, kCapacity = 10, kMaxIds = 10;

uint64_t Length(uint64_t id) { return 1 + id % 7; }

// The rows of one epoch, from scratch: the rule, written plainly.
std::vector<std::vector<int64_t>> PlainRows(const EpochOrder& order) {
  std::vector<std::vector<int64_t>> rows;
  for (uint64_t w = 0; w * kWindow < order.num_examples; ++w) {
    std::vector<int64_t> row;
    uint64_t used = 0;
    for (uint64_t p = w * kWindow;
         p < std::min<uint64_t>((w + 1) * kWindow, order.num_examples); ++p) {
      const uint64_t id = order.id_at(p);
      if (used + Length(id) > kCapacity) {
        rows.push_back(row);
        row.clear();
        used = 0;
      }
      row.push_back(int64_t(id));
      used += Length(id);
    }
    if (!row.empty()) rows.push_back(row);
  }
  return rows;
}

class FakePackedWorkload : public Workload, public RowPacking {
 public:
  explicit FakePackedWorkload(uint64_t n) : n_(n) {
    tensors_ = {{"ids", DType::kInt64, {kMaxIds}}};
  }
  uint64_t num_examples() const override { return n_; }
  bool shuffle() const override { return true; }
  const std::vector<TensorLayout>& tensors() const override {
    return tensors_;
  }
  std::unique_ptr<Schedule> MakeSchedule(
      const Sampler& sampler) const override {
    // Counts on the executor of code outside a daemon.
    return std::make_unique<PackedSchedule>(*this, sampler,
                                            Executor::Default());
  }
  absl::Status FillItem(FillContext& ctx, uint8_t* const* out) const override {
    const ItemRef& item = ctx.item();
    return FillRow(ShuffledOrder(n_, item.seed, item.epoch), item.position, out,
                   ctx.counters());
  }
  absl::StatusOr<uint64_t> RowsInEpoch(const EpochOrder& o) const override {
    return PlainRows(o).size();
  }
  absl::StatusOr<RowCursor> CursorOfRow(const EpochOrder& o,
                                        uint64_t row) const override {
    return RowCursor{o.epoch, row, 0};  // the fake's cursor: the row itself
  }
  absl::StatusOr<uint64_t> RowAtCursor(const EpochOrder& o, const RowCursor& c,
                                       const StopFlag*) const override {
    return c.window;
  }
  absl::Status FillRow(const EpochOrder& o, uint64_t row, uint8_t* const* out,
                       WorkloadCounters*) const override {
    const auto rows = PlainRows(o);
    if (row >= rows.size()) return absl::OutOfRangeError("row");
    int64_t ids[kMaxIds];
    std::fill(ids, ids + kMaxIds, -1);
    std::copy(rows[row].begin(), rows[row].end(), ids);
    memcpy(out[0], ids, sizeof(ids));
    return absl::OkStatus();
  }

 private:
  uint64_t n_;
  std::vector<TensorLayout> tensors_;
};

// A workload that learns an epoch's rows as it goes, as WMT does while its
// length pass runs: RowsUpTo knows two rows past what is asked (the whole
// epoch once that reaches its end), and filling a row it has not said it
// knows is an error. With `latch`, an epoch's rows beyond its first
// kLatchedRows stay unknown until a row of it has been filled, whatever
// the schedule asks: every epoch's first step is then served while the
// epoch is partly known, however the threads interleave (a stream that
// starts at its first epoch's first step needs no more than that).
class ProgressiveWorkload : public FakePackedWorkload {
 public:
  static constexpr uint64_t kLatchedRows = 10;  // > one batch of 8 rows
  ProgressiveWorkload(uint64_t n, bool latch)
      : FakePackedWorkload(n), latch_(latch) {}
  absl::StatusOr<KnownRows> RowsUpTo(const EpochOrder& o, uint64_t want,
                                     const StopFlag*) const override {
    const uint64_t total = PlainRows(o).size();
    uint64_t rows = std::min(total, want + 2);
    std::lock_guard<std::mutex> lock(mu_);
    if (latch_ && filled_partly_.count(o.epoch) == 0) {
      rows = std::min(rows, kLatchedRows);
    }
    uint64_t& k = known_[o.epoch];
    k = std::max(k, rows);
    return KnownRows{k, k == total};
  }
  absl::Status FillRow(const EpochOrder& o, uint64_t row, uint8_t* const* out,
                       WorkloadCounters* c) const override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      const uint64_t known = known_[o.epoch];
      if (row >= known) {
        return absl::InternalError("a row of the epoch not known yet");
      }
      filled_[o.epoch] = true;
      if (known < PlainRows(o).size()) filled_partly_[o.epoch] = true;
    }
    return FakePackedWorkload::FillRow(o, row, out, c);
  }
  // Epochs a row was filled from, and those of them filled while only
  // partly known.
  uint64_t epochs_filled() const {
    std::lock_guard<std::mutex> lock(mu_);
    return filled_.size();
  }
  uint64_t epochs_filled_partly() const {
    std::lock_guard<std::mutex> lock(mu_);
    return filled_partly_.size();
  }

 private:
  const bool latch_;
  mutable std::mutex mu_;
  mutable std::map<uint64_t, uint64_t> known_;  // epoch -> rows known
  mutable std::map<uint64_t, bool> filled_, filled_partly_;
};

// Runs the engine for `steps` global batches of W ranks and returns each
// global batch's rows (rank order), plus each batch's epoch. `progressive`:
// the workload is a ProgressiveWorkload, whose partial answers are counted
// into *partly (epochs filled, and of them filled while partly known).
struct Partly {
  uint64_t epochs = 0, partly = 0;
};
std::vector<std::vector<std::vector<int64_t>>> RunEngine(
    int threads, uint32_t w, uint64_t start, int steps,
    bool progressive = false, Partly* partly = nullptr) {
  const uint64_t g = 8, n = 101;
  auto sampler = Sampler::Create(n, g, w, 77, true);
  EXPECT_TRUE(sampler.ok());
  // The latch needs a stream that begins at its first epoch's first step.
  std::unique_ptr<FakePackedWorkload> workload =
      progressive ? std::make_unique<ProgressiveWorkload>(n, start == 0)
                  : std::make_unique<FakePackedWorkload>(n);
  const auto* as_progressive =
      dynamic_cast<const ProgressiveWorkload*>(workload.get());
  BatchLayout layout = *BatchLayout::Make(workload->tensors(), g / w);
  auto stream = std::make_shared<StreamSetup>("packed", std::move(workload),
                                              *sampler, layout);
  Engine engine(threads);
  std::vector<std::unique_ptr<RingReader>> readers;
  std::vector<std::shared_ptr<RankProducer>> producers;
  for (uint32_t r = 0; r < w; ++r) {
    RingGeometry geo;
    geo.slot_count = 3;
    geo.payload_bytes = layout.payload_bytes;
    const std::string name = "/bdengine" + std::to_string(getpid()) + "." +
                             std::to_string(r);
    auto ring = RingWriter::Create(name, geo);
    EXPECT_TRUE(ring.ok()) << ring.status();
    readers.push_back(std::move(*RingReader::Attach(name)));
    producers.push_back(std::make_shared<RankProducer>(
        stream, r, start, std::move(*ring), SharedSchedule(stream)));
    engine.Add(producers.back());
  }
  std::vector<std::vector<std::vector<int64_t>>> out(steps);
  for (int s = 0; s < steps; ++s) {
    for (uint32_t r = 0; r < w; ++r) {
      absl::StatusOr<uint64_t> pos = readers[r]->Acquire(10.0);
      EXPECT_TRUE(pos.ok()) << pos.status();
      if (!pos.ok()) return {};
      EXPECT_EQ(readers[r]->Slot(*pos)->step, start + s);
      const int64_t* ids = reinterpret_cast<const int64_t*>(
          readers[r]->SlotBase(*pos) + layout.entries[0].offset);
      for (uint64_t row = 0; row < g / w; ++row) {
        out[s].emplace_back(ids + row * kMaxIds, ids + (row + 1) * kMaxIds);
      }
      readers[r]->Release(*pos);
    }
  }
  for (auto& p : producers) engine.Retire(p);
  engine.Stop();
  if (partly != nullptr && as_progressive != nullptr) {
    partly->epochs = as_progressive->epochs_filled();
    partly->partly = as_progressive->epochs_filled_partly();
  }
  return out;
}

TEST(EngineTest, PackedRowsFollowTheEpochOrderAcrossEpochs) {
  auto batches = RunEngine(2, 1, 0, 12);
  ASSERT_EQ(batches.size(), 12u);
  // Rebuild the expected stream of rows, epoch after epoch, dropping each
  // epoch's remainder.
  std::vector<std::vector<int64_t>> expected;
  for (uint64_t e = 0; expected.size() < 12 * 8; ++e) {
    EpochOrder o;
    o.seed = 77;
    o.epoch = e;
    o.num_examples = 101;
    const EpochPermutation perm(101, 77, e);
    o.id_at = [&perm](uint64_t p) { return perm(p); };
    auto rows = PlainRows(o);
    rows.resize(rows.size() / 8 * 8);
    for (auto& r : rows) {
      r.resize(kMaxIds, -1);
      expected.push_back(r);
    }
  }
  for (int s = 0; s < 12; ++s) {
    for (int i = 0; i < 8; ++i) {
      EXPECT_EQ(batches[s][i], expected[s * 8 + i]) << "step " << s;
    }
  }
}

TEST(EngineTest, PackedBatchesIndependentOfThreadsWorldAndStart) {
  auto one = RunEngine(1, 1, 0, 15);
  auto four = RunEngine(3, 4, 0, 15);
  auto resumed = RunEngine(2, 2, 6, 9);
  ASSERT_EQ(one.size(), 15u);
  EXPECT_EQ(one, four);
  for (int s = 0; s < 9; ++s) EXPECT_EQ(resumed[s], one[s + 6]);
}

TEST(EngineTest, StepsOfAPartlyKnownEpochAreServedWhereTheFullCountPutsThem) {
  // Epochs of ~7 steps: 30 steps cross four epochs, each served while
  // only its first rows are known.
  const auto full = RunEngine(1, 1, 0, 30);
  for (int threads : {1, 3}) {
    for (uint32_t w : {1u, 2u}) {
      SCOPED_TRACE(testing::Message() << threads << " threads, W=" << w);
      Partly partly;
      EXPECT_EQ(RunEngine(threads, w, 0, 30, true, &partly), full);
      // Every epoch was served partly known (the latch sees to it).
      EXPECT_GE(partly.epochs, 4u);
      EXPECT_EQ(partly.partly, partly.epochs);
      const auto resumed = RunEngine(threads, w, 9, 12, true);
      ASSERT_EQ(resumed.size(), 12u);
      for (int s = 0; s < 12; ++s) EXPECT_EQ(resumed[s], full[s + 9]);
    }
  }
}

// Counting an epoch takes a while, as it does for WMT at full size.
class SlowPackedWorkload : public FakePackedWorkload {
 public:
  using FakePackedWorkload::FakePackedWorkload;
  absl::StatusOr<uint64_t> RowsInEpoch(const EpochOrder& o) const override {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    return FakePackedWorkload::RowsInEpoch(o);
  }
};

// Every example fails, with a reason the client must see.
class FailingWorkload : public FakePackedWorkload {
 public:
  using FakePackedWorkload::FakePackedWorkload;
  std::unique_ptr<Schedule> MakeSchedule(
      const Sampler& sampler) const override {
    return Workload::MakeSchedule(sampler);  // examples, not rows
  }
  absl::Status FillItem(FillContext&, uint8_t* const*) const override {
    return absl::DataLossError("the disk returned garbage");
  }
};

std::string RingName(const std::string& tag) {
  return "/bdengine" + std::to_string(getpid()) + "." + tag;
}

struct Ring {
  std::shared_ptr<RankProducer> producer;
  std::unique_ptr<RingReader> reader;
};

Ring MakeRing(std::shared_ptr<StreamSetup> stream, const std::string& tag,
              uint64_t start) {
  RingGeometry geo;
  geo.slot_count = 2;
  geo.payload_bytes = stream->layout.payload_bytes;
  auto ring = RingWriter::Create(RingName(tag), geo);
  EXPECT_TRUE(ring.ok()) << ring.status();
  Ring r;
  r.reader = std::move(*RingReader::Attach(RingName(tag)));
  r.producer =
      std::make_shared<RankProducer>(stream, 0, start, std::move(*ring),
                                     SharedSchedule(stream));
  return r;
}

template <typename W>
std::shared_ptr<StreamSetup> MakeStream(const std::string& name,
                                       std::unique_ptr<W> workload,
                                       uint64_t g) {
  auto sampler =
      Sampler::Create(workload->num_examples(), g, 1, 77, workload->shuffle());
  EXPECT_TRUE(sampler.ok()) << sampler.status();
  auto layout = BatchLayout::Make(workload->tensors(), g);
  EXPECT_TRUE(layout.ok()) << layout.status();
  return std::make_shared<StreamSetup>(name, std::move(workload), *sampler,
                                       *layout);
}

TEST(EngineTest, FarResumeHoldsNoWorkerAndStopsPromptly) {
  // ~7 steps an epoch: step 2800 needs ~400 epochs counted, ~8 s of
  // counting. Meanwhile the only worker must serve another stream, and
  // stopping must not wait for the count.
  auto packed = MakeStream("far", std::make_unique<SlowPackedWorkload>(101), 8);
  WorkloadConfig config;
  config.split = "train";
  config.options = {{"examples", "1000"}, {"payload_bytes", "16"}};
  auto synthetic = CreateSyntheticWorkload(config);
  ASSERT_TRUE(synthetic.ok());
  auto other = MakeStream("near", std::move(*synthetic), 4);
  Engine engine(1);
  Ring far = MakeRing(packed, "far", 2800);
  Ring near = MakeRing(other, "near", 0);
  engine.Add(far.producer);  // first in line for the worker
  engine.Add(near.producer);
  for (int s = 0; s < 20; ++s) {
    absl::StatusOr<uint64_t> pos = near.reader->Acquire(3.0);
    ASSERT_TRUE(pos.ok()) << "step " << s << ": " << pos.status();
    EXPECT_EQ(near.reader->Slot(*pos)->step, uint64_t(s));
    near.reader->Release(*pos);
  }
  const uint64_t t0 = MonotonicNanos();
  engine.Retire(far.producer);
  engine.Retire(near.producer);
  engine.Stop();
  packed->Cancel();
  far.producer.reset();
  packed.reset();  // joins the counting thread
  EXPECT_LT(double(MonotonicNanos() - t0) / 1e9, 4.0);
}

TEST(EngineTest, StepsBeyondWhatTheDataCanMeanAreRefused) {
  auto packed = MakeStream("huge", std::make_unique<FakePackedWorkload>(101), 8);
  EXPECT_TRUE(packed->schedule->CheckReachable(6).ok());
  for (uint64_t step : {uint64_t(1) << 40, uint64_t(1) << 62,
                        ~uint64_t(0) - 1}) {
    absl::Status s = packed->schedule->CheckReachable(step);
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << step;
    EXPECT_EQ(packed->schedule->Ready(step).code(),
              absl::StatusCode::kFailedPrecondition)
        << step;
  }
}

TEST(EngineTest, AFailedBatchTellsTheClientWhy) {
  auto failing =
      MakeStream("failing", std::make_unique<FailingWorkload>(101), 8);
  Engine engine(1);
  Ring ring = MakeRing(failing, "failing", 0);
  engine.Add(ring.producer);
  absl::StatusOr<uint64_t> pos = ring.reader->Acquire(10.0);
  ASSERT_FALSE(pos.ok());
  EXPECT_EQ(pos.status().code(), absl::StatusCode::kCancelled);
  EXPECT_NE(pos.status().message().find("the disk returned garbage"),
            std::string::npos)
      << pos.status();
  engine.Retire(ring.producer);
  engine.Stop();
}

TEST(EngineTest, LayoutProductsThatWrapAreRefused) {
  // 2^22 examples of 2^32 - 24 bytes: the product wraps to a few MiB.
  std::vector<TensorLayout> t = {
      {"payload", DType::kUInt8, {int64_t((uint64_t(1) << 32) - 24)}}};
  EXPECT_FALSE(BatchLayout::Make(t, uint64_t(1) << 22).ok());
  t = {{"x", DType::kInt64, {int64_t(1) << 31, int64_t(1) << 31}}};
  EXPECT_FALSE(BatchLayout::Make(t, 1).ok());
  t = {{"x", DType::kInt64, {-1}}};
  EXPECT_FALSE(BatchLayout::Make(t, 1).ok());
  t = {{"x", DType::kUInt8, {1000}}};
  auto ok = BatchLayout::Make(t, 64);
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok->payload_bytes, shm::AlignUp(64000, shm::kTensorAlign));
}

}  // namespace
}  // namespace batchd

// The engine with a row-packing workload: batches are made of rows, rows of
// examples in the epoch's order; the result must not depend on threads,
// world size or where the stream starts.
#include "server/engine.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <vector>

#include "client/ring.h"

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

class FakePackedWorkload : public Workload {
 public:
  explicit FakePackedWorkload(uint64_t n) : n_(n) {
    tensors_ = {{"ids", shm::DTypeCode::kInt64, {kMaxIds}}};
  }
  uint64_t num_examples() const override { return n_; }
  bool shuffle() const override { return true; }
  const std::vector<TensorLayout>& tensors() const override {
    return tensors_;
  }
  absl::Status Fill(const ExampleRef&, uint8_t* const*,
                    WorkloadCounters*) const override {
    return absl::InternalError("a packing workload is filled by rows");
  }
  bool packs_rows() const override { return true; }
  absl::StatusOr<uint64_t> RowsInEpoch(const EpochOrder& o) const override {
    return PlainRows(o).size();
  }
  absl::Status FillRow(const EpochOrder& o, uint64_t row, uint8_t* const* out,
                       RowCursor* cursor,
                       WorkloadCounters*) const override {
    const auto rows = PlainRows(o);
    if (row >= rows.size()) return absl::OutOfRangeError("row");
    int64_t ids[kMaxIds];
    std::fill(ids, ids + kMaxIds, -1);
    std::copy(rows[row].begin(), rows[row].end(), ids);
    memcpy(out[0], ids, sizeof(ids));
    cursor->epoch = o.epoch;
    cursor->window = row;  // the fake's cursor: the row itself
    cursor->row = 0;
    return absl::OkStatus();
  }

 private:
  uint64_t n_;
  std::vector<TensorLayout> tensors_;
};

// Runs the engine for `steps` global batches of W ranks and returns each
// global batch's rows (rank order), plus each batch's epoch.
std::vector<std::vector<std::vector<int64_t>>> RunEngine(int threads, uint32_t w,
                                                   uint64_t start,
                                                   int steps) {
  const uint64_t g = 8, n = 101;
  auto sampler = Sampler::Create(n, g, w, 77, true);
  EXPECT_TRUE(sampler.ok());
  auto workload = std::make_unique<FakePackedWorkload>(n);
  BatchLayout layout = BatchLayout::Make(workload->tensors(), g / w);
  auto stream = std::make_shared<StreamCore>("packed", 77, std::move(workload),
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
    producers.push_back(std::make_shared<RankProducer>(stream, r, start,
                                                       std::move(*ring)));
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

}  // namespace
}  // namespace batchd

// docs/workloads.md followed to the letter: a small "counting" workload
// built only from what that page names (the Workload interface, options,
// the split vocabulary, ExampleRng, a registry entry), opened through the
// registry, served by the engine to 2 ranks and to 1, its batches checked
// against the sampler.
#include <unistd.h>

#include <cstring>
#include <set>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ring/ring.h"
#include "server/engine.h"
#include "workloads/counter_rng.h"
#include "workloads/options.h"
#include "workloads/registry.h"
#include "workloads/split.h"
#include "workloads/workload.h"

namespace batchd {
namespace {

using ::testing::ContainsRegex;
using ::testing::HasSubstr;

// 1. The interface. Each example writes its id, a value of its random
// stream, and (eval splits) its weight.
class CountingWorkload : public Workload {
 public:
  CountingWorkload(uint64_t n, bool train) : n_(n), train_(train) {
    tensors_ = {{"ids", DType::kUInt64, {}}, {"noise", DType::kUInt64, {2}}};
    if (!train_) tensors_.push_back({"weights", DType::kFloat32, {}});
  }
  uint64_t num_examples() const override { return n_; }
  bool shuffle() const override { return train_; }
  const std::vector<TensorLayout>& tensors() const override {
    return tensors_;
  }
  absl::Status FillItem(FillContext& ctx, uint8_t* const* out) const override {
    const ItemRef& item = ctx.item();
    uint64_t id = 0, noise[2] = {0, 0};
    float weight = 0;
    if (item.valid) {  // 2. padding is zeros, weight 0
      id = item.id;
      ExampleRng rng(item.seed, item.epoch, item.position);
      noise[0] = rng.NextU64();
      noise[1] = rng.NextU64();
      weight = 1;
    }
    memcpy(out[0], &id, 8);  // every byte of every tensor
    memcpy(out[1], noise, 16);
    if (!train_) memcpy(out[2], &weight, 4);
    return absl::OkStatus();
  }

 private:
  const uint64_t n_;
  const bool train_;
  std::vector<TensorLayout> tensors_;
};

absl::StatusOr<std::unique_ptr<Workload>> CreateCountingWorkload(
    const WorkloadConfig& config) {
  absl::StatusOr<WorkloadOptions> options =
      WorkloadOptions::Create("counting", config.options, {"examples"});
  if (!options.ok()) return options.status();
  absl::StatusOr<uint64_t> n = options->Uint("examples", 100, 1, 1 << 20);
  if (!n.ok()) return n.status();
  absl::StatusOr<Split> split = ParseSplit(
      "counting", config.split, {Split::kTrain, Split::kValidation});
  if (!split.ok()) return split.status();
  return std::unique_ptr<Workload>(
      new CountingWorkload(*n, *split == Split::kTrain));
}

// 3. The registry entry: the daemon's table and one line more.
std::vector<WorkloadEntry> Table() {
  std::vector<WorkloadEntry> table(Workloads().begin(), Workloads().end());
  table.push_back({"counting", CreateCountingWorkload,
                   "ids and counter-based noise, for the contract test"});
  return table;
}

absl::StatusOr<std::unique_ptr<Workload>> Open(const std::string& split,
                                               uint64_t examples) {
  WorkloadConfig config;
  config.split = split;
  config.seed = 9;
  config.options["examples"] = std::to_string(examples);
  return CreateWorkload("counting", config, Table());
}

// What one rank received: per step, its items' (id, noise[0], weight).
struct Item {
  uint64_t id, noise;
  float weight;
  bool operator==(const Item& o) const {
    return id == o.id && noise == o.noise && weight == o.weight;
  }
};
using Batches = std::vector<std::vector<std::vector<Item>>>;  // [rank][step]

// Serves `split` to `world` ranks through the engine (2 workers) for
// `steps` global batches of 8.
Batches Serve(const std::string& split, uint64_t examples, uint32_t world,
              int steps) {
  absl::StatusOr<std::unique_ptr<Workload>> w = Open(split, examples);
  EXPECT_TRUE(w.ok()) << w.status();
  if (!w.ok()) return {};
  const uint64_t g = 8;
  auto sampler = Sampler::Create((*w)->num_examples(), g, world, 9,
                                 (*w)->shuffle());
  EXPECT_TRUE(sampler.ok()) << sampler.status();
  auto layout = BatchLayout::Make((*w)->tensors(), g / world);
  EXPECT_TRUE(layout.ok()) << layout.status();
  auto stream = std::make_shared<StreamSetup>("counting", *std::move(w),
                                              *sampler, *layout);
  Engine engine(2);
  std::vector<std::unique_ptr<RingReader>> readers;
  std::vector<std::shared_ptr<RankProducer>> producers;
  for (uint32_t r = 0; r < world; ++r) {
    RingGeometry geo;
    geo.slot_count = 2;
    geo.payload_bytes = layout->payload_bytes;
    geo.rank = r;
    const std::string name = "/bdcontract" + std::to_string(getpid()) + "." +
                             split + std::to_string(world) + "." +
                             std::to_string(r);
    auto ring = RingWriter::Create(name, geo);
    EXPECT_TRUE(ring.ok()) << ring.status();
    if (!ring.ok()) return {};
    readers.push_back(std::move(*RingReader::Attach(name)));
    producers.push_back(std::make_shared<RankProducer>(
        stream, r, 0, std::move(*ring), SharedSchedule(stream)));
    engine.Add(producers.back());
  }
  Batches out(world, std::vector<std::vector<Item>>(steps));
  const bool eval = layout->entries.size() == 3;
  for (int s = 0; s < steps; ++s) {
    for (uint32_t r = 0; r < world; ++r) {
      absl::StatusOr<uint64_t> pos = readers[r]->Acquire(60.0);
      EXPECT_TRUE(pos.ok()) << pos.status();
      if (!pos.ok()) return {};
      EXPECT_EQ(readers[r]->Slot(*pos)->step, uint64_t(s));
      const uint8_t* base = readers[r]->SlotBase(*pos);
      for (uint64_t i = 0; i < g / world; ++i) {
        Item item;
        memcpy(&item.id, base + layout->entries[0].offset + 8 * i, 8);
        memcpy(&item.noise, base + layout->entries[1].offset + 16 * i, 8);
        item.weight = 1;
        if (eval) {
          memcpy(&item.weight, base + layout->entries[2].offset + 4 * i, 4);
        }
        out[r][s].push_back(item);
      }
      readers[r]->Release(*pos);
    }
  }
  for (auto& p : producers) engine.Retire(p);
  engine.Stop();
  return out;
}

TEST(WorkloadContractTest, ARegisteredWorkloadIsOpenedByNameAndRefusesTheRest) {
  EXPECT_TRUE(Open("train", 10).ok());
  EXPECT_TRUE(Open("val", 10).ok());  // another spelling of validation
  EXPECT_THAT(Open("test", 10).status().message(),
              HasSubstr("counting: unknown split 'test' (known: train, "
                        "validation)"));
  EXPECT_THAT(Open("train", 0).status().message(), HasSubstr("examples"));
  WorkloadConfig config;
  config.split = "train";
  EXPECT_THAT(CreateWorkload("countng", config, Table()).status().message(),
              HasSubstr("unknown workload 'countng' (known: synthetic, "
                        "imagenet, wmt, criteo1tb, finewebedu_lm, "
                        "librispeech, ogbg, fastmri, counting)"));
  // One line a workload, its help in a column after the longest name.
  EXPECT_THAT(WorkloadHelp(Table()), ContainsRegex("\n  counting +ids and"));
  // The daemon's own table does not know the test's workload.
  EXPECT_EQ(CreateWorkload("counting", config).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(WorkloadContractTest, TwoRanksGetDisjointSlicesOfTheOneGlobalOrder) {
  const uint64_t n = 37;  // 4 full global batches of 8 an epoch
  const int steps = 10;   // into the third epoch
  const Batches two = Serve("train", n, 2, steps);
  const Batches one = Serve("train", n, 1, steps);
  ASSERT_EQ(two.size(), 2u);
  ASSERT_EQ(one.size(), 1u);
  auto sampler = Sampler::Create(n, 8, 1, 9, true);
  ASSERT_TRUE(sampler.ok());
  for (int s = 0; s < steps; ++s) {
    SCOPED_TRACE(s);
    // Rank 0's half, then rank 1's, is the batch one rank gets.
    std::vector<Item> joined = two[0][s];
    joined.insert(joined.end(), two[1][s].begin(), two[1][s].end());
    EXPECT_EQ(joined, one[0][s]);
    // And the batch is the sampler's: its slice of the epoch's order.
    const RankSlice slice = sampler->Slice(s, 0);
    std::set<uint64_t> ids;
    for (uint64_t i = 0; i < 8; ++i) {
      const uint64_t id =
          sampler->ExampleId(slice.epoch, slice.first_position + i);
      EXPECT_EQ(one[0][s][i].id, id);
      ExampleRng rng(9, slice.epoch, slice.first_position + i);
      EXPECT_EQ(one[0][s][i].noise, rng.NextU64());
      ids.insert(id);
    }
    EXPECT_EQ(ids.size(), 8u);  // a permutation: no id twice in a batch
  }
}

TEST(WorkloadContractTest, AnEvalPassPadsItsLastBatchWithWeightZero) {
  const uint64_t n = 13;  // 2 batches of 8: 3 padding items in the last
  const Batches two = Serve("validation", n, 2, 2);
  ASSERT_EQ(two.size(), 2u);
  uint64_t expected_id = 0;
  int padding = 0;
  for (int s = 0; s < 2; ++s) {
    for (uint32_t r = 0; r < 2; ++r) {
      for (const Item& item : two[r][s]) {
        if (expected_id < n) {
          EXPECT_EQ(item.id, expected_id);  // in order, one pass
          EXPECT_EQ(item.weight, 1.0f);
          ++expected_id;
        } else {
          EXPECT_EQ(item, (Item{0, 0, 0.0f}));
          ++padding;
        }
      }
    }
  }
  EXPECT_EQ(expected_id, n);
  EXPECT_EQ(padding, 3);
}

}  // namespace
}  // namespace batchd

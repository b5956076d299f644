// docs/workloads.md followed to the letter: a small "counting" workload
// built only from what that page names (the Workload interface, ExampleRng,
// an entry declaring its splits and options), opened through the registry,
// served by the engine to 2 ranks and to 1, its batches checked against the
// sampler. And every entry of the daemon's table keeps the contract of an
// entry: its options' defaults within their bounds, unknown options and
// splits refused naming what it declares.
#include <unistd.h>

#include <cstring>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/engine.h"
#include "tests/testutil.h"
#include "workloads/counter_rng.h"
#include "workloads/registry.h"
#include "workloads/workload.h"
#include "workloads/workload_entry.h"

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
  const std::vector<TensorLayout>& tensors() const override { return tensors_; }
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

// 3. The entry: the factory is handed the options and split, parsed.
absl::StatusOr<std::unique_ptr<Workload>> CreateCounting(
    const WorkloadContext& c) {
  return std::unique_ptr<Workload>(new CountingWorkload(
      c.options.Uint("examples"), c.split == Split::kTrain));
}

constexpr OptionSpec kCountingOptions[] = {
    UintOption("examples", 100, 1, 1 << 20, "N, the examples of each split"),
};
constexpr Split kCountingSplits[] = {Split::kTrain, Split::kValidation};
const WorkloadEntry kCountingWorkload = {
    "counting",
    "ids and counter-based noise, for the contract test",
    kCountingSplits,
    kCountingOptions,
    CreateCounting,
    /*reads_files=*/false,
};

// The daemon's table and one line more.
std::vector<WorkloadEntry> Table() {
  std::vector<WorkloadEntry> table(Workloads().begin(), Workloads().end());
  table.push_back(kCountingWorkload);
  return table;
}

absl::StatusOr<std::unique_ptr<Workload>> Open(const std::string& split,
                                               uint64_t examples) {
  return CreateWorkload(
      "counting",
      testutil::StreamConfig("", split,
                             {{"examples", std::to_string(examples)}}, 9),
      Table());
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
  testutil::ServedStream served("counting", *std::move(w), g, world, 9);
  if (!served.ok()) return {};
  Batches out(world, std::vector<std::vector<Item>>(steps));
  const bool eval = served.stream().layout.entries.size() == 3;
  const std::vector<std::vector<testutil::RankBatch>> got =
      served.NextSteps(steps);
  if (got.size() < size_t(steps)) return {};
  for (size_t s = 0; s < got.size(); ++s) {
    for (uint32_t r = 0; r < world; ++r) {
      EXPECT_EQ(got[s][r].step, uint64_t(s));
      const std::vector<std::string>& t = got[s][r].tensors;
      for (uint64_t i = 0; i < g / world; ++i) {
        Item item;
        memcpy(&item.id, t[0].data() + 8 * i, 8);
        memcpy(&item.noise, t[1].data() + 16 * i, 8);
        item.weight = 1;
        if (eval) memcpy(&item.weight, t[2].data() + 4 * i, 4);
        out[r][s].push_back(item);
      }
    }
  }
  served.Stop();
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
              HasSubstr(absl::StrCat(
                  "unknown workload 'countng' (known: ",
                  absl::StrJoin(WorkloadNames(Table()), ", "), ")")));
  EXPECT_EQ(WorkloadNames(Table()).back(), "counting");
  // One line a workload, its help in a column after the longest name.
  EXPECT_THAT(WorkloadHelp(Table()), ContainsRegex("\n  counting +ids and"));
  // The daemon's own table does not know the test's workload.
  EXPECT_EQ(CreateWorkload("counting", config).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// CreateWorkload(e, c) is refused as `unknown` ("option 'x'"), naming what
// `e` declares of that kind.
void ExpectRefusedNaming(const WorkloadEntry& e, const WorkloadConfig& c,
                         const std::string& unknown,
                         const std::vector<std::string>& declared) {
  const absl::Status s = CreateWorkload(e, c).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(s.message(),
              HasSubstr(absl::StrCat(e.name, ": unknown ", unknown, " (known: ",
                                     absl::StrJoin(declared, ", "), ")")));
}

// Every entry of the daemon's table declares what it takes: a name and a
// line of help, the splits it serves (train first), and options whose
// defaults lie within their bounds; and the prologue refuses, before any
// data is touched, an option it does not declare naming the ones it does,
// and a split it does not serve naming those it serves.
TEST(WorkloadContractTest, EveryEntryOfTheTableDeclaresWhatItTakes) {
  for (const WorkloadEntry& e : Workloads()) {
    SCOPED_TRACE(e.name);
    EXPECT_FALSE(std::string(e.help).empty());
    ASSERT_FALSE(e.splits.empty());
    EXPECT_EQ(e.splits[0], Split::kTrain);
    std::map<std::string, std::string> defaults;
    std::vector<std::string> keys, splits;
    for (const OptionSpec& o : e.options) {
      defaults[o.key] = OptionDefault(o);
      keys.push_back(o.key);
    }
    for (Split s : e.splits) splits.emplace_back(SplitName(s));
    absl::StatusOr<OptionValues> given =
        OptionValues::Parse(e.name, e.options, defaults);
    EXPECT_TRUE(given.ok()) << given.status();
    WorkloadConfig c;
    c.data_path = "/nonexistent-batchd-data";
    c.split = "train";
    c.options = {{"no_such_option", "1"}};
    ExpectRefusedNaming(e, c, "option 'no_such_option'", keys);
    c.options.clear();
    c.split = "no_such_split";
    ExpectRefusedNaming(e, c, "split 'no_such_split'", splits);
  }
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

// The ogbg workload: graph parsing and its refusals, the row budget and
// padding layout of AlgoPerf's jraph batching, options and splits, damaged
// records, and rows that are the same whoever fills them.
#include "workloads/ogbg/ogbg.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <map>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testutil.h"
#include "workloads/common/tf_example.h"
#include "workloads/common/tfrecord.h"
#include "workloads/ogbg/graph.h"
#include "workloads/packed_schedule.h"

namespace batchd {
namespace ogbg {
namespace {

using ::testing::HasSubstr;
using testutil::RowBuffers;
using testutil::TempDir;
using testutil::WriteTfdsShards;

// A chain of n nodes (n - 1 bonds); node features carry (id, node), label
// 0 is `id`, label 1 missing.
Graph Chain(int64_t n, float id) {
  Graph g;
  g.num_nodes = n;
  g.num_edges = n - 1;
  for (int64_t i = 0; i < n * kNodeFeatures; ++i) {
    g.node_feat.push_back(i % kNodeFeatures == 0 ? id : float(i));
  }
  for (int64_t i = 0; i + 1 < n; ++i) {
    g.edge_index.push_back(i);
    g.edge_index.push_back(i + 1);
    for (int k = 0; k < kEdgeFeatures; ++k) g.edge_feat.push_back(id + k);
  }
  g.labels.assign(kTasks, 1.0f);
  g.labels[0] = id;
  g.labels[1] = NAN;
  return g;
}

TEST(OgbgGraph, ParsesWhatItSerializes) {
  absl::StatusOr<Graph> g = ParseGraph(SerializeGraph(Chain(5, 3)));
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->num_nodes, 5);
  EXPECT_EQ(g->edge_index, (std::vector<int64_t>{0, 1, 1, 2, 2, 3, 3, 4}));
  EXPECT_TRUE(std::isnan(g->labels[1]));
}

TEST(OgbgGraph, RefusesInconsistentGraphs) {
  struct Case {
    const char* want;
    void (*mutate)(Graph*);
  };
  const Case cases[] = {
      {"names node 5", [](Graph* g) { g->edge_index[3] = 5; }},
      {"names node -1", [](Graph* g) { g->edge_index[0] = -1; }},
      {"'node_feat' has", [](Graph* g) { g->node_feat.pop_back(); }},
      {"'edge_feat' has", [](Graph* g) { g->edge_feat.push_back(0); }},
      {"'edge_index' has", [](Graph* g) { g->edge_index.resize(6); }},
      {"'labels' has", [](Graph* g) { g->labels.resize(127); }},
      {"out of range", [](Graph* g) { g->num_nodes = -3; }},
  };
  for (const Case& c : cases) {
    Graph g = Chain(5, 1);
    c.mutate(&g);
    absl::StatusOr<Graph> parsed = ParseGraph(SerializeGraph(g));
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(parsed.status().message(), HasSubstr(c.want));
  }
  EXPECT_THAT(ParseGraph("").status().message(), HasSubstr("num_nodes"));
  // Any cut or bytes: an error, never a crash.
  const std::string good = SerializeGraph(Chain(9, 2));
  std::mt19937_64 rng(3);
  for (int i = 0; i < 300; ++i) {
    std::string s = good.substr(0, rng() % good.size());
    if (i % 2 && !s.empty()) s[rng() % s.size()] = char(rng());
    EXPECT_FALSE(ParseGraph(s).ok() && s.size() < good.size() / 2);
  }
}

TEST(OgbgRow, BudgetIsAlgoPerfsPerGraphSlot) {
  const RowShape shape{2};  // 52 nodes, 112 edges, 3 graph slots
  EXPECT_EQ(shape.nodes(), 53);
  EXPECT_EQ(shape.edges(), 112);
  EXPECT_TRUE(shape.Fits(52, 56));
  EXPECT_FALSE(shape.Fits(53, 1));
  EXPECT_FALSE(shape.Fits(10, 57));
  RowBudget row{shape};
  EXPECT_TRUE(row.Add(30, 20));
  EXPECT_FALSE(row.Add(23, 1));   // 53 nodes > 52
  EXPECT_FALSE(row.Add(10, 37));  // 40 + 74 edges > 112
  EXPECT_TRUE(row.Add(22, 36));
  EXPECT_FALSE(row.Add(0, 0));  // a third graph > 2
}

TEST(OgbgRow, PaddingLayoutIsJraphs) {
  const RowShape shape{2};
  std::vector<TensorLayout> t = {
      {"nodes", DType::kFloat32, {shape.nodes(), kNodeFeatures}},
      {"edges", DType::kFloat32, {shape.edges(), kEdgeFeatures}},
      {"senders", DType::kInt32, {shape.edges()}},
      {"receivers", DType::kInt32, {shape.edges()}},
      {"n_node", DType::kInt32, {shape.slots()}},
      {"n_edge", DType::kInt32, {shape.slots()}},
      {"targets", DType::kFloat32, {shape.slots(), kTasks}},
      {"weights", DType::kUInt8, {shape.slots(), kTasks}}};
  RowBuffers out(t);
  for (size_t k = 0; k < t.size(); ++k) {
    std::fill(out.bytes(k).begin(), out.bytes(k).end(), 0xAB);  // stale
  }
  const Graph a = Chain(3, 7);
  WriteRow(shape, {&a}, out.out());
  EXPECT_EQ(std::vector<int32_t>(out.as<int32_t>(4), out.as<int32_t>(4) + 3),
            (std::vector<int32_t>{3, 50, 0}));
  EXPECT_EQ(std::vector<int32_t>(out.as<int32_t>(5), out.as<int32_t>(5) + 3),
            (std::vector<int32_t>{4, 108, 0}));
  // Bonds as stored, then reversed; features twice.
  const int32_t* s = out.as<int32_t>(2);
  const int32_t* r = out.as<int32_t>(3);
  EXPECT_EQ((std::vector<int32_t>{s[0], s[1], s[2], s[3]}),
            (std::vector<int32_t>{0, 1, 1, 2}));
  EXPECT_EQ((std::vector<int32_t>{r[0], r[1], r[2], r[3]}),
            (std::vector<int32_t>{1, 2, 0, 1}));
  EXPECT_EQ(out.as<float>(1)[2 * kEdgeFeatures], 7.0f);
  // Padding edges: the first padding node (3) to itself; padding zeros.
  for (int64_t i = 4; i < shape.edges(); ++i) {
    ASSERT_EQ(s[i], 3);
    ASSERT_EQ(r[i], 3);
    ASSERT_EQ(out.as<float>(1)[i * kEdgeFeatures], 0.0f);
  }
  for (int64_t i = 3 * kNodeFeatures; i < shape.nodes() * kNodeFeatures; ++i) {
    ASSERT_EQ(out.as<float>(0)[i], 0.0f);
  }
  // targets NaN -> 0, weight 0; padding graphs weight 0.
  EXPECT_EQ(out.as<float>(6)[0], 7.0f);
  EXPECT_EQ(out.as<float>(6)[1], 0.0f);
  EXPECT_EQ(out.bytes(7)[0], 1);
  EXPECT_EQ(out.bytes(7)[1], 0);
  for (int64_t i = kTasks; i < shape.slots() * kTasks; ++i) {
    ASSERT_EQ(out.bytes(7)[i], 0);
    ASSERT_EQ(out.as<float>(6)[i], 0.0f);
  }
}

// A data set: train graphs chain(5 + i % 40) with id i in 8 shards,
// validation and test likewise; `damage` replaces validation records.
struct Data {
  TempDir dir{"ogbg"};
  std::string shards;
  explicit Data(int train, int eval,
                const std::map<int, std::string>& damage = {}) {
    mkdir(dir.Path("ogbg_molpcba").c_str(), 0755);
    shards = dir.Path("ogbg_molpcba/0.1.3");
    mkdir(shards.c_str(), 0755);
    std::vector<std::vector<std::string>> per(8);
    for (int i = 0; i < train; ++i) {
      per[i * 8 / train].push_back(SerializeGraph(Chain(5 + i % 40, i)));
    }
    WriteTfdsShards(shards, "ogbg_molpcba", "train", per);
    std::vector<std::string> v;
    for (int i = 0; i < eval; ++i) {
      auto it = damage.find(i);
      v.push_back(it != damage.end() ? it->second
                                     : SerializeGraph(Chain(5 + i % 40, i)));
    }
    WriteTfdsShards(shards, "ogbg_molpcba", "validation", {v});
    WriteTfdsShards(shards, "ogbg_molpcba", "test", {v});
  }
  absl::StatusOr<std::unique_ptr<Workload>> Create(
      const std::string& split, std::map<std::string, std::string> opts = {
                                    {"graphs_per_row", "2"}}) const {
    return CreateWorkload(kOgbgWorkload,
                          testutil::StreamConfig(dir.path(), split, opts));
  }
};

TEST(OgbgWorkload, RefusesBadOptionsSplitsAndMissingFiles) {
  Data data(16, 6);
  EXPECT_THAT(data.Create("dev").status().message(), HasSubstr("dev"));
  EXPECT_THAT(
      data.Create("train", {{"graphs_per_row", "0"}}).status().message(),
      HasSubstr("graphs_per_row"));
  EXPECT_THAT(
      data.Create("train", {{"graphs_per_row", "1025"}}).status().message(),
      HasSubstr("graphs_per_row"));
  EXPECT_THAT(data.Create("train", {{"bogus", "1"}}).status().message(),
              HasSubstr("bogus"));
  unlink(
      absl::StrCat(data.shards, "/ogbg_molpcba-train.tfrecord-00003-of-00008")
          .c_str());
  EXPECT_THAT(data.Create("train").status().message(),
              HasSubstr("train.tfrecord-00003-of-00008"));
  // The version folder itself is accepted as data.
  EXPECT_TRUE(CreateWorkload(kOgbgWorkload,
                             testutil::StreamConfig(data.shards, "validation"))
                  .ok());
}

// Graph ids (label 0) of a row's real graphs.
std::vector<int> IdsOf(const RowBuffers& out, const RowShape& shape) {
  std::vector<int> ids;
  const int32_t* n = out.as<int32_t>(4);
  int64_t last = shape.slots() - 1;
  while (n[last] == 0) --last;  // the padding graph
  for (int64_t s = 0; s < last; ++s) {
    ids.push_back(int(out.as<float>(6)[s * kTasks]));
  }
  return ids;
}

// The graph ids of every row of `w`, in order, filled with `counters`.
std::vector<int> IdsOfEveryRow(const Workload& w, const RowShape& shape,
                               WorkloadCounters* counters) {
  std::vector<int> ids;
  for (uint64_t row = 0; row < w.num_examples(); ++row) {
    RowBuffers out(w.tensors());
    const absl::Status st =
        w.FillItem(ItemRef{0, 0, row, row, true}, out.out(), counters);
    EXPECT_TRUE(st.ok()) << "row " << row << ": " << st;
    if (!st.ok()) return ids;
    for (int id : IdsOf(out, shape)) ids.push_back(id);
  }
  return ids;
}

TEST(OgbgWorkload, EvalRowsPackInFileOrderAndCountDamagedGraphs) {
  Graph bad = Chain(6, 2);
  bad.edge_index[0] = 6;  // out of range
  Data data(16, 8, {{2, SerializeGraph(bad)}, {3, "not a graph"}});
  absl::StatusOr<std::unique_ptr<Workload>> w = data.Create("validation");
  ASSERT_TRUE(w.ok()) << w.status();
  const RowShape shape{2};
  WorkloadCounters counters;
  const std::vector<int> ids = IdsOfEveryRow(**w, shape, &counters);
  EXPECT_EQ(ids, (std::vector<int>{0, 1, 4, 5, 6, 7}));
  EXPECT_EQ(counters.decode_errors.load(), 2u);
  // Rows by AlgoPerf's rule: (5, 6 nodes), (bad, bad, 9, 10), (11, 12).
  EXPECT_EQ((*w)->num_examples(), 3u);
  // A padding item: all padding, weight 0.
  RowBuffers pad((*w)->tensors());
  ASSERT_TRUE(
      (*w)->FillItem(ItemRef{0, 0, 3, 3, false}, pad.out(), nullptr).ok());
  EXPECT_EQ(pad.as<int32_t>(4)[0], shape.nodes());
  EXPECT_EQ(pad.as<int32_t>(5)[0], shape.edges());
}

TEST(OgbgWorkload, BrokenFramingRefusesDamagedDataIsCounted) {
  Data data(16, 6);
  const std::string val = absl::StrCat(
      data.shards, "/ogbg_molpcba-validation.tfrecord-00000-of-00001");
  std::string bytes = testutil::ReadFile(val);
  ASSERT_GT(bytes.size(), 40u);
  // A byte of record 0's data: its data CRC fails when read; the graph is
  // left out and counted, the others served.
  std::string flipped = bytes;
  flipped[kTFRecordHeaderBytes + 5] ^= 0x40;
  testutil::WriteFile(val, flipped);
  absl::StatusOr<std::unique_ptr<Workload>> w = data.Create("validation");
  ASSERT_TRUE(w.ok()) << w.status();
  WorkloadCounters counters;
  const std::vector<int> ids = IdsOfEveryRow(**w, RowShape{2}, &counters);
  EXPECT_EQ(ids, (std::vector<int>{1, 2, 3, 4, 5}));
  EXPECT_EQ(counters.decode_errors.load(), 1u);
  // A record's length CRC broken: the framing cannot be trusted past it,
  // and the stream is refused naming the file and the offset.
  std::string framing = bytes;
  framing[9] ^= 0x01;
  testutil::WriteFile(val, framing);
  absl::Status st = data.Create("validation").status();
  EXPECT_FALSE(st.ok());
  EXPECT_THAT(st.message(), HasSubstr("validation.tfrecord-00000-of-00001"));
  EXPECT_THAT(st.message(), HasSubstr("offset"));
}

TEST(OgbgWorkload, ARecordOverAMebibyteIsLeftOutUnread) {
  // A graph that parses, with 2 MiB of a feature besides (two serialized
  // Examples concatenated are one, merged): left out and counted.
  ExampleFeatures pad;
  pad.bytes["padding"] = {std::string(2 << 20, 'x')};
  Data data(16, 4, {{1, SerializeGraph(Chain(6, 1)) + SerializeExample(pad)}});
  ASSERT_TRUE(
      ParseGraph(SerializeGraph(Chain(6, 1)) + SerializeExample(pad)).ok());
  absl::StatusOr<std::unique_ptr<Workload>> w = data.Create("validation");
  ASSERT_TRUE(w.ok()) << w.status();
  WorkloadCounters counters;
  const std::vector<int> ids = IdsOfEveryRow(**w, RowShape{2}, &counters);
  EXPECT_EQ(ids, (std::vector<int>{0, 2, 3}));
  EXPECT_EQ(counters.decode_errors.load(), 1u);
}

TEST(OgbgWorkload, TrainEpochHoldsEveryGraphOnceAndRowsAreDeterministic) {
  Data data(40, 4);
  absl::StatusOr<std::unique_ptr<Workload>> w = data.Create("train");
  ASSERT_TRUE(w.ok()) << w.status();
  const auto* packer = dynamic_cast<const PackedWorkload*>(w->get());
  ASSERT_NE(packer, nullptr);
  const RowShape shape{2};
  const EpochOrder order = ShuffledOrder(40, 9, 1);
  absl::StatusOr<uint64_t> rows = packer->RowsInEpoch(order);
  ASSERT_TRUE(rows.ok()) << rows.status();
  std::multiset<int> ids;
  std::vector<std::vector<uint8_t>> first;
  for (uint64_t row = 0; row < *rows; ++row) {
    RowBuffers out((*w)->tensors());
    ASSERT_TRUE(packer->FillRow(order, row, out.out(), nullptr).ok());
    for (int id : IdsOf(out, shape)) ids.insert(id);
    first.push_back(out.bytes(0));
  }
  std::multiset<int> all;
  for (int i = 0; i < 40; ++i) all.insert(i);
  EXPECT_EQ(ids, all);
  // Filled again from two threads, in other orders: the same bytes.
  auto refill = [&](bool reverse, bool* same) {
    *same = true;
    for (uint64_t k = 0; k < *rows; ++k) {
      const uint64_t row = reverse ? *rows - 1 - k : k;
      RowBuffers out((*w)->tensors());
      if (!packer->FillRow(order, row, out.out(), nullptr).ok() ||
          out.bytes(0) != first[row]) {
        *same = false;
      }
    }
  };
  bool a = false, b = false;
  std::thread t1(refill, false, &a), t2(refill, true, &b);
  t1.join();
  t2.join();
  EXPECT_TRUE(a);
  EXPECT_TRUE(b);
  EXPECT_FALSE(packer->RowAtCursor(order, {1, 0, *rows}, nullptr).ok());
  EXPECT_EQ(*packer->RowAtCursor(order, {1, 0, 2}, nullptr), 2u);
}

}  // namespace
}  // namespace ogbg
}  // namespace batchd

// The ogbg workload; see ogbg.h.
#include "workloads/ogbg/ogbg.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <deque>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "base/executor.h"
#include "base/log.h"
#include "storage/data_file.h"
#include "workloads/common/tfrecord_shards.h"
#include "workloads/ogbg/graph.h"
#include "workloads/packed_schedule.h"

namespace batchd {
namespace ogbg {
namespace {

constexpr char kName[] = "ogbg";
constexpr char kVersionDir[] = "ogbg_molpcba/0.1.3";
constexpr uint64_t kTrainShards = 8;
constexpr uint64_t kDefaultGraphsPerRow = 64;
// Rows of train splits hold up to 1,024 graph slots (AlgoPerf trains at
// 512 graphs a step); evaluation rows up to 32,768, AlgoPerf's evaluation
// batch, so that one rank's batch can be AlgoPerf's whole batch (about
// 90 MB a row at that size).
constexpr uint64_t kMaxGraphsPerRow = 1024;
constexpr uint64_t kMaxEvalGraphsPerRow = 32768;
constexpr uint64_t kDefaultEvalTrain = 43793;  // AlgoPerf's
// A molecule's record is a few KB (molpcba's largest, 332 atoms, ~25 KB); a
// larger one is refused unread. Parsing a record keeps up to tens of bytes
// per byte of it (tf_example.h), on each indexing thread at once.
constexpr uint64_t kMaxRecordBytes = 1 << 20;
constexpr uint32_t kDamaged = UINT32_MAX;
constexpr uint64_t kLoggedDamaged = 10;

// What packing needs of a graph: its nodes and bonds, or kDamaged.
struct Info {
  uint32_t nodes = kDamaged;
  uint32_t bonds = 0;
};

std::vector<TensorLayout> RowTensors(const RowShape& s) {
  return {
      {"nodes", DType::kFloat32, {s.nodes(), kNodeFeatures}},
      {"edges", DType::kFloat32, {s.edges(), kEdgeFeatures}},
      {"senders", DType::kInt32, {s.edges()}},
      {"receivers", DType::kInt32, {s.edges()}},
      {"n_node", DType::kInt32, {s.slots()}},
      {"n_edge", DType::kInt32, {s.slots()}},
      {"targets", DType::kFloat32, {s.slots(), kTasks}},
      {"weights", DType::kUInt8, {s.slots(), kTasks}},
  };
}

// The shards of a split and what packing needs of each graph (indexed
// once, on the executor, in Create). Immutable afterwards.
class GraphStore : public ExampleSource {
 public:
  GraphStore(TFRecordShards shards, uint64_t size)
      : shards_(std::move(shards)), infos_(size) {}

  absl::Status Index(Executor* pool) {
    std::atomic<uint64_t> damaged{0};
    absl::Status st = ParallelFor(
        pool, Priority::kServing, infos_.size(), 8,
        [&](uint64_t i) -> absl::Status {
          absl::StatusOr<std::string> rec = shards_.Read(i);
          absl::Status bad = rec.status();
          absl::StatusOr<Graph> g;
          if (bad.ok()) {
            g = ParseGraph(*rec);
            bad = g.status();
          }
          if (!bad.ok()) {
            // The first few each name their record; the rest are counted
            // (the stream's decode_errors, as its rows leave them out).
            if (damaged.fetch_add(1) < kLoggedDamaged) {
              Log(LogLevel::kWarn, "decode_error",
                  {{"workload", kName},
                   {"example", Describe({0, 0, i})},
                   {"error", std::string(bad.message())},
                   {"action", "left out"}});
            }
            return absl::OkStatus();
          }
          infos_[i] = {uint32_t(g->num_nodes), uint32_t(g->num_edges)};
          return absl::OkStatus();
        });
    damaged_ = damaged.load();
    return st;
  }

  uint64_t size() const { return infos_.size(); }
  const Info& info(uint64_t id) const { return infos_[id]; }
  uint64_t damaged() const { return damaged_; }

  absl::Status Read(const ExampleKey& key, std::string* bytes,
                    int64_t* label) const override {
    *label = 0;
    if (key.id >= infos_.size()) {
      return absl::OutOfRangeError(absl::StrCat("ogbg: no graph ", key.id));
    }
    absl::StatusOr<std::string> rec = shards_.Read(key.id);
    if (!rec.ok()) return rec.status();
    *bytes = *std::move(rec);
    return absl::OkStatus();
  }
  std::string Describe(const ExampleKey& key) const override {
    if (key.id >= infos_.size()) return absl::StrCat("graph ", key.id);
    const TFRecordShards::Location at = shards_.Locate(key.id);
    return absl::StrCat("record ", at.record, " of ",
                        shards_.shard(at.shard).path());
  }

  // Parses graph `id`'s bytes; an error names its file and record.
  absl::StatusOr<Graph> Parse(uint64_t id, const std::string& bytes) const {
    absl::StatusOr<Graph> g = ParseGraph(bytes);
    if (!g.ok()) {
      return absl::DataLossError(
          absl::StrCat(g.status().message(), " (", Describe({0, 0, id}), ")"));
    }
    const Info& i = infos_[id];
    if (uint64_t(g->num_nodes) != i.nodes ||
        uint64_t(g->num_edges) != i.bonds) {
      return absl::DataLossError(absl::StrCat("ogbg: ", Describe({0, 0, id}),
                                              " changed since it was indexed"));
    }
    return g;
  }

 private:
  const TFRecordShards shards_;
  std::vector<Info> infos_;
  uint64_t damaged_ = 0;
};

// Row starts (positions in the order) of ids in the given order: greedy,
// as jraph's dynamically_batch; damaged and oversized graphs are left out
// but belong to the row whose range holds them.
std::vector<uint32_t> PackStarts(
    const GraphStore& store, const RowShape& shape, uint64_t n,
    const std::function<void(uint64_t, uint64_t, uint64_t*)>& ids) {
  std::vector<uint32_t> starts;
  RowBudget row{shape};
  bool open = false;
  std::vector<uint64_t> block(4096);
  for (uint64_t p0 = 0; p0 < n; p0 += block.size()) {
    const uint64_t count = std::min<uint64_t>(block.size(), n - p0);
    ids(p0, count, block.data());
    for (uint64_t k = 0; k < count; ++k) {
      const Info& info = store.info(block[k]);
      if (info.nodes == kDamaged || !shape.Fits(info.nodes, info.bonds)) {
        continue;
      }
      if (!open || !row.Add(info.nodes, info.bonds)) {
        // A row's range begins at 0 (leading drops) or after the last
        // graph of the row before.
        starts.push_back(open ? uint32_t(p0 + k) : 0);
        row = RowBudget{shape};
        row.Add(info.nodes, info.bonds);
        open = true;
      }
    }
  }
  return starts;
}

// Fills the row made of the graphs at positions [begin, end) of an order,
// reading through `ctx`; drops are counted.
absl::Status FillRange(const GraphStore& store, const RowShape& shape,
                       uint64_t epoch, uint64_t begin, uint64_t end,
                       const std::function<uint64_t(uint64_t)>& id_at,
                       FillContext& ctx, uint8_t* const* out) {
  std::vector<Graph> graphs;
  graphs.reserve(end - begin);
  WorkloadCounters* counters = ctx.counters();
  for (uint64_t p = begin; p < end; ++p) {
    const uint64_t id = id_at(p);
    const Info& info = store.info(id);
    if (info.nodes == kDamaged || !shape.Fits(info.nodes, info.bonds)) {
      if (counters != nullptr) {
        (info.nodes == kDamaged ? counters->decode_errors
                                : counters->skipped_examples)
            .fetch_add(1, std::memory_order_relaxed);
      }
      continue;
    }
    std::string bytes;
    int64_t label = 0;
    absl::Status st = ctx.Read({epoch, p, id}, &bytes, &label);
    if (!st.ok()) return st;  // pending included
    absl::StatusOr<Graph> g = store.Parse(id, bytes);
    if (!g.ok()) return g.status();
    graphs.push_back(*std::move(g));
  }
  std::vector<const Graph*> members;
  for (const Graph& g : graphs) members.push_back(&g);
  WriteRow(shape, members, out);
  return absl::OkStatus();
}

// Epoch tables of the train split, the latest few kept.
struct EpochRows {
  uint64_t seed = 0, epoch = 0;
  std::vector<uint32_t> starts;
};

class TrainWorkload : public PackedWorkload {
 public:
  TrainWorkload(std::unique_ptr<GraphStore> store, RowShape shape,
                Executor* pool)
      : PackedWorkload(pool),
        store_(std::move(store)),
        shape_(shape),
        tensors_(RowTensors(shape)) {}

  uint64_t num_examples() const override { return store_->size(); }
  const std::vector<TensorLayout>& tensors() const override { return tensors_; }
  const ExampleSource* source() const override { return store_.get(); }

  absl::StatusOr<uint64_t> RowsInEpoch(const EpochOrder& order) const override {
    absl::StatusOr<std::shared_ptr<const EpochRows>> t = Table(order);
    if (!t.ok()) return t.status();
    return (*t)->starts.size();
  }
  absl::StatusOr<RowCursor> CursorOfRow(const EpochOrder& order,
                                        uint64_t row) const override {
    absl::StatusOr<std::shared_ptr<const EpochRows>> t = Table(order);
    if (!t.ok()) return t.status();
    if (row >= (*t)->starts.size()) return OutOfRange(order, row, **t);
    return RowCursor{order.epoch, 0, row};
  }
  absl::StatusOr<uint64_t> RowAtCursor(const EpochOrder& order,
                                       const RowCursor& cursor,
                                       const StopFlag* stop) const override {
    absl::StatusOr<std::shared_ptr<const EpochRows>> t = Table(order);
    if (!t.ok()) return t.status();
    if (cursor.epoch != order.epoch || cursor.window != 0 ||
        cursor.row >= (*t)->starts.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "ogbg: cursor (epoch ", cursor.epoch, ", window ", cursor.window,
          ", row ", cursor.row, ") is not in epoch ", order.epoch));
    }
    return cursor.row;
  }
  absl::Status CheckCursor(uint64_t num_examples,
                           const RowCursor& cursor) const override {
    // Every row holds at least one graph; rows are not grouped in windows.
    if (cursor.window != 0 || cursor.row >= num_examples) {
      return absl::InvalidArgumentError(absl::StrCat(
          "cursor (epoch ", cursor.epoch, ", window ", cursor.window, ", row ",
          cursor.row, ") lies beyond any epoch of ", num_examples, " graphs"));
    }
    return absl::OkStatus();
  }
  absl::Status FillRow(const EpochOrder& order, uint64_t row,
                       uint8_t* const* out, FillContext& ctx) const override {
    absl::StatusOr<std::shared_ptr<const EpochRows>> t = Table(order);
    if (!t.ok()) return t.status();
    const std::vector<uint32_t>& starts = (*t)->starts;
    if (row >= starts.size()) return OutOfRange(order, row, **t);
    const uint64_t end =
        row + 1 < starts.size() ? starts[row + 1] : order.num_examples;
    return FillRange(*store_, shape_, order.epoch, starts[row], end,
                     order.id_at, ctx, out);
  }
  bool ExamplesOfRows(const EpochOrder& order, uint64_t first_row,
                      uint64_t count,
                      std::vector<ExampleKey>* keys) const override {
    std::shared_ptr<const EpochRows> t = Find(order);
    if (t == nullptr || first_row + count > t->starts.size()) return false;
    for (uint64_t row = first_row; row < first_row + count; ++row) {
      const uint64_t end =
          row + 1 < t->starts.size() ? t->starts[row + 1] : order.num_examples;
      for (uint64_t p = t->starts[row]; p < end; ++p) {
        const uint64_t id = order.id_at(p);
        const Info& info = store_->info(id);
        if (info.nodes == kDamaged || !shape_.Fits(info.nodes, info.bonds)) {
          continue;
        }
        keys->push_back({order.epoch, p, id});
      }
    }
    return true;
  }

 private:
  static absl::Status OutOfRange(const EpochOrder& order, uint64_t row,
                                 const EpochRows& t) {
    return absl::OutOfRangeError(absl::StrCat("ogbg: row ", row, " of epoch ",
                                              order.epoch, " (which has ",
                                              t.starts.size(), ")"));
  }

  std::shared_ptr<const EpochRows> Find(const EpochOrder& order) const {
    absl::MutexLock lock(&mu_);
    for (const auto& t : tables_) {
      if (t->seed == order.seed && t->epoch == order.epoch) return t;
    }
    return nullptr;
  }

  absl::StatusOr<std::shared_ptr<const EpochRows>> Table(
      const EpochOrder& order) const {
    if (order.num_examples != store_->size() || !order.id_at) {
      return absl::InvalidArgumentError(
          absl::StrCat("ogbg: the epoch order covers ", order.num_examples,
                       " graphs, the data has ", store_->size()));
    }
    if (std::shared_ptr<const EpochRows> t = Find(order)) return t;
    // Built outside the lock: two threads may both build one (same result).
    auto t = std::make_shared<EpochRows>();
    t->seed = order.seed;
    t->epoch = order.epoch;
    t->starts = PackStarts(*store_, shape_, order.num_examples,
                           [&](uint64_t first, uint64_t count, uint64_t* out) {
                             EpochIds(order, first, count, out);
                           });
    if (t->starts.empty()) {
      return absl::FailedPreconditionError(
          "ogbg: no graph of the train split can be served (every one is "
          "damaged or over a row's budget)");
    }
    absl::MutexLock lock(&mu_);
    tables_.push_back(t);
    if (tables_.size() > 4) tables_.pop_front();
    return std::shared_ptr<const EpochRows>(t);
  }

  const std::unique_ptr<GraphStore> store_;
  const RowShape shape_;
  const std::vector<TensorLayout> tensors_;
  mutable absl::Mutex mu_;
  mutable std::deque<std::shared_ptr<const EpochRows>> tables_
      ABSL_GUARDED_BY(mu_);
};

// An evaluation split: its graphs in file order (the first `count` of the
// store), packed once; an item is a row, read as one stored example (the
// records of its graphs, each behind its length), so that rows are read
// ahead as examples are.
class EvalWorkload : public Workload {
 public:
  EvalWorkload(std::unique_ptr<GraphStore> store, uint64_t count,
               RowShape shape, std::vector<uint32_t> starts)
      : store_(std::move(store)),
        count_(count),
        shape_(shape),
        starts_(std::move(starts)),
        rows_(*this),
        tensors_(RowTensors(shape)) {}

  uint64_t num_examples() const override { return starts_.size(); }
  bool shuffle() const override { return false; }
  const std::vector<TensorLayout>& tensors() const override { return tensors_; }
  const ExampleSource* source() const override { return &rows_; }

  absl::Status FillItem(FillContext& ctx, uint8_t* const* out) const override {
    const ItemRef& it = ctx.item();
    if (!it.valid) {
      WriteRow(shape_, {}, out);
      return absl::OkStatus();
    }
    std::string bytes;
    int64_t label = 0;
    absl::Status st = ctx.Read(ctx.key(), &bytes, &label);
    if (!st.ok()) return st;
    // The row's records, each behind its 4-byte length (RowSource).
    std::vector<Graph> graphs;
    size_t at = 0;
    const auto [begin, end] = Range(it.id);
    for (uint64_t id = begin; id < end; ++id) {
      const Info& info = store_->info(id);
      if (info.nodes == kDamaged || !shape_.Fits(info.nodes, info.bonds)) {
        if (ctx.counters() != nullptr) {
          (info.nodes == kDamaged ? ctx.counters()->decode_errors
                                  : ctx.counters()->skipped_examples)
              .fetch_add(1, std::memory_order_relaxed);
        }
        continue;
      }
      uint32_t len = 0;
      if (bytes.size() - at < 4) return Short(it.id);
      memcpy(&len, bytes.data() + at, 4);
      at += 4;
      if (bytes.size() - at < len) return Short(it.id);
      absl::StatusOr<Graph> g = store_->Parse(id, bytes.substr(at, len));
      if (!g.ok()) return g.status();
      at += len;
      graphs.push_back(*std::move(g));
    }
    std::vector<const Graph*> members;
    for (const Graph& g : graphs) members.push_back(&g);
    WriteRow(shape_, members, out);
    return absl::OkStatus();
  }

 private:
  std::pair<uint64_t, uint64_t> Range(uint64_t row) const {
    return {starts_[row], row + 1 < starts_.size() ? starts_[row + 1] : count_};
  }
  static absl::Status Short(uint64_t row) {
    return absl::InternalError(
        absl::StrCat("ogbg: the stored bytes of row ", row, " are short"));
  }

  class RowSource : public ExampleSource {
   public:
    explicit RowSource(const EvalWorkload& w) : w_(w) {}
    absl::Status Read(const ExampleKey& key, std::string* bytes,
                      int64_t* label) const override {
      *label = 0;
      if (key.id >= w_.starts_.size()) {
        return absl::OutOfRangeError(absl::StrCat("ogbg: no row ", key.id));
      }
      bytes->clear();
      const auto [begin, end] = w_.Range(key.id);
      std::string rec;
      for (uint64_t id = begin; id < end; ++id) {
        const Info& info = w_.store_->info(id);
        if (info.nodes == kDamaged || !w_.shape_.Fits(info.nodes, info.bonds)) {
          continue;
        }
        absl::Status st = w_.store_->Read({0, 0, id}, &rec, label);
        if (!st.ok()) return st;
        const uint32_t len = uint32_t(rec.size());
        bytes->append(reinterpret_cast<const char*>(&len), 4);
        bytes->append(rec);
      }
      return absl::OkStatus();
    }
    std::string Describe(const ExampleKey& key) const override {
      if (key.id >= w_.starts_.size()) return absl::StrCat("row ", key.id);
      const auto [begin, end] = w_.Range(key.id);
      return absl::StrCat("graphs ", begin, "..", end, " from ",
                          w_.store_->Describe({0, 0, begin}));
    }

   private:
    const EvalWorkload& w_;
  };

  const std::unique_ptr<GraphStore> store_;
  const uint64_t count_;
  const RowShape shape_;
  const std::vector<uint32_t> starts_;
  const RowSource rows_;
  const std::vector<TensorLayout> tensors_;
};

// The split's shard files, under data/ogbg_molpcba/0.1.3/ or data/ itself.
absl::StatusOr<std::vector<std::string>> SplitFiles(const DataRoot& root,
                                                    const std::string& data,
                                                    Split split) {
  std::vector<std::string> names;
  if (split == Split::kTrain || split == Split::kEvalTrain) {
    for (uint64_t i = 0; i < kTrainShards; ++i) {
      names.push_back(absl::StrCat("ogbg_molpcba-train.tfrecord-0000", i,
                                   "-of-0000", kTrainShards));
    }
  } else {
    names.push_back(absl::StrCat(
        "ogbg_molpcba-", split == Split::kValidation ? "validation" : "test",
        ".tfrecord-00000-of-00001"));
  }
  for (const std::string& dir : {absl::StrCat(data, "/", kVersionDir), data}) {
    if (!root.Resolve(absl::StrCat(dir, "/", names[0])).ok()) continue;
    std::vector<std::string> paths;
    for (const std::string& n : names) {
      paths.push_back(absl::StrCat(dir, "/", n));
      if (absl::Status s = root.Resolve(paths.back()).status(); !s.ok()) {
        return absl::NotFoundError(
            absl::StrCat("ogbg: ", paths.back(), ": ", s.message()));
      }
    }
    return paths;
  }
  return absl::NotFoundError(absl::StrCat("ogbg: no ", names[0], " under ",
                                          data, "/", kVersionDir, " or ", data,
                                          " (TFDS ogbg_molpcba 0.1.3)"));
}

}  // namespace
}  // namespace ogbg

namespace {

absl::StatusOr<std::unique_ptr<Workload>> Create(const WorkloadContext& c) {
  using namespace ogbg;  // NOLINT: this file's own namespace
  const uint64_t r = c.options.Uint("graphs_per_row");
  if (c.split == Split::kTrain && r > kMaxGraphsPerRow) {
    return c.options.Invalid(
        "graphs_per_row",
        absl::StrCat("is not an integer in [1, ", kMaxGraphsPerRow, "]"));
  }
  const uint64_t eval_train = c.options.Uint("eval_train_examples");
  const std::shared_ptr<const DataRoot>& root = c.root;
  absl::StatusOr<std::vector<std::string>> files = SplitFiles(
      *root, c.data_path().empty() ? root->path() : c.data_path(), c.split);
  if (!files.ok()) return files.status();
  TFRecordOptions tfr;
  tfr.root = root;
  tfr.max_record_bytes = kMaxRecordBytes;
  tfr.cache = c.config.cache;
  absl::StatusOr<TFRecordShards> shards =
      TFRecordShards::Open(*files, tfr, nullptr, 8, c.pool());
  if (!shards.ok()) return shards.status();
  const uint64_t n = shards->size();
  if (n == 0 || n >= kDamaged) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ogbg: ", files->front(), " and its split hold ", n, " graphs"));
  }
  auto store = std::make_unique<GraphStore>(*std::move(shards), n);
  if (absl::Status s = store->Index(c.pool()); !s.ok()) return s;
  const RowShape shape{int64_t(r)};
  if (c.split == Split::kTrain) {
    return std::unique_ptr<Workload>(
        new TrainWorkload(std::move(store), shape, c.pool()));
  }
  const uint64_t count =
      c.split == Split::kEvalTrain ? std::min(n, eval_train) : n;
  std::vector<uint32_t> starts = PackStarts(
      *store, shape, count, [](uint64_t first, uint64_t c, uint64_t* out) {
        for (uint64_t i = 0; i < c; ++i) out[i] = first + i;
      });
  if (starts.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "ogbg: no graph of split ", c.split_name(),
        " can be served (every one is damaged or over a row's budget)"));
  }
  return std::unique_ptr<Workload>(
      new EvalWorkload(std::move(store), count, shape, std::move(starts)));
}

// Rows of train splits hold up to kMaxGraphsPerRow graphs (checked by
// Create), evaluation rows up to kMaxEvalGraphsPerRow.
constexpr OptionSpec kOptions[] = {
    UintOption("graphs_per_row", ogbg::kDefaultGraphsPerRow, 1,
               ogbg::kMaxEvalGraphsPerRow,
               "r, a row's graph budget (26 r nodes, 56 r edges; at most "
               "1024 on train)"),
    EvalTrainExamples(ogbg::kDefaultEvalTrain),
};

}  // namespace

const WorkloadEntry kOgbgWorkload = {
    "ogbg",
    "TFDS ogbg_molpcba, AlgoPerf's jraph graph batching in fixed rows",
    kEverySplit,
    kOptions,
    Create,
};

}  // namespace batchd

// The criteo1tb workload; see criteo1tb.h and docs/criteo1tb.md.
#include "workloads/criteo1tb/criteo1tb.h"

#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <deque>
#include <map>
#include <optional>
#include <tuple>

#include "absl/base/thread_annotations.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "workloads/criteo1tb/criteo_blocks.h"
#include "workloads/criteo1tb/criteo_workload.h"

namespace batchd {
namespace criteo {

std::vector<TensorLayout> Tensors(const Options& o) {
  std::vector<TensorLayout> t = {{"inputs", DType::kFloat32, {kInputs}},
                                 {"targets", DType::kFloat32, {}},
                                 {"weights", DType::kFloat32, {}}};
  if (o.exact_ids) t.push_back({"ids", DType::kInt64, {kCategorical}});
  return t;
}

// Writes line `j` of `block` (zeros with weight 0 when damaged or null).
void WriteLine(const ParsedBlock* block, uint64_t j, bool exact_ids,
               uint8_t* const* out, WorkloadCounters* counters) {
  if (block == nullptr || block->bad[j] != 0) {
    std::memset(out[0], 0, kInputs * 4);
    std::memset(out[1], 0, 4);
    std::memset(out[2], 0, 4);
    if (exact_ids) std::memset(out[3], 0, kCategorical * 8);
    if (block != nullptr && counters != nullptr) {
      counters->decode_errors.fetch_add(1, std::memory_order_relaxed);
    }
    return;
  }
  const float* v = block->values.data() + j * kFields;
  std::memcpy(out[0], v + 1, kInputs * 4);
  std::memcpy(out[1], v, 4);
  const float one = 1.0f;
  std::memcpy(out[2], &one, 4);
  if (exact_ids) {
    std::memcpy(out[3], block->ids.data() + j * kCategorical, kCategorical * 8);
  }
}

// A line of `block` through the parse cache: a block not parsed is read
// under `key` through the item's context (the pending rule: its status is
// returned unchanged). The item named in the schedule's ExamplesOf for the
// block (`reader`) reads it even when it is parsed already, so that what
// was read ahead for it is taken and freed.
absl::StatusOr<std::shared_ptr<const ParsedBlock>> BlockOf(
    const BlockCache& cache, FillContext& ctx, const ExampleKey& key,
    bool reader) {
  std::string bytes;
  int64_t label = 0;
  if (reader) {
    if (absl::Status s = ctx.Read(key, &bytes, &label); !s.ok()) return s;
    return cache.Get(key.id, [&](std::string* out) {
      out->swap(bytes);
      return absl::OkStatus();
    });
  }
  return cache.Get(
      key.id, [&](std::string* out) { return ctx.Read(key, out, &label); });
}

}  // namespace criteo

namespace {

using criteo::BlockCache;
using criteo::BlockTable;
using criteo::kCategorical;
using criteo::kFields;
using criteo::kInputs;
using criteo::ParsedBlock;

using criteo::BlockOf;
using criteo::Blocks;
using criteo::kAlgoPerfEvalTrain;
using criteo::kName;
using criteo::kSpareBlocks;
using criteo::Options;
using criteo::Tensors;
using criteo::WriteLine;

Options OptionsOf(const OptionValues& v) {
  Options out;
  out.exact_ids = v.Text("ids") == "int64";
  out.block_bytes = v.Uint("block_kib") << 10;
  out.window_blocks = v.Uint("window_blocks");
  out.max_line = v.Uint("max_line_bytes");
  out.eval_train = v.Uint("eval_train_examples");
  return out;
}

// day_{D}_{NN}: D in 0..23 (no leading zero), NN two digits; nothing else.
bool DayFile(const char* name, int* day, int* index) {
  if (std::strncmp(name, "day_", 4) != 0) return false;
  const char* p = name + 4;
  const char* u = std::strchr(p, '_');
  if (u == nullptr || u == p || u - p > 2) return false;
  if (u - p == 2 && p[0] == '0') return false;
  int d = 0;
  for (const char* q = p; q < u; ++q) {
    if (*q < '0' || *q > '9') return false;
    d = d * 10 + (*q - '0');
  }
  const char* n = u + 1;
  if (std::strlen(n) != 2 || n[0] < '0' || n[0] > '9' || n[1] < '0' ||
      n[1] > '9') {
    return false;
  }
  if (d > 23) return false;
  *day = d;
  *index = (n[0] - '0') * 10 + (n[1] - '0');
  return true;
}

// The split's files, sorted by (day, index), relative to the data root.
absl::StatusOr<std::vector<std::string>> SplitFiles(const DataRoot& root,
                                                    const std::string& dir,
                                                    Split split) {
  std::vector<std::tuple<int, int, std::string>> found;
  absl::Status listed = root.ForEachEntry(dir, [&](const dirent& e) {
    int day = 0, index = 0;
    if (!DayFile(e.d_name, &day, &index)) return true;
    const bool train = day <= 22;
    bool take = false;
    switch (split) {
      case Split::kTrain:
      case Split::kEvalTrain:
        take = train;
        break;
      case Split::kValidation:
        take = day == 23 && index >= 19 && index <= 35;
        break;
      case Split::kTest:
        take = day == 23 && index <= 18;
        break;
    }
    if (take) found.emplace_back(day, index, e.d_name);
    return true;
  });
  if (!listed.ok()) return listed;
  std::sort(found.begin(), found.end());
  std::vector<std::string> files;
  for (auto& [day, index, name] : found) {
    files.push_back(absl::StrCat(dir, "/", name));
  }
  if (files.empty()) {
    return absl::NotFoundError(absl::StrCat(
        kName, ": no file of split ", SplitName(split), " in ", dir,
        " (day_0_NN .. day_22_NN for train and eval_train, day_23_00 .. "
        "day_23_18 for test, day_23_19 .. day_23_35 for validation)"));
  }
  return files;
}

// ---------------------------------------------------------------------------
// Evaluation splits: lines in file order, counted at Create.

// Items are the lines of the pass (ExampleSchedule's); a block is read
// ahead for the item of its first line.
class EvalSchedule : public ExampleSchedule {
 public:
  EvalSchedule(const Sampler& sampler, const std::vector<uint64_t>& first_line)
      : ExampleSchedule(sampler), first_line_(first_line) {}
  bool items_are_examples() const override { return false; }
  bool ExamplesOf(uint64_t step, uint32_t rank,
                  std::vector<ExampleKey>* keys) override {
    if (!Ready(step).ok()) return false;
    absl::StatusOr<StepItems> items = Locate(step, rank);
    if (!items.ok()) return false;
    if (items->valid == 0) return true;
    const uint64_t lo = Item(*items, 0).id;
    const uint64_t hi = Item(*items, items->valid - 1).id;
    // Blocks whose first line lies in [lo, hi] (ids of a pass are
    // consecutive); a block of no line has the first line of the next.
    auto b = std::lower_bound(first_line_.begin(), first_line_.end() - 1, lo);
    for (; b != first_line_.end() - 1 && *b <= hi; ++b) {
      if (*(b + 1) == *b) continue;
      const uint64_t block = uint64_t(b - first_line_.begin());
      keys->push_back({items->epoch, block, block});
    }
    return true;
  }

 private:
  const std::vector<uint64_t>& first_line_;
};

// `algoperf_batches`: the pass's batches are AlgoPerf's (validation and
// test: the same lines in the same batches), so that each row takes the
// value AlgoPerf's TF gives its place in the batch: the last (rows mod 8)
// rows of a batch have the scalar dense values (criteo_line.h's
// ScalarDense), written from the counts the parse keeps.
class EvalWorkload : public Workload {
 public:
  EvalWorkload(Options o, std::shared_ptr<BlockTable> table,
               std::vector<uint64_t> first_line, uint64_t n,
               bool algoperf_batches)
      : o_(o),
        table_(std::move(table)),
        first_line_(std::move(first_line)),
        n_(n),
        algoperf_batches_(algoperf_batches),
        tensors_(Tensors(o)),
        cache_(table_, kSpareBlocks, o.exact_ids, algoperf_batches),
        blocks_(table_) {}

  std::unique_ptr<Schedule> MakeSchedule(
      const Sampler& sampler) const override {
    // Every schedule of the stream has its global batch size.
    batch_.store(sampler.global_batch_size(), std::memory_order_relaxed);
    return std::make_unique<EvalSchedule>(sampler, first_line_);
  }
  const ExampleSource* source() const override { return &blocks_; }
  uint64_t num_examples() const override { return n_; }
  bool shuffle() const override { return false; }
  const std::vector<TensorLayout>& tensors() const override { return tensors_; }

  absl::Status FillItem(FillContext& ctx, uint8_t* const* out) const override {
    const ItemRef& item = ctx.item();
    if (!item.valid) {
      WriteLine(nullptr, 0, o_.exact_ids, out, nullptr);
      return absl::OkStatus();
    }
    const uint64_t b = uint64_t(std::upper_bound(first_line_.begin(),
                                                 first_line_.end(), item.id) -
                                first_line_.begin()) -
                       1;
    absl::StatusOr<std::shared_ptr<const ParsedBlock>> block = BlockOf(
        cache_, ctx, ExampleKey{item.epoch, b, b}, item.id == first_line_[b]);
    if (!block.ok()) return block.status();
    const uint64_t j = item.id - first_line_[b];
    if (j >= (*block)->lines) {
      return absl::DataLossError(absl::StrCat(
          kName, ": ", table_->Describe(b), " holds ", (*block)->lines,
          " lines now, ", first_line_[b + 1] - first_line_[b],
          " when counted (the file changed)"));
    }
    WriteLine(block->get(), j, o_.exact_ids, out, ctx.counters());
    if (algoperf_batches_ && (*block)->bad[j] == 0 &&
        ScalarRow(item.position)) {
      float dense[criteo::kDense];
      for (int k = 0; k < criteo::kDense; ++k) {
        dense[k] =
            criteo::ScalarDense((*block)->counts[j * criteo::kDense + k]);
      }
      std::memcpy(out[0], dense, sizeof(dense));
    }
    return absl::OkStatus();
  }

 private:
  // Whether row `r` of the pass is among the last (rows mod 8) of its
  // batch, which TF computes one value at a time.
  bool ScalarRow(uint64_t r) const {
    const uint64_t b = batch_.load(std::memory_order_relaxed);
    if (b == 0) return false;
    const uint64_t first = r - r % b;
    const uint64_t rows = std::min(b, n_ - first);
    return r - first >= rows - rows % 8;
  }

  const Options o_;
  const std::shared_ptr<BlockTable> table_;
  const std::vector<uint64_t> first_line_;  // per block, + end
  const uint64_t n_;
  const bool algoperf_batches_;
  mutable std::atomic<uint64_t> batch_{0};  // 0: no schedule yet
  const std::vector<TensorLayout> tensors_;
  const BlockCache cache_;
  const Blocks blocks_;
};

absl::StatusOr<std::unique_ptr<Workload>> Create(const WorkloadContext& c) {
  const Options o = OptionsOf(c.options);
  const std::shared_ptr<const DataRoot>& root = c.root;
  const WorkloadConfig& config = c.config;
  const Split split = c.split;
  absl::StatusOr<std::vector<std::string>> files =
      SplitFiles(*root, config.data_path, split);
  if (!files.ok()) return files.status();
  absl::StatusOr<std::shared_ptr<BlockTable>> table =
      BlockTable::Create(root, *std::move(files), o.block_bytes, o.max_line);
  if (!table.ok()) return table.status();
  Executor* pool = config.pool();
  std::shared_ptr<const CacheDir> store =
      config.cache != nullptr && config.cache->enabled() ? config.cache
                                                         : nullptr;
  if (store != nullptr) (*table)->LoadCounts(*store);
  if (split == Split::kTrain) {
    if ((*table)->num_blocks() == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          kName, ": the train files of ", config.data_path, " are empty"));
    }
    return criteo::MakeTrainWorkload(o, *std::move(table), pool, store);
  }
  // Evaluation: count the lines of the files it needs, in parallel, file
  // by file (eval_train stops at eval_train_examples).
  const BlockTable& t = **table;
  std::vector<uint64_t> first_line{0};
  const uint64_t want = split == Split::kEvalTrain ? o.eval_train : UINT64_MAX;
  for (size_t f = 0; f < t.num_files() && first_line.back() < want; ++f) {
    const uint64_t b0 = t.first_block(f), b1 = t.first_block(f + 1);
    absl::Status s = ParallelFor(
        pool, Priority::kServing, b1 - b0, b1 - b0,
        [&](uint64_t i) -> absl::Status { return t.Lines(b0 + i).status(); },
        1);
    if (!s.ok()) {
      // What was counted is kept (its request may have been cancelled):
      // the next open of these files counts only the rest.
      if (store != nullptr && t.counted_since_store() > 0) {
        t.StoreCounts(*store);
      }
      return s;
    }
    for (uint64_t b = b0; b < b1; ++b) {
      first_line.push_back(first_line.back() + t.KnownLines(b));
    }
  }
  if (store != nullptr && t.counted_since_store() > 0) t.StoreCounts(*store);
  const uint64_t n = std::min(want, first_line.back());
  if (n == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(kName, ": the ", SplitName(split), " files of ",
                     config.data_path, " hold no line"));
  }
  return std::unique_ptr<Workload>(
      new EvalWorkload(o, *std::move(table), std::move(first_line), n,
                       split != Split::kEvalTrain));
}

constexpr const char* kIds[] = {"float32", "int64"};
constexpr OptionSpec kOptions[] = {
    ChoiceOption("ids", "float32", kIds,
                 "int64 adds tensor ids int64 [26], the hashed ids before "
                 "AlgoPerf's cast to float32"),
    UintOption("block_kib", 1024, 64, 65536, "block size in KiB"),
    UintOption("window_blocks", 64, 1, 4096,
               "blocks whose lines are shuffled together (train)"),
    UintOption("max_line_bytes", 65536, 128, uint64_t(1) << 24,
               "longer lines are damaged"),
    EvalTrainExamples(kAlgoPerfEvalTrain),
};

}  // namespace

const WorkloadEntry kCriteo1TbWorkload = {
    "criteo1tb",
    "Criteo 1TB TSV day files, AlgoPerf's hashing and log transform",
    kEverySplit,
    kOptions,
    Create,
};

}  // namespace batchd

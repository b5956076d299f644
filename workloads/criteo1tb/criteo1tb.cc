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
#include "workloads/packed_schedule.h"

namespace batchd {
namespace {

using criteo::BlockCache;
using criteo::BlockTable;
using criteo::kCategorical;
using criteo::kFields;
using criteo::kInputs;
using criteo::ParsedBlock;

constexpr char kName[] = "criteo1tb";
constexpr uint64_t kAlgoPerfEvalTrain = 83279872;
// Blocks parsed and kept per stream beyond the window being served.
constexpr size_t kSpareBlocks = 16;
// Blocks counted between two stores of the counts in the daemon's cache.
constexpr uint64_t kStoreEvery = 8192;

struct Options {
  bool exact_ids = false;
  uint64_t block_bytes = 1 << 20;
  uint64_t window_blocks = 64;
  uint64_t max_line = 65536;
  uint64_t eval_train = kAlgoPerfEvalTrain;
};

absl::StatusOr<Options> ParseOptions(const WorkloadConfig& config) {
  absl::StatusOr<WorkloadOptions> o =
      WorkloadOptions::Create(kName, config.options,
                              {"ids", "block_kib", "window_blocks",
                               "max_line_bytes", "eval_train_examples"});
  if (!o.ok()) return o.status();
  Options out;
  absl::StatusOr<std::string> ids =
      o->Choice("ids", "float32", {"float32", "int64"});
  if (!ids.ok()) return ids.status();
  out.exact_ids = *ids == "int64";
  absl::StatusOr<uint64_t> v = o->Uint("block_kib", 1024, 64, 65536);
  if (!v.ok()) return v.status();
  out.block_bytes = *v << 10;
  if (v = o->Uint("window_blocks", 64, 1, 4096); !v.ok()) return v.status();
  out.window_blocks = *v;
  if (v = o->Uint("max_line_bytes", 65536, 128, uint64_t(1) << 24); !v.ok()) {
    return v.status();
  }
  out.max_line = *v;
  if (v = o->Uint("eval_train_examples", kAlgoPerfEvalTrain, 1,
                  uint64_t(1) << 40);
      !v.ok()) {
    return v.status();
  }
  out.eval_train = *v;
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
  absl::StatusOr<int> fd = root.OpenDirectory(dir);
  if (!fd.ok()) return fd.status();
  DIR* d = fdopendir(*fd);
  if (d == nullptr) {
    close(*fd);
    return absl::InternalError(absl::StrCat(kName, ": cannot list ", dir));
  }
  std::vector<std::tuple<int, int, std::string>> found;
  while (dirent* e = readdir(d)) {
    int day = 0, index = 0;
    if (!DayFile(e->d_name, &day, &index)) continue;
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
    if (take) found.emplace_back(day, index, e->d_name);
  }
  closedir(d);
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

// The stored examples: one entry per block, its bytes (BlockTable::ReadBlock).
class Blocks : public ExampleSource {
 public:
  explicit Blocks(std::shared_ptr<const BlockTable> table)
      : table_(std::move(table)) {}
  absl::Status Read(const ExampleKey& key, std::string* bytes,
                    int64_t* label) const override {
    *label = 0;
    return table_->ReadBlock(key.id, bytes);
  }
  std::string Describe(const ExampleKey& key) const override {
    return key.id < table_->num_blocks() ? table_->Describe(key.id)
                                         : absl::StrCat("block ", key.id);
  }

 private:
  const std::shared_ptr<const BlockTable> table_;
};

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

class EvalWorkload : public Workload {
 public:
  EvalWorkload(Options o, std::shared_ptr<BlockTable> table,
               std::vector<uint64_t> first_line, uint64_t n)
      : o_(o),
        table_(std::move(table)),
        first_line_(std::move(first_line)),
        n_(n),
        tensors_(Tensors(o)),
        cache_(table_, kSpareBlocks, o.exact_ids),
        blocks_(table_) {}

  std::unique_ptr<Schedule> MakeSchedule(
      const Sampler& sampler) const override {
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
    return absl::OkStatus();
  }

 private:
  const Options o_;
  const std::shared_ptr<BlockTable> table_;
  const std::vector<uint64_t> first_line_;  // per block, + end
  const uint64_t n_;
  const std::vector<TensorLayout> tensors_;
  const BlockCache cache_;
  const Blocks blocks_;
};

// ---------------------------------------------------------------------------
// Train: blocks permuted per epoch, lines shuffled within windows of blocks.

uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t NextInstance() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1);
}

// What is known of an epoch: the first row of each window learnt so far,
// from window w0 on (0, unless the epoch was entered at a cursor).
struct EpochRows {
  uint64_t w0 = 0;
  std::vector<uint64_t> first_row{0};  // windows w0 .. end(), + 1
  bool complete = false;
  uint64_t end() const { return w0 + first_row.size() - 1; }
  uint64_t Row(uint64_t w) const { return first_row[w - w0]; }
  bool Has(uint64_t row) const {
    return row >= first_row.front() && row < first_row.back();
  }
};

// A window of an epoch: its blocks (in the epoch's block order), the lines
// before each, the permutation of its lines, and for each block the least
// row of the window (counted from the window's first) that reads it: the
// row the block is read ahead for.
struct WindowLayout {
  uint64_t seed = 0, epoch = 0, window = 0;
  std::vector<uint64_t> blocks;
  std::vector<uint64_t> first;   // blocks + 1
  std::vector<uint64_t> reader;  // per block; UINT64_MAX: a block of no line
  EpochPermutation perm{1, 0, 0};
};

class TrainWorkload : public Workload, public RowPacking {
 public:
  TrainWorkload(Options o, std::shared_ptr<BlockTable> table, Executor* pool,
                std::shared_ptr<const CacheDir> cache)
      : o_(o),
        table_(std::move(table)),
        pool_(pool),
        store_(std::move(cache)),
        nb_(table_->num_blocks()),
        windows_((nb_ + o.window_blocks - 1) / o.window_blocks),
        tensors_(Tensors(o)),
        cache_(table_, 2 * o.window_blocks + kSpareBlocks, o.exact_ids),
        blocks_(table_) {}

  ~TrainWorkload() override {
    if (store_ != nullptr && table_->counted_since_store() > 0) {
      table_->StoreCounts(*store_);
    }
  }

  std::unique_ptr<Schedule> MakeSchedule(
      const Sampler& sampler) const override {
    return std::make_unique<PackedSchedule>(*this, sampler, pool_);
  }
  // The schedule's examples are blocks; its rows are lines.
  uint64_t num_examples() const override { return nb_; }
  bool examples_hold_many_rows() const override { return true; }
  bool shuffle() const override { return true; }
  const std::vector<TensorLayout>& tensors() const override { return tensors_; }

  const ExampleSource* source() const override { return &blocks_; }

  absl::Status FillItem(FillContext& ctx, uint8_t* const* out) const override {
    const ItemRef& item = ctx.item();
    return Fill(item.seed, item.epoch, item.position, out, ctx);
  }

  absl::StatusOr<uint64_t> RowsInEpoch(const EpochOrder& order) const override {
    absl::StatusOr<std::shared_ptr<const EpochRows>> t =
        Extend(order, UINT64_MAX, UINT64_MAX, nullptr);
    if (!t.ok()) return t.status();
    return (*t)->first_row.back();
  }
  absl::StatusOr<KnownRows> RowsUpTo(const EpochOrder& order,
                                     uint64_t want_rows,
                                     const StopFlag* stop) const override {
    absl::StatusOr<std::shared_ptr<const EpochRows>> t =
        Extend(order, want_rows, 0, stop);
    if (!t.ok()) return t.status();
    return KnownRows{(*t)->first_row.back(), (*t)->complete};
  }
  // A row's cursor is (epoch, w * M + j, row): the row is line j of window
  // w and row `row` of its epoch, M = window_blocks * max_rows_per_example
  // (the most lines a window can hold; w * M stays below the split's bytes).
  // Resuming from it thus needs the lines of window w alone (the rows
  // before it are in the cursor), not a count of the epoch's earlier
  // windows.
  absl::StatusOr<RowCursor> CursorOfRow(const EpochOrder& order,
                                        uint64_t row) const override;
  absl::StatusOr<uint64_t> RowAtCursor(const EpochOrder& order,
                                       const RowCursor& cursor,
                                       const StopFlag* stop) const override;
  absl::Status PrepareFrom(const EpochOrder& order, uint64_t row,
                           const StopFlag* stop) const override;
  absl::Status CheckCursor(uint64_t num_examples,
                           const RowCursor& cursor) const override {
    if (cursor.window / WindowRows() >= windows_ ||
        cursor.row < cursor.window % WindowRows()) {
      return absl::InvalidArgumentError(absl::StrCat(
          kName, ": cursor (", cursor.epoch, ", ", cursor.window, ", ",
          cursor.row, ") names no line: the train split has ", windows_,
          " windows of at most ", WindowRows(), " lines"));
    }
    return absl::OkStatus();
  }
  uint64_t max_rows_per_example() const override {
    return o_.block_bytes / 2 + 1;  // a line is at least "\n" after a byte
  }
  absl::Status FillRow(const EpochOrder& order, uint64_t row,
                       uint8_t* const* out,
                       WorkloadCounters* counters) const override {
    FillContext ctx(ItemRef{order.seed, order.epoch, row, row, true}, counters,
                    &blocks_);
    return Fill(order.seed, order.epoch, row, out, ctx);
  }
  // The blocks read first by rows [first_row, first_row + count): each
  // block of a window is read ahead for the window's first row that reads
  // it (WindowLayout::reader), keyed by (epoch, its position in the epoch's
  // block order, block).
  bool ExamplesOfRows(const EpochOrder& order, uint64_t first_row,
                      uint64_t count,
                      std::vector<ExampleKey>* keys) const override;

 private:
  uint64_t WindowRows() const {
    return o_.window_blocks * max_rows_per_example();
  }
  // The window of a row t has (t.Has(row)).
  static uint64_t WindowOf(const EpochRows& t, uint64_t row) {
    return t.w0 +
           uint64_t(
               std::upper_bound(t.first_row.begin(), t.first_row.end(), row) -
               t.first_row.begin()) -
           1;
  }
  // Lines of windows [w, w + rows->size()) of the epoch, their blocks
  // counted in parallel on the executor.
  absl::Status CountWindows(const EpochOrder& order, uint64_t w,
                            std::vector<uint64_t>* rows) const;
  // Makes t what is known of the epoch, unless more is known already.
  void Keep(const EpochOrder& order, std::shared_ptr<const EpochRows> t,
            bool replace) const;
  std::shared_ptr<const EpochRows> Find(uint64_t seed, uint64_t epoch) const {
    absl::MutexLock lock(&mu_);
    auto it = epochs_.find({seed, epoch});
    return it == epochs_.end() ? nullptr : it->second;
  }
  absl::StatusOr<std::shared_ptr<const EpochRows>> Extend(
      const EpochOrder& order, uint64_t want_rows, uint64_t want_windows,
      const StopFlag* stop) const;
  // Window w's blocks, their lines and the row that reads each first;
  // null when a block of it is not counted yet. Computation only (no I/O).
  std::shared_ptr<const WindowLayout> LayoutOf(uint64_t seed, uint64_t epoch,
                                               uint64_t w,
                                               uint64_t lines) const;
  absl::Status Fill(uint64_t seed, uint64_t epoch, uint64_t row,
                    uint8_t* const* out, FillContext& ctx) const;

  const Options o_;
  const std::shared_ptr<BlockTable> table_;
  Executor* const pool_;
  // Where the line counts are kept (null: cache off).
  const std::shared_ptr<const CacheDir> store_;
  const uint64_t nb_, windows_;
  const std::vector<TensorLayout> tensors_;
  const BlockCache cache_;
  const Blocks blocks_;
  // Names this workload in per-thread state (an address may be reused).
  const uint64_t instance_ = NextInstance();
  // The layouts of the windows being served and read ahead, the oldest
  // dropped past kLayouts.
  static constexpr size_t kLayouts = 8;
  mutable absl::Mutex layouts_mu_;
  mutable std::deque<std::shared_ptr<const WindowLayout>> layouts_
      ABSL_GUARDED_BY(layouts_mu_);
  mutable absl::Mutex mu_;
  // Learnt epochs by (seed, epoch); the oldest dropped past a few.
  mutable std::map<std::pair<uint64_t, uint64_t>,
                   std::shared_ptr<const EpochRows>>
      epochs_ ABSL_GUARDED_BY(mu_);
};

absl::Status TrainWorkload::CountWindows(const EpochOrder& order, uint64_t w,
                                         std::vector<uint64_t>* rows) const {
  const uint64_t p0 = w * o_.window_blocks;
  const uint64_t p1 = std::min(nb_, (w + rows->size()) * o_.window_blocks);
  std::vector<uint64_t> blocks(p1 - p0);
  EpochIds(order, p0, p1 - p0, blocks.data());
  std::vector<uint32_t> lines(blocks.size());
  absl::Status s = ParallelFor(
      pool_, Priority::kServing, blocks.size(), blocks.size(),
      [&](uint64_t i) -> absl::Status {
        absl::StatusOr<uint32_t> n = table_->Lines(blocks[i]);
        if (!n.ok()) return n.status();
        lines[i] = *n;
        return absl::OkStatus();
      },
      1);
  if (!s.ok()) return s;
  for (uint64_t i = 0; i < rows->size(); ++i) {
    (*rows)[i] = 0;
    for (uint64_t p = (w + i) * o_.window_blocks;
         p < std::min(p1, (w + i + 1) * o_.window_blocks); ++p) {
      (*rows)[i] += lines[p - p0];
    }
  }
  // Kept now and then, so that a daemon that dies loses little counting.
  if (store_ != nullptr && table_->counted_since_store() >= kStoreEvery) {
    table_->StoreCounts(*store_);
  }
  return absl::OkStatus();
}

void TrainWorkload::Keep(const EpochOrder& order,
                         std::shared_ptr<const EpochRows> t,
                         bool replace) const {
  absl::MutexLock lock(&mu_);
  auto& slot = epochs_[{order.seed, order.epoch}];
  if (replace || slot == nullptr || slot->w0 != t->w0 ||
      slot->end() < t->end()) {
    slot = std::move(t);
  }
  while (epochs_.size() > 4) epochs_.erase(epochs_.begin());
}

absl::StatusOr<std::shared_ptr<const EpochRows>> TrainWorkload::Extend(
    const EpochOrder& order, uint64_t want_rows, uint64_t want_windows,
    const StopFlag* stop) const {
  std::shared_ptr<const EpochRows> t = Find(order.seed, order.epoch);
  if (t == nullptr) t = std::make_shared<EpochRows>();
  // Windows are counted a few at a time, their blocks in parallel.
  const uint64_t kChunk = 2;
  while (!t->complete &&
         (t->first_row.back() < want_rows || t->end() < want_windows)) {
    if (stop != nullptr && stop->load()) {
      return absl::CancelledError(absl::StrCat(kName, ": stream closed"));
    }
    std::vector<uint64_t> rows(std::min(windows_, t->end() + kChunk) -
                               t->end());
    if (absl::Status s = CountWindows(order, t->end(), &rows); !s.ok()) {
      return s;
    }
    auto next = std::make_shared<EpochRows>(*t);
    for (uint64_t r : rows) {
      next->first_row.push_back(next->first_row.back() + r);
    }
    next->complete = next->end() == windows_;
    t = next;
    Keep(order, t, false);
  }
  return t;
}

absl::StatusOr<RowCursor> TrainWorkload::CursorOfRow(const EpochOrder& order,
                                                     uint64_t row) const {
  std::shared_ptr<const EpochRows> t = Find(order.seed, order.epoch);
  if (t == nullptr || !t->Has(row)) {
    return absl::OutOfRangeError(absl::StrCat(kName, ": row ", row,
                                              " of epoch ", order.epoch,
                                              " is not counted yet"));
  }
  const uint64_t w = WindowOf(*t, row);
  return RowCursor{order.epoch, w * WindowRows() + (row - t->Row(w)), row};
}

absl::StatusOr<uint64_t> TrainWorkload::RowAtCursor(
    const EpochOrder& order, const RowCursor& cursor,
    const StopFlag* stop) const {
  if (absl::Status s = CheckCursor(nb_, cursor); !s.ok()) return s;
  const uint64_t w = cursor.window / WindowRows();
  const uint64_t j = cursor.window % WindowRows();
  const uint64_t base = cursor.row - j;  // the rows before window w
  auto refuse = [&](const std::string& why) {
    return absl::InvalidArgumentError(
        absl::StrCat(kName, ": cursor (", cursor.epoch, ", ", cursor.window,
                     ", ", cursor.row, ") ", why));
  };
  if (w == 0 && base != 0) return refuse("has rows before the first window");
  std::shared_ptr<const EpochRows> t = Find(order.seed, order.epoch);
  if (t == nullptr || w < t->w0 || w >= t->end()) {
    // Entered here: only window w is counted, from the rows the cursor says
    // precede it.
    auto at = std::make_shared<EpochRows>();
    at->w0 = w;
    at->first_row = {base};
    Keep(order, at, true);
  } else if (t->Row(w) != base) {
    return refuse(absl::StrCat("says ", base, " rows precede window ", w,
                               "; its epoch has ", t->Row(w)));
  }
  absl::StatusOr<std::shared_ptr<const EpochRows>> f =
      Extend(order, 0, w + 1, stop);
  if (!f.ok()) return f.status();
  if (w >= (*f)->end() || j >= (*f)->Row(w + 1) - (*f)->Row(w)) {
    return refuse("is past its window's lines");
  }
  return cursor.row;
}

absl::Status TrainWorkload::PrepareFrom(const EpochOrder& order, uint64_t row,
                                        const StopFlag* stop) const {
  std::shared_ptr<const EpochRows> t = Find(order.seed, order.epoch);
  if (t == nullptr) return absl::OkStatus();  // counted from window 0
  // Another rank's cursor: its batch may begin in an earlier window.
  while (row < t->first_row.front()) {
    if (stop != nullptr && stop->load()) {
      return absl::CancelledError(absl::StrCat(kName, ": stream closed"));
    }
    if (t->w0 == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          kName, ": row ", row, " precedes epoch ", order.epoch, "'s first"));
    }
    std::vector<uint64_t> rows(1);
    if (absl::Status s = CountWindows(order, t->w0 - 1, &rows); !s.ok()) {
      return s;
    }
    if (rows[0] > t->first_row.front() ||
        (t->w0 == 1 && rows[0] != t->first_row.front())) {
      return absl::InvalidArgumentError(
          absl::StrCat(kName, ": the cursor's rows before window ", t->w0,
                       " disagree with the lines of the windows before it"));
    }
    auto next = std::make_shared<EpochRows>(*t);
    next->w0 = t->w0 - 1;
    next->first_row.insert(next->first_row.begin(),
                           t->first_row.front() - rows[0]);
    t = next;
    Keep(order, t, true);
  }
  return absl::OkStatus();
}

std::shared_ptr<const WindowLayout> TrainWorkload::LayoutOf(
    uint64_t seed, uint64_t epoch, uint64_t w, uint64_t lines) const {
  {
    absl::MutexLock lock(&layouts_mu_);
    for (const auto& l : layouts_) {
      if (l->seed == seed && l->epoch == epoch && l->window == w) return l;
    }
  }
  auto l = std::make_shared<WindowLayout>();
  l->seed = seed;
  l->epoch = epoch;
  l->window = w;
  const uint64_t p0 = w * o_.window_blocks;
  const uint64_t p1 = std::min(nb_, p0 + o_.window_blocks);
  l->blocks.resize(p1 - p0);
  EpochPermutation(nb_, seed, epoch).Fill(p0, p1 - p0, l->blocks.data());
  l->first.assign(1, 0);
  size_t unseen = 0;
  l->reader.assign(l->blocks.size(), UINT64_MAX);
  for (uint64_t b : l->blocks) {
    const uint32_t n = table_->KnownLines(b);
    if (n == UINT32_MAX) return nullptr;
    l->first.push_back(l->first.back() + n);
    unseen += n > 0 ? 1 : 0;
  }
  if (l->first.back() != lines) return nullptr;
  l->perm = EpochPermutation(lines, Mix(seed ^ Mix(w + 0x5bd1e995)), epoch);
  // The first rows of a window read all its blocks but a few: look until
  // every block with a line has its reader.
  uint64_t q[1024];
  for (uint64_t r0 = 0; r0 < lines && unseen > 0; r0 += 1024) {
    const uint64_t n = std::min<uint64_t>(1024, lines - r0);
    l->perm.Fill(r0, n, q);
    for (uint64_t i = 0; i < n; ++i) {
      const size_t k =
          size_t(std::upper_bound(l->first.begin(), l->first.end(), q[i]) -
                 l->first.begin()) -
          1;
      if (l->reader[k] == UINT64_MAX) {
        l->reader[k] = r0 + i;
        --unseen;
      }
    }
  }
  absl::MutexLock lock(&layouts_mu_);
  layouts_.push_back(l);
  while (layouts_.size() > kLayouts) layouts_.pop_front();
  return l;
}

bool TrainWorkload::ExamplesOfRows(const EpochOrder& order, uint64_t first_row,
                                   uint64_t count,
                                   std::vector<ExampleKey>* keys) const {
  std::shared_ptr<const EpochRows> t = Find(order.seed, order.epoch);
  if (t == nullptr || count == 0 || !t->Has(first_row) ||
      first_row + count > t->first_row.back()) {
    return false;
  }
  std::vector<std::pair<uint64_t, ExampleKey>> found;  // (row, key)
  for (uint64_t w = WindowOf(*t, first_row);
       w < t->end() && t->Row(w) < first_row + count; ++w) {
    const uint64_t f = t->Row(w);
    std::shared_ptr<const WindowLayout> l =
        LayoutOf(order.seed, order.epoch, w, t->Row(w + 1) - f);
    if (l == nullptr) return false;
    for (size_t k = 0; k < l->blocks.size(); ++k) {
      const uint64_t r = l->reader[k];
      if (r == UINT64_MAX || f + r < first_row || f + r >= first_row + count) {
        continue;
      }
      found.push_back(
          {f + r, {order.epoch, w * o_.window_blocks + k, l->blocks[k]}});
    }
  }
  std::sort(found.begin(), found.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  for (const auto& [row, key] : found) keys->push_back(key);
  return true;
}

// Row `row` of the epoch: window w's lines, in the order of w's blocks,
// permuted by a permutation of its own (seeded by seed, w and the epoch).
absl::Status TrainWorkload::Fill(uint64_t seed, uint64_t epoch, uint64_t row,
                                 uint8_t* const* out, FillContext& ctx) const {
  std::shared_ptr<const EpochRows> t = Find(seed, epoch);
  if (t == nullptr || !t->Has(row)) {
    return absl::InternalError(absl::StrCat(kName, ": row ", row, " of epoch ",
                                            epoch, " is not counted yet"));
  }
  const uint64_t w = WindowOf(*t, row);
  // The layout of the window this thread served last (a batch's rows are
  // mostly of one window), else the shared one.
  thread_local std::shared_ptr<const WindowLayout> last;
  thread_local uint64_t last_owner = 0;
  if (last == nullptr || last_owner != instance_ || last->seed != seed ||
      last->epoch != epoch || last->window != w) {
    last = LayoutOf(seed, epoch, w, t->Row(w + 1) - t->Row(w));
    last_owner = instance_;
    if (last == nullptr) {
      return absl::InternalError(absl::StrCat(
          kName, ": window ", w, " of epoch ", epoch, " is not counted yet"));
    }
  }
  const WindowLayout& l = *last;
  const uint64_t r = row - t->Row(w);
  const uint64_t q = l.perm(r);
  const uint64_t k =
      uint64_t(std::upper_bound(l.first.begin(), l.first.end(), q) -
               l.first.begin()) -
      1;
  absl::StatusOr<std::shared_ptr<const ParsedBlock>> block = BlockOf(
      cache_, ctx, ExampleKey{epoch, w * o_.window_blocks + k, l.blocks[k]},
      l.reader[k] == r);
  if (!block.ok()) return block.status();
  const uint64_t j = q - l.first[k];
  if (j >= (*block)->lines) {
    return absl::DataLossError(absl::StrCat(
        kName, ": ", table_->Describe(l.blocks[k]), " holds ", (*block)->lines,
        " lines now, ", l.first[k + 1] - l.first[k],
        " when counted (the file changed)"));
  }
  WriteLine(block->get(), j, o_.exact_ids, out, ctx.counters());
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Workload>> CreateCriteo1TbWorkload(
    const WorkloadConfig& config) {
  absl::StatusOr<Options> o = ParseOptions(config);
  if (!o.ok()) return o.status();
  absl::StatusOr<Split> split = ParseSplit(
      kName, config.split,
      {Split::kTrain, Split::kEvalTrain, Split::kValidation, Split::kTest});
  if (!split.ok()) return split.status();
  absl::StatusOr<std::shared_ptr<const DataRoot>> root = DataRoot::Open(
      config.data_root.empty() ? config.data_path : config.data_root,
      config.access);
  if (!root.ok()) return root.status();
  absl::StatusOr<std::vector<std::string>> files =
      SplitFiles(**root, config.data_path, *split);
  if (!files.ok()) return files.status();
  absl::StatusOr<std::shared_ptr<BlockTable>> table =
      BlockTable::Create(*root, *std::move(files), o->block_bytes, o->max_line);
  if (!table.ok()) return table.status();
  Executor* pool = config.pool();
  std::shared_ptr<const CacheDir> store =
      config.cache != nullptr && config.cache->enabled() ? config.cache
                                                         : nullptr;
  if (store != nullptr) (*table)->LoadCounts(*store);
  if (*split == Split::kTrain) {
    if ((*table)->num_blocks() == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          kName, ": the train files of ", config.data_path, " are empty"));
    }
    return std::unique_ptr<Workload>(
        new TrainWorkload(*o, *std::move(table), pool, store));
  }
  // Evaluation: count the lines of the files it needs, in parallel, file
  // by file (eval_train stops at eval_train_examples).
  const BlockTable& t = **table;
  std::vector<uint64_t> first_line{0};
  const uint64_t want =
      *split == Split::kEvalTrain ? o->eval_train : UINT64_MAX;
  for (size_t f = 0; f < t.num_files() && first_line.back() < want; ++f) {
    const uint64_t b0 = t.first_block(f), b1 = t.first_block(f + 1);
    absl::Status s = ParallelFor(
        pool, Priority::kServing, b1 - b0, b1 - b0,
        [&](uint64_t i) -> absl::Status { return t.Lines(b0 + i).status(); },
        1);
    if (!s.ok()) return s;
    for (uint64_t b = b0; b < b1; ++b) {
      first_line.push_back(first_line.back() + t.KnownLines(b));
    }
  }
  if (store != nullptr && t.counted_since_store() > 0) t.StoreCounts(*store);
  const uint64_t n = std::min(want, first_line.back());
  if (n == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(kName, ": the ", SplitName(*split), " files of ",
                     config.data_path, " hold no line"));
  }
  return std::unique_ptr<Workload>(
      new EvalWorkload(*o, *std::move(table), std::move(first_line), n));
}

}  // namespace batchd

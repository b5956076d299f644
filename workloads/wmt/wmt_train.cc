// The wmt workload's train split; see wmt_train.h and wmt.h.
#include "workloads/wmt/wmt_train.h"

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/test_hooks.h"
#include "storage/cache_dir.h"
#include "workloads/packed_schedule.h"
#include "workloads/shared_work.h"
#include "workloads/wmt/epoch_tables.h"
#include "workloads/wmt/length_cache.h"
#include "workloads/wmt/length_index.h"
#include "workloads/wmt/packing.h"

namespace batchd {
namespace wmt {
namespace {

// The kept pairs of one window of a table and the window's rows (FillRow).
struct WindowPlan {
  std::shared_ptr<const EpochTable> table;  // null: none yet
  uint64_t window = 0;
  std::vector<uint64_t> ids, positions;
  std::vector<PackedLengths> lengths;
  std::vector<uint32_t> starts;  // PlanWindow(lengths)
  uint64_t skipped = 0, damaged = 0;  // drops in the window's range

  // The pairs of row `r` of the window: [starts[r], RowEnd(r)).
  size_t RowEnd(uint64_t r) const {
    return r + 1 < starts.size() ? starts[r + 1] : ids.size();
  }
};

// The last window this thread planned (a window's rows are mostly filled
// one after another by one worker, which lists each row's pairs just
// before it fills the row). It is kept with the table it came from, whose
// object it holds, so it is never taken for a window of another table.
WindowPlan& ThreadPlan() {
  thread_local WindowPlan plan;
  return plan;
}

// Test hook ($BATCHD_TEST_WMT_LEARN_HOLD=PATH, with test hooks on): while
// PATH exists, learning an epoch's first windows waits before each block,
// having created PATH.held once, so that a test can act while a stream is
// being prepared (e.g. resumes at a far cursor). It ends when PATH goes or
// `stop` is set.
void HoldForTest(const std::atomic<bool>* stop) {
  const char* path = TestHook("BATCHD_TEST_WMT_LEARN_HOLD");
  if (path == nullptr) return;
  const std::string held = absl::StrCat(path, ".held");
  while (access(path, F_OK) == 0 && !(stop != nullptr && stop->load())) {
    if (access(held.c_str(), F_OK) != 0) {
      const int fd = open(held.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
      if (fd >= 0) close(fd);
    }
    usleep(10000);
  }
}

std::vector<TensorLayout> TrainTensors(const Options& o) {
  const DType t = o.int64 ? DType::kInt64 : DType::kInt32;
  const std::vector<int64_t> shape = {int64_t(o.max_length)};
  std::vector<TensorLayout> tensors;
  for (const char* name :
       {"inputs", "targets", "inputs_position", "inputs_segmentation",
        "targets_position", "targets_segmentation"}) {
    tensors.push_back({name, t, shape});
  }
  return tensors;
}

void CountDrop(const PackedLengths& l, WorkloadCounters* counters) {
  if (counters == nullptr) return;
  if (l.inputs == kDroppedDamaged) {
    counters->decode_errors.fetch_add(1, std::memory_order_relaxed);
  } else {
    counters->skipped_examples.fetch_add(1, std::memory_order_relaxed);
  }
}

absl::Status RowOutOfRange(const EpochOrder& order, uint64_t row,
                           const EpochTable& table) {
  return absl::OutOfRangeError(absl::StrCat("wmt: row ", row, " of epoch ",
                                            order.epoch, " (which has ",
                                            table.first_row.back(), ")"));
}

// The lengths key of the train split's pairs: the model's bytes (not its
// path), the files' identity and the options that change lengths.
std::string TrainLengthsKey(const PairReader& reader,
                            const std::string& split) {
  const Options& o = reader.options();
  LengthsKeyParts key;
  key.model_bytes = reader.tokenizer()->model_bytes();
  key.source_identity = reader.source()->Identity();
  key.max_length = o.max_length;
  key.skip_empty = o.skip_empty;
  key.invalid_utf8 = o.invalid_utf8_name();
  key.source_kind = o.source;
  key.split = split;
  return LengthsKey(key);
}

// The train split's length index: the one the daemon's other streams of
// the same data use (joining its pass), else a new one; attached.
absl::StatusOr<std::shared_ptr<LengthIndex>> UseIndex(
    const PairReader& reader, const WorkloadConfig& config,
    const std::string& key, std::shared_ptr<const CacheDir> cache) {
  const Options& options = reader.options();
  LengthIndex::Options o;
  o.max_length = options.max_length;
  o.skip_empty = options.skip_empty;
  o.invalid_utf8 = options.invalid_utf8;
  o.index_threads = options.index_threads;
  if (const char* delay = TestHook("BATCHD_TEST_WMT_INDEX_DELAY_US")) {
    uint64_t us = 0;
    if (absl::SimpleAtoi(delay, &us)) o.delay_us = us;
  }
  auto make = [&]() -> absl::StatusOr<std::shared_ptr<LengthIndex>> {
    // A daemon's pass with a cache runs to its end: its result is kept.
    return LengthIndex::Create(reader.source(), reader.tokenizer(), o, key,
                               cache, reader.executor(),
                               /*outlive_users=*/config.shared != nullptr);
  };
  if (config.shared != nullptr) {
    absl::StatusOr<std::shared_ptr<LengthIndex>> found =
        config.shared->Find<LengthIndex>("wmt-length-index", key, make);
    if (!found.ok()) return found.status();
    if ((*found)->Attach()) return *std::move(found);
  }
  std::shared_ptr<LengthIndex> index = *make();  // not shared, or stopping
  index->Attach();
  return index;
}

class WmtTrainWorkload : public Workload, public RowPacking {
 public:
  WmtTrainWorkload(std::shared_ptr<const PairReader> reader,
                   std::shared_ptr<LengthIndex> index, std::string lengths_key,
                   std::shared_ptr<const CacheDir> cache,
                   std::shared_ptr<const Cancellation> request)
      : request_(std::move(request)),
        reader_(std::move(reader)),
        options_(reader_->options()),
        source_(*reader_->source()),
        index_(std::move(index)),
        lengths_key_(std::move(lengths_key)),
        cache_(std::move(cache)),
        tensors_(TrainTensors(options_)),
        tables_(std::make_unique<EpochTableCache>()) {}

  ~WmtTrainWorkload() override {
    stopping_.store(true);
    // Gone while its request still ran, or after it was cancelled: no
    // stream was made with it (tools and tests have no request).
    index_->Detach(request_ == nullptr || request_->finished());
  }

  std::unique_ptr<Schedule> MakeSchedule(
      const Sampler& sampler) const override {
    return std::make_unique<PackedSchedule>(*this, sampler,
                                            reader_->executor());
  }
  uint64_t num_examples() const override { return source_.size(); }
  bool shuffle() const override { return true; }
  const std::vector<TensorLayout>& tensors() const override { return tensors_; }
  std::optional<IndexProgress> progress() const override {
    return index_->progress();
  }
  uint64_t resident_bytes() const override {
    return reader_->tokenizer()->resident_bytes();
  }

  // The item is row ex.position of the shuffled epoch (PackedSchedule).
  absl::Status FillItem(FillContext& ctx, uint8_t* const* out) const override {
    const ItemRef& ex = ctx.item();
    return FillRowOf(ShuffledOrder(source_.size(), ex.seed, ex.epoch),
                     ex.position, out, ctx);
  }

  // Stored records (TFDS sources) are read through the context, by the
  // pair's id in the source (ExamplesOfRows); text lines are read from the
  // source in memory.
  const ExampleSource* source() const override {
    return source_.has_records() ? &records_ : nullptr;
  }

  absl::StatusOr<uint64_t> RowsInEpoch(const EpochOrder& order) const override;
  absl::StatusOr<KnownRows> RowsUpTo(const EpochOrder& order,
                                     uint64_t want_rows,
                                     const StopFlag* stop) const override;
  absl::Status FillRow(const EpochOrder& order, uint64_t row,
                       uint8_t* const* out,
                       WorkloadCounters* counters) const override;
  bool ExamplesOfRows(const EpochOrder& order, uint64_t first_row,
                      uint64_t count,
                      std::vector<ExampleKey>* keys) const override;
  absl::StatusOr<RowCursor> CursorOfRow(const EpochOrder& order,
                                        uint64_t row) const override;
  absl::StatusOr<uint64_t> RowAtCursor(const EpochOrder& order,
                                       const RowCursor& cursor,
                                       const StopFlag* stop) const override;
  absl::Status CheckCursor(uint64_t num_examples,
                           const RowCursor& cursor) const override;

 private:
  absl::Status CheckOrder(const EpochOrder& order) const {
    if (order.num_examples != source_.size() || !order.id_at) {
      return absl::InvalidArgumentError(
          absl::StrCat("wmt: the epoch order covers ", order.num_examples,
                       " examples, the data has ", source_.size()));
    }
    return absl::OkStatus();
  }
  absl::StatusOr<KnownRows> Extend(const EpochOrder& order, uint64_t want_rows,
                                   uint64_t want_windows,
                                   const StopFlag* stop) const;
  absl::Status Grow(const EpochOrder& order, EpochTableBuilder* b) const;
  absl::StatusOr<std::shared_ptr<const EpochTable>> TableFor(
      const EpochOrder& order) const;
  absl::Status WindowPairs(const EpochOrder& order, const EpochTable& table,
                           uint64_t w, WorkloadCounters* counters,
                           WindowPlan* plan) const;
  absl::Status Plan(const EpochOrder& order,
                    const std::shared_ptr<const EpochTable>& table, uint64_t w,
                    WindowPlan* plan) const;
  bool FillFromStoredTokens(const WindowPlan& plan, uint64_t r,
                            uint8_t* const* out) const;
  void WriteRow(const PackedRow& packed, uint8_t* const* out) const;
  // FillRow, reading stored pairs through `ctx`.
  absl::Status FillRowOf(const EpochOrder& order, uint64_t row,
                         uint8_t* const* out, FillContext& ctx) const;

  // The stored record of a pair of the source.
  class Records : public ExampleSource {
   public:
    explicit Records(const PairSource& source) : source_(source) {}
    absl::Status Read(const ExampleKey& key, std::string* bytes,
                      int64_t* label) const override {
      *label = 0;
      return source_.ReadRecord(key.id, bytes);
    }
    std::string Describe(const ExampleKey& key) const override {
      return absl::StrCat("pair ", key.id, " of ", source_.Describe());
    }

   private:
    const PairSource& source_;
  };

  // Constant after construction.
  // The request that made the workload (null outside a daemon).
  const std::shared_ptr<const Cancellation> request_;
  const std::shared_ptr<const PairReader> reader_;
  const Options& options_;    // reader_'s
  const PairSource& source_;  // reader_'s
  // The lengths (and stored token ids), perhaps shared with other streams.
  const std::shared_ptr<LengthIndex> index_;
  const std::string lengths_key_;
  // Where epoch row counts are kept (cache on); else null.
  const std::shared_ptr<const CacheDir> cache_;
  const std::vector<TensorLayout> tensors_;
  // The epochs' tables (its own lock).
  const std::unique_ptr<EpochTableCache> tables_;
  const Records records_{source_};
  // Asks Extend to stop (the destructor).
  std::atomic<bool> stopping_{false};
};

absl::StatusOr<uint64_t> WmtTrainWorkload::RowsInEpoch(
    const EpochOrder& order) const {
  const std::string key = EpochRowsKey(lengths_key_, order);
  index_->NoteSeed(order.seed);
  // All lengths first (from the cache when it holds them, else from the
  // length pass, which this starts if need be and waits for; the schedule
  // asks only once they are known: RowsUpTo).
  if (absl::Status s = index_->Wait(); !s.ok()) return s;
  if (cache_ != nullptr) {
    if (std::optional<uint64_t> rows = StoredEpochRows(*cache_, key)) {
      return *rows;
    }
  }
  absl::StatusOr<std::shared_ptr<const EpochTable>> table = TableFor(order);
  if (!table.ok()) return table.status();
  const uint64_t rows = (*table)->first_row.back();
  CountEpochCounted();
  if (cache_ != nullptr) StoreEpochRows(*cache_, key, rows);
  return rows;
}

// While the length pass runs, the epoch's first windows are learnt here,
// as far as `want_rows` asks: the lengths of their pairs, in the epoch's
// order, are tokenized on index_threads threads (those the pass has done
// already are not), and the windows cut from them as the complete table
// cuts them. Once the pass is done: RowsInEpoch.
absl::StatusOr<RowPacking::KnownRows> WmtTrainWorkload::RowsUpTo(
    const EpochOrder& order, uint64_t want_rows, const StopFlag* stop) const {
  if (absl::Status s = CheckOrder(order); !s.ok()) return s;
  index_->NoteSeed(order.seed);
  index_->Start();
  if (absl::Status s = index_->Error(); !s.ok()) return s;
  if (!index_->ready()) return Extend(order, want_rows, 0, stop);
  absl::StatusOr<uint64_t> rows = RowsInEpoch(order);
  if (!rows.ok()) return rows.status();
  return KnownRows{*rows, true};
}

// Tokenizes the next block of the epoch's positions (a window's worth,
// which makes at least a row) and adds their lengths to `b`.
absl::Status WmtTrainWorkload::Grow(const EpochOrder& order,
                                    EpochTableBuilder* b) const {
  const uint64_t n = order.num_examples;
  const uint64_t p0 = b->next_position(),
                 p1 = std::min(n, p0 + options_.max_length);
  std::vector<uint64_t> ids(p1 - p0);
  EpochIds(order, p0, p1 - p0, ids.data());
  for (uint64_t i = 0; i < ids.size(); ++i) {
    if (ids[i] >= source_.size()) {
      return absl::InternalError(absl::StrCat(
          "wmt: the epoch order gives id ", ids[i], " at position ", p0 + i));
    }
  }
  if (absl::Status s = index_->Learn(ids); !s.ok()) return s;
  for (uint64_t id : ids) b->Add(index_->LengthAt(id));
  if (b->next_position() == n) b->Finish();
  return absl::OkStatus();
}

// Learns the epoch's first windows until they hold want_rows rows and
// want_windows windows (or the epoch ends), and publishes the table so far
// (EpochTableCache::Find).
absl::StatusOr<RowPacking::KnownRows> WmtTrainWorkload::Extend(
    const EpochOrder& order, uint64_t want_rows, uint64_t want_windows,
    const StopFlag* stop) const {
  std::shared_ptr<GrowingTable> g =
      tables_->Growing(order, options_.max_length);
  absl::MutexLock lock(&g->mu);
  EpochTableBuilder& b = g->builder;
  const uint64_t before = b.closed_windows();
  while (!b.finished() &&
         (b.rows() < want_rows || b.closed_windows() < want_windows)) {
    if (stopping_.load() || (stop != nullptr && stop->load())) {
      return absl::CancelledError("wmt: the stream is closing");
    }
    HoldForTest(stop);
    if (absl::Status s = Grow(order, &b); !s.ok()) return s;
  }
  if (b.closed_windows() != before || b.finished() ||
      tables_->Find(order.seed, order.epoch) == nullptr) {
    tables_->Remember(b.Table());
  }
  return KnownRows{b.rows(), b.finished()};
}

// The epoch's table: the complete one once every length is known (built
// here if need be); before that, what Extend has learnt of it, which holds
// every row the schedule located.
absl::StatusOr<std::shared_ptr<const EpochTable>> WmtTrainWorkload::TableFor(
    const EpochOrder& order) const {
  if (absl::Status s = CheckOrder(order); !s.ok()) return s;
  std::shared_ptr<const EpochTable> cached =
      tables_->Find(order.seed, order.epoch);
  if (!index_->ready()) {
    if (cached != nullptr) return cached;
    // Not served by a schedule (a tool, a test): all lengths first.
    if (absl::Status s = index_->Wait(); !s.ok()) return s;
  }
  if (cached != nullptr && cached->complete) return cached;
  // Built outside the lock: two threads may both build one (same result).
  absl::StatusOr<std::shared_ptr<EpochTable>> built =
      BuildEpochTable(*index_, order, options_.max_length, reader_->executor(),
                      options_.index_threads);
  if (!built.ok()) return built.status();
  std::shared_ptr<const EpochTable> table = *std::move(built);
  tables_->Remember(table);
  return table;
}

// The kept pairs of window `w` as the table saw them, into plan's ids,
// positions and lengths. Drops are counted into `counters` (may be null),
// up to the next window's start.
absl::Status WmtTrainWorkload::WindowPairs(const EpochOrder& order,
                                           const EpochTable& table, uint64_t w,
                                           WorkloadCounters* counters,
                                           WindowPlan* plan) const {
  plan->ids.clear();
  plan->positions.clear();
  plan->lengths.clear();
  for (uint64_t p = table.window_start[w]; p < table.window_start[w + 1];
       ++p) {
    const uint64_t id = order.id_at(p);
    if (id >= source_.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "wmt: the epoch order gives id ", id, " at position ", p));
    }
    const PackedLengths l = index_->LengthAt(id);
    if (Dropped(l)) {
      CountDrop(l, counters);
      continue;
    }
    if (plan->ids.size() == options_.max_length) {
      if (counters != nullptr) continue;  // still counting the drops
      break;
    }
    plan->ids.push_back(id);
    plan->positions.push_back(p);
    plan->lengths.push_back(l);
  }
  plan->starts = PlanWindow(plan->lengths, options_.max_length);
  return absl::OkStatus();
}

// Plans window `w` of `table`: its kept pairs, rows and drops.
absl::Status WmtTrainWorkload::Plan(
    const EpochOrder& order, const std::shared_ptr<const EpochTable>& table,
    uint64_t w, WindowPlan* plan) const {
  plan->table.reset();
  WorkloadCounters drops;
  absl::Status listed = WindowPairs(order, *table, w, &drops, plan);
  if (!listed.ok()) return listed;
  plan->skipped = drops.skipped_examples.load();
  plan->damaged = drops.decode_errors.load();
  plan->window = w;
  plan->table = table;
  return absl::OkStatus();
}

absl::Status WmtTrainWorkload::FillRow(const EpochOrder& order, uint64_t row,
                                       uint8_t* const* out,
                                       WorkloadCounters* counters) const {
  FillContext ctx(ItemRef{0, order.epoch, row, row, true}, counters, source());
  return FillRowOf(order, row, out, ctx);
}

absl::Status WmtTrainWorkload::FillRowOf(const EpochOrder& order, uint64_t row,
                                         uint8_t* const* out,
                                         FillContext& ctx) const {
  WorkloadCounters* counters = ctx.counters();
  absl::StatusOr<std::shared_ptr<const EpochTable>> table_or = TableFor(order);
  if (!table_or.ok()) return table_or.status();
  const EpochTable& table = **table_or;
  if (row >= table.first_row.back()) return RowOutOfRange(order, row, table);
  const uint64_t w = table.WindowOfRow(row);
  const uint64_t r = row - table.first_row[w];

  // The window's kept pairs, as the table saw them, and its plan: the last
  // window this thread planned, if it is this one, else planned now.
  WindowPlan& plan = ThreadPlan();
  if (plan.table.get() != &table || plan.window != w) {
    if (absl::Status s = Plan(order, *table_or, w, &plan); !s.ok()) return s;
  }
  // Its first row counts its drops.
  if (r == 0 && counters != nullptr) {
    counters->skipped_examples.fetch_add(plan.skipped,
                                         std::memory_order_relaxed);
    counters->decode_errors.fetch_add(plan.damaged, std::memory_order_relaxed);
  }
  if (r >= plan.starts.size()) {
    return absl::InternalError("wmt: window plan disagrees with its table");
  }
  if (index_->tokens_ready() && FillFromStoredTokens(plan, r, out)) {
    return absl::OkStatus();
  }
  const size_t begin = plan.starts[r], end = plan.RowEnd(r);
  std::vector<TokenPair> pairs(end - begin);
  std::vector<const TokenPair*> members;
  for (size_t i = begin; i < end; ++i) {
    TokenPair& pair = pairs[i - begin];
    const ExampleKey key{order.epoch, plan.positions[i], plan.ids[i]};
    absl::StatusOr<PairFate> fate =
        reader_->LoadPair(plan.ids[i], &pair, &ctx, &key);
    if (!fate.ok()) return fate.status();
    const PackedLengths now = PackedLengthsOf(pair, options_.max_length);
    if (*fate != PairFate::kKept || now.inputs != plan.lengths[i].inputs ||
        now.targets != plan.lengths[i].targets) {
      return PairChanged(source_, plan.ids[i]);
    }
    members.push_back(&pair);
  }
  PackedRow packed;
  FillPackedRow(members, options_.max_length, &packed);
  WriteRow(packed, out);
  return absl::OkStatus();
}

// Row r of the plan from the stored token ids: no reading of the text, no
// tokenizing. The cache is an optimisation: a stored id that cannot be read
// (or is forged) sends the row to the text (false), never fails it.
bool WmtTrainWorkload::FillFromStoredTokens(const WindowPlan& plan, uint64_t r,
                                            uint8_t* const* out) const {
  const size_t begin = plan.starts[r], end = plan.RowEnd(r);
  std::vector<TokenPair> pairs(end - begin);
  std::vector<const TokenPair*> members;
  for (size_t i = begin; i < end; ++i) {
    TokenPair& pair = pairs[i - begin];
    if (!index_->StoredPair(plan.ids[i], plan.lengths[i], &pair).ok()) {
      return false;
    }
    members.push_back(&pair);
  }
  PackedRow packed;
  FillCutRow(members, options_.max_length, &packed);
  CountRowFromStoredTokens();
  WriteRow(packed, out);
  return true;
}

void WmtTrainWorkload::WriteRow(const PackedRow& packed,
                                uint8_t* const* out) const {
  reader_->WriteTokens(packed.inputs, out[0]);
  reader_->WriteTokens(packed.targets, out[1]);
  reader_->WriteTokens(packed.inputs_position, out[2]);
  reader_->WriteTokens(packed.inputs_segmentation, out[3]);
  reader_->WriteTokens(packed.targets_position, out[4]);
  reader_->WriteTokens(packed.targets_segmentation, out[5]);
}

bool WmtTrainWorkload::ExamplesOfRows(const EpochOrder& order,
                                      uint64_t first_row, uint64_t count,
                                      std::vector<ExampleKey>* keys) const {
  // Only what is at hand: the epoch's table once built (by the counting
  // thread, Extend, or a worker).
  if (order.num_examples != source_.size() || !order.id_at) return false;
  // Rows made from stored token ids read nothing from the source.
  if (index_->tokens_ready()) return true;
  const std::shared_ptr<const EpochTable> table =
      tables_->Find(order.seed, order.epoch);
  if (table == nullptr || first_row + count > table->first_row.back()) {
    return false;
  }
  std::vector<ExampleKey> found;
  WindowPlan& plan = ThreadPlan();
  for (uint64_t row = first_row; row < first_row + count; ++row) {
    const uint64_t w = table->WindowOfRow(row);
    if (plan.table != table || plan.window != w) {
      if (!Plan(order, table, w, &plan).ok()) return false;
    }
    const uint64_t r = row - table->first_row[w];
    if (r >= plan.starts.size()) return false;
    for (size_t i = plan.starts[r]; i < plan.RowEnd(r); ++i) {
      found.push_back({order.epoch, plan.positions[i], plan.ids[i]});
    }
  }
  keys->insert(keys->end(), found.begin(), found.end());
  return true;
}

absl::StatusOr<RowCursor> WmtTrainWorkload::CursorOfRow(const EpochOrder& order,
                                                        uint64_t row) const {
  absl::StatusOr<std::shared_ptr<const EpochTable>> table = TableFor(order);
  if (!table.ok()) return table.status();
  const EpochTable& t = **table;
  if (row >= t.first_row.back()) return RowOutOfRange(order, row, t);
  const uint64_t w = t.WindowOfRow(row);
  return RowCursor{order.epoch, w, row - t.first_row[w]};
}

absl::Status WmtTrainWorkload::CheckCursor(uint64_t num_examples,
                                           const RowCursor& cursor) const {
  // A window is max_length kept pairs (the last may hold fewer), and each
  // of its rows at least one of them.
  const uint64_t most_windows =
      (num_examples + options_.max_length - 1) / options_.max_length;
  if (cursor.window >= most_windows || cursor.row >= options_.max_length) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cursor (epoch ", cursor.epoch, ", window ", cursor.window, ", row ",
        cursor.row, ") lies beyond any epoch of ", num_examples,
        " pairs: an epoch has at most ", most_windows, " windows of at most ",
        options_.max_length, " rows"));
  }
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> WmtTrainWorkload::RowAtCursor(
    const EpochOrder& order, const RowCursor& cursor,
    const StopFlag* stop) const {
  if (absl::Status s = CheckOrder(order); !s.ok()) return s;
  if (absl::Status s = CheckCursor(order.num_examples, cursor); !s.ok()) {
    return s;
  }
  index_->NoteSeed(order.seed);
  index_->Start();
  if (!index_->ready()) {
    // Learn the epoch as far as the cursor's window (and one past it).
    absl::StatusOr<KnownRows> known = Extend(order, 0, cursor.window + 1, stop);
    if (!known.ok()) return known.status();
  }
  absl::StatusOr<std::shared_ptr<const EpochTable>> table = TableFor(order);
  if (!table.ok()) return table.status();
  const EpochTable& t = **table;
  if (cursor.epoch != order.epoch || cursor.window >= t.windows() ||
      cursor.row >=
          t.first_row[cursor.window + 1] - t.first_row[cursor.window]) {
    return absl::InvalidArgumentError(absl::StrCat(
        "wmt: cursor (epoch ", cursor.epoch, ", window ", cursor.window,
        ", row ", cursor.row, ") is not in epoch ", order.epoch));
  }
  return t.first_row[cursor.window] + cursor.row;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Workload>> CreateWmtTrainWorkload(
    std::shared_ptr<const PairReader> reader, const WorkloadConfig& config) {
  const std::string key = TrainLengthsKey(*reader, config.split);
  std::shared_ptr<const CacheDir> cache;
  if (config.cache != nullptr && config.cache->enabled()) cache = config.cache;
  absl::StatusOr<std::shared_ptr<LengthIndex>> index =
      UseIndex(*reader, config, key, cache);
  if (!index.ok()) return index.status();
  return std::unique_ptr<Workload>(
      new WmtTrainWorkload(std::move(reader), *std::move(index), key,
                           std::move(cache), config.work.cancel));
}

}  // namespace wmt
}  // namespace batchd

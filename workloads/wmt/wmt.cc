// The WMT workload; see wmt.h.
#include "workloads/wmt/wmt.h"

#include <limits.h>
#include <stdlib.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/executor.h"
#include "base/paths.h"
#include "workloads/common/cache_dir.h"
#include "workloads/packed_schedule.h"
#include "workloads/shared_work.h"
#include "workloads/wmt/epoch_tables.h"
#include "workloads/wmt/length_cache.h"
#include "workloads/wmt/length_index.h"
#include "workloads/wmt/packing.h"
#include "workloads/wmt/pair_source.h"
#include "workloads/wmt/tokenizer.h"

namespace batchd {
namespace wmt {
namespace {

constexpr size_t kEpochTables = 4;  // per-epoch tables kept (LRU)
// The largest index_threads asked (more means all the daemon's threads),
// and eval_train pairs (AlgoPerf's eval_train has 3072).
constexpr uint64_t kMaxIndexThreads = uint64_t(1) << 20;
constexpr uint64_t kMaxEvalTrainExamples = uint64_t(1) << 24;

struct Options {
  std::string vocab = "wmt_sentencepiece_model";
  std::string source = "auto";
  bool int64 = false;
  uint64_t max_length = 256;
  bool skip_empty = false;
  uint64_t index_threads = 0;  // 0: all of the executor's
  // eval_train: how many kept train pairs it serves (AlgoPerf's wmt
  // num_eval_train_examples: 3000 validation pairs rounded up to 128).
  uint64_t eval_train_examples = 3072;
  InvalidUtf8 invalid_utf8 = InvalidUtf8::kEncode;
};

absl::StatusOr<Options> ParseOptions(const WorkloadConfig& config) {
  absl::StatusOr<WorkloadOptions> opts = WorkloadOptions::Create(
      "wmt", config.options,
      {"vocab", "source", "dtype", "max_length", "skip_empty", "index_threads",
       "eval_train_examples", "invalid_utf8"});
  if (!opts.ok()) return opts.status();
  Options o;
  o.vocab = opts->String("vocab", o.vocab);
  o.source = opts->String("source", o.source);
  absl::StatusOr<std::string> dtype =
      opts->Choice("dtype", "int32", {"int32", "int64"});
  if (!dtype.ok()) return dtype.status();
  o.int64 = *dtype == "int64";
  absl::StatusOr<uint64_t> v = opts->Uint("max_length", 256, 1, kMaxLength);
  if (!v.ok()) return v.status();
  o.max_length = *v;
  v = opts->Uint("skip_empty", 0, 0, 1);
  if (!v.ok()) return v.status();
  o.skip_empty = *v == 1;
  // A bound on one stream's share of the daemon's threads, never a count
  // of threads to start: more than the executor has means all of them.
  v = opts->Uint("index_threads", 0, 0, kMaxIndexThreads);
  if (!v.ok()) return v.status();
  o.index_threads = *v == 0 ? kMaxIndexThreads : *v;
  v = opts->Uint("eval_train_examples", o.eval_train_examples, 1,
                 kMaxEvalTrainExamples);
  if (!v.ok()) return v.status();
  o.eval_train_examples = *v;
  absl::StatusOr<std::string> invalid_utf8 =
      opts->Choice("invalid_utf8", "encode", {"encode", "drop"});
  if (!invalid_utf8.ok()) return invalid_utf8.status();
  o.invalid_utf8 =
      *invalid_utf8 == "drop" ? InvalidUtf8::kDrop : InvalidUtf8::kEncode;
  return o;
}

// The model path: relative to the data directory and inside it, symlinks
// resolved, since the data directory is what the server confines.
absl::StatusOr<std::string> ModelPath(const std::string& data,
                                      const std::string& vocab) {
  if (vocab.empty() || vocab[0] == '/') {
    return absl::InvalidArgumentError(absl::StrCat(
        "wmt: vocab='", vocab, "' must be a path relative to the data path"));
  }
  for (absl::string_view part : absl::StrSplit(vocab, '/')) {
    if (part == "..") {
      return absl::InvalidArgumentError(
          absl::StrCat("wmt: vocab='", vocab, "' leaves the data path ('..')"));
    }
  }
  const std::string path = data + "/" + vocab;
  char resolved_data[PATH_MAX], resolved_model[PATH_MAX];
  if (realpath(data.c_str(), resolved_data) != nullptr &&
      realpath(path.c_str(), resolved_model) != nullptr) {
    const std::string d = resolved_data, m = resolved_model;
    if (m == d || !PathIsWithin(m, d)) {
      return absl::InvalidArgumentError(
          absl::StrCat("wmt: the SentencePiece model ", path, " resolves to ",
                       m, ", outside the data path ", d));
    }
  }
  return path;  // a missing file is reported by Tokenizer::Load
}

void WriteTokens(const std::vector<int32_t>& v, bool int64, uint8_t* out) {
  if (int64) {
    for (size_t i = 0; i < v.size(); ++i) {
      const int64_t x = v[i];
      memcpy(out + 8 * i, &x, 8);
    }
  } else {
    memcpy(out, v.data(), 4 * v.size());
  }
}

void WritePadded(const std::vector<int32_t>& tokens, size_t max_length,
                 bool int64, uint8_t* out) {
  std::vector<int32_t> row(max_length, 0);
  std::copy(tokens.begin(),
            tokens.begin() + std::min(tokens.size(), max_length), row.begin());
  WriteTokens(row, int64, out);
}

// The kept pairs of one window of a table and the window's rows (FillRow).
struct WindowPlan {
  std::shared_ptr<const EpochTable> table;  // null: none yet
  uint64_t window = 0;
  std::vector<uint64_t> ids, positions;
  std::vector<PackedLengths> lengths;
  std::vector<uint32_t> starts;  // PlanWindow(lengths)
  uint64_t skipped = 0, damaged = 0;  // drops in the window's range
};

// A pair of an eval split, with the drops just before it (to count).
struct EvalPair {
  uint64_t id;
  uint32_t skipped_before = 0;
  uint32_t errors_before = 0;
};

}  // namespace

class WmtWorkload : public Workload, public RowPacking {
 public:
  ~WmtWorkload() override {
    stopping_.store(true);
    if (index_ != nullptr) index_->Detach();
  }

  static absl::StatusOr<std::unique_ptr<Workload>> Create(
      const WorkloadConfig& config) {
    absl::StatusOr<Options> options = ParseOptions(config);
    if (!options.ok()) return options.status();
    const bool train = config.split == "train";
    const bool eval_train = config.split == "eval_train";
    if (!train && !eval_train && config.split != "validation" &&
        config.split != "test") {
      return absl::InvalidArgumentError(
          absl::StrCat("wmt: unknown split '", config.split,
                       "' (known: train, eval_train, validation, test)"));
    }
    absl::StatusOr<std::string> model_path =
        ModelPath(config.data_path, options->vocab);
    if (!model_path.ok()) return model_path.status();
    // Every file is opened through the server's data root: symlinks may
    // point anywhere inside it, never out (workloads/common/data_file.h).
    absl::StatusOr<std::shared_ptr<const DataRoot>> root = DataRoot::Open(
        config.data_root.empty() ? config.data_path : config.data_root);
    if (!root.ok()) return root.status();
    Executor* executor =
        config.executor != nullptr ? config.executor : Executor::Default();
    // Checked before SentencePiece sees it, loaded on the executor, shared
    // with the daemon's other streams of the same model and charged to the
    // budget of loaded models.
    absl::StatusOr<std::shared_ptr<const Tokenizer>> tokenizer =
        Tokenizer::LoadShared(*model_path, **root,
                              Tokenizer::LoadOptions{config.shared, executor});
    if (!tokenizer.ok()) {
      return absl::Status(tokenizer.status().code(),
                          absl::StrCat("wmt: ", tokenizer.status().message()));
    }
    PairSourceOptions source_options{*root, kDefaultMaxFileBytes, config.cache};
    source_options.executor = executor;
    absl::StatusOr<std::unique_ptr<PairSource>> source = OpenPairSource(
        config.data_path, eval_train ? "train" : config.split, options->source,
        source_options);
    if (!source.ok()) return source.status();
    if ((*source)->size() == 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("wmt: ", (*source)->Describe(), " holds no pairs"));
    }
    std::unique_ptr<WmtWorkload> w(
        new WmtWorkload(*options, train, *std::move(tokenizer),
                        std::shared_ptr<const PairSource>(*std::move(source)),
                        executor));
    if (train) {
      absl::Status s = w->UseIndex(config);
      if (!s.ok()) return s;
    } else {
      absl::Status s = w->IndexEvalPairs(
          eval_train ? options->eval_train_examples : UINT64_MAX);
      if (!s.ok()) return s;
    }
    return std::unique_ptr<Workload>(std::move(w));
  }

  // Train rows are packed (PackedSchedule); eval pairs are items of the
  // sampler's order, one a row.
  std::unique_ptr<Schedule> MakeSchedule(
      const Sampler& sampler) const override {
    if (!train_) return Workload::MakeSchedule(sampler);
    return std::make_unique<PackedSchedule>(*this, sampler, executor_);
  }
  uint64_t num_examples() const override {
    return train_ ? source_->size() : eval_pairs_.size();
  }
  bool shuffle() const override { return train_; }
  const std::vector<TensorLayout>& tensors() const override { return tensors_; }

  absl::StatusOr<uint64_t> RowsInEpoch(const EpochOrder& order) const override {
    const std::string key = EpochRowsKey(lengths_key_, order);
    if (train_) {
      index_->NoteSeed(order.seed);
      // All lengths first (from the cache when it holds them, else from the
      // length pass, which this starts if need be and waits for; the
      // schedule asks only once they are known: RowsUpTo).
      if (absl::Status s = index_->Wait(); !s.ok()) return s;
    }
    if (cache_ != nullptr && train_) {
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
  // order, are tokenized on index_threads threads (those the pass has
  // done already are not), and the windows cut from them as the complete
  // table cuts them. Once the pass is done: RowsInEpoch.
  absl::StatusOr<KnownRows> RowsUpTo(const EpochOrder& order,
                                     uint64_t want_rows) const override {
    if (absl::Status s = CheckOrder(order); !s.ok()) return s;
    index_->NoteSeed(order.seed);
    index_->Start();
    if (absl::Status s = index_->Error(); !s.ok()) return s;
    if (!index_->ready()) return Extend(order, want_rows, 0);
    absl::StatusOr<uint64_t> rows = RowsInEpoch(order);
    if (!rows.ok()) return rows.status();
    return KnownRows{*rows, true};
  }

  absl::Status FillRow(const EpochOrder& order, uint64_t row,
                       uint8_t* const* out,
                       WorkloadCounters* counters) const override;
  absl::Status WriteRow(const PackedRow& packed, uint8_t* const* out) const;

  absl::Status FillItem(const ItemRef& item, uint8_t* const* out,
                        WorkloadCounters* counters) const override;

  // Read-ahead reads the stored record of a pair (TFDS sources; text lines
  // are not read ahead). The id is a pair of the source for train rows
  // (ExamplesOfRows) and an eval example (an index of eval_pairs_) for the
  // eval splits, as their schedules' keys say.
  ExampleReadFn example_reader() const override {
    if (!source_->has_records()) return nullptr;
    return [this](uint64_t id, std::string* bytes, int64_t* label) {
      *label = 0;
      if (!train_) {
        if (id >= eval_pairs_.size()) {
          return absl::OutOfRangeError(
              absl::StrCat("wmt: example ", id, " of ", eval_pairs_.size()));
        }
        id = eval_pairs_[id].id;
      }
      return source_->ReadRecord(id, bytes);
    };
  }
  void set_prefetch(ExamplePrefetch* prefetch) override {
    prefetch_ = prefetch;
  }
  std::string DescribeExample(uint64_t id) const override {
    if (!train_ && id < eval_pairs_.size()) id = eval_pairs_[id].id;
    return absl::StrCat("pair ", id, " of ", source_->Describe());
  }

  bool ExamplesOfRows(const EpochOrder& order, uint64_t first_row,
                      uint64_t count,
                      std::vector<ExampleKey>* keys) const override;

  absl::StatusOr<RowCursor> CursorOfRow(const EpochOrder& order,
                                        uint64_t row) const override {
    absl::StatusOr<std::shared_ptr<const EpochTable>> table = TableFor(order);
    if (!table.ok()) return table.status();
    const EpochTable& t = **table;
    if (row >= t.first_row.back()) {
      return absl::OutOfRangeError(absl::StrCat("wmt: row ", row, " of epoch ",
                                                order.epoch, " (which has ",
                                                t.first_row.back(), ")"));
    }
    const uint64_t w = t.WindowOfRow(row);
    return RowCursor{order.epoch, w, row - t.first_row[w]};
  }

  absl::StatusOr<uint64_t> RowAtCursor(const EpochOrder& order,
                                       const RowCursor& cursor) const override {
    if (!train_) {
      return absl::InvalidArgumentError("wmt: only train rows have cursors");
    }
    if (absl::Status s = CheckOrder(order); !s.ok()) return s;
    index_->NoteSeed(order.seed);
    index_->Start();
    if (!index_->ready()) {
      // Learn the epoch as far as the cursor's window (and one past it).
      absl::StatusOr<KnownRows> known =
          Extend(order, 0, cursor.window + 1);
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

 private:
  WmtWorkload(const Options& options, bool train,
              std::shared_ptr<const Tokenizer> tokenizer,
              std::shared_ptr<const PairSource> source, Executor* executor)
      : options_(options),
        train_(train),
        tokenizer_(std::move(tokenizer)),
        source_(std::move(source)),
        executor_(executor) {
    const DType t =
        options_.int64 ? DType::kInt64 : DType::kInt32;
    const std::vector<int64_t> shape = {int64_t(options_.max_length)};
    if (train_) {
      for (const char* name :
           {"inputs", "targets", "inputs_position", "inputs_segmentation",
            "targets_position", "targets_segmentation"}) {
        tensors_.push_back({name, t, shape});
      }
    } else {
      tensors_ = {{"inputs", t, shape},
                  {"targets", t, shape},
                  {"weights", DType::kFloat32, shape}};
    }
  }

  // The train split's length index: the one the daemon's other streams of
  // the same data use (joining its pass), else a new one.
  absl::Status UseIndex(const WorkloadConfig& config) {
    LengthsKeyParts key;
    // The lengths depend on the model's bytes, not its path.
    key.model_bytes = tokenizer_->model_bytes();
    key.source_identity = source_->Identity();
    key.max_length = options_.max_length;
    key.skip_empty = options_.skip_empty;
    key.invalid_utf8 =
        options_.invalid_utf8 == InvalidUtf8::kDrop ? "drop" : "encode";
    key.source_kind = options_.source;
    key.split = config.split;
    lengths_key_ = LengthsKey(key);
    if (config.cache != nullptr && config.cache->enabled()) {
      cache_ = config.cache;
    }
    LengthIndex::Options o;
    o.max_length = options_.max_length;
    o.skip_empty = options_.skip_empty;
    o.invalid_utf8 = options_.invalid_utf8;
    o.index_threads = options_.index_threads;
    if (const char* delay = getenv("BATCHD_TEST_WMT_INDEX_DELAY_US")) {
      uint64_t us = 0;
      if (absl::SimpleAtoi(delay, &us)) o.delay_us = us;
    }
    auto make = [&]() -> absl::StatusOr<std::shared_ptr<LengthIndex>> {
      // A daemon's pass with a cache runs to its end: its result is kept.
      return LengthIndex::Create(source_, tokenizer_, o, lengths_key_, cache_,
                                 executor_,
                                 /*outlive_users=*/config.shared != nullptr);
    };
    if (config.shared != nullptr) {
      absl::StatusOr<std::shared_ptr<LengthIndex>> found =
          config.shared->Find<LengthIndex>("wmt-length-index", lengths_key_,
                                           make);
      if (!found.ok()) return found.status();
      index_ = *std::move(found);
      if (index_->Attach()) return absl::OkStatus();
    }
    index_ = *make();  // not shared, or the one found is stopping
    index_->Attach();
    return absl::OkStatus();
  }

  // Reads and tokenizes pair `id`. Damaged records are a fate, not an
  // error; I/O failures are errors. With `key` (the pair's read-ahead key)
  // and a prefetch, the record's bytes come through the prefetch, whose
  // errors are those of the source's own read.
  absl::StatusOr<PairFate> LoadPair(uint64_t id, TokenPair* pair,
                                    const ExampleKey* key = nullptr) const {
    std::string de, en;
    absl::Status s;
    if (key != nullptr && prefetch_ != nullptr && source_->has_records()) {
      std::string bytes;
      int64_t label = 0;
      s = prefetch_->Read(key->epoch, key->position, key->id, &bytes, &label);
      if (s.ok()) s = source_->ParseRecord(id, bytes, &de, &en);
    } else {
      s = source_->Read(id, &de, &en);
    }
    if (s.code() == absl::StatusCode::kDataLoss ||
        s.code() == absl::StatusCode::kInvalidArgument) {
      return PairFate::kDamaged;
    }
    if (!s.ok()) return s;
    return tokenizer_->TokenizePair(de, en, options_.max_length,
                                    options_.skip_empty, pair,
                                    options_.invalid_utf8);
  }

 public:
  std::optional<IndexProgress> progress() const override {
    return index_ != nullptr ? index_->progress() : std::nullopt;
  }
  uint64_t resident_bytes() const override {
    return tokenizer_->resident_bytes();
  }

 private:
  static void CountDrop(const PackedLengths& l, WorkloadCounters* counters) {
    if (counters == nullptr) return;
    if (l.inputs == kDroppedDamaged) {
      counters->decode_errors.fetch_add(1, std::memory_order_relaxed);
    } else {
      counters->skipped_examples.fetch_add(1, std::memory_order_relaxed);
    }
  }

  PackedLengths LengthAt(uint64_t id) const { return index_->LengthAt(id); }

  static absl::Status Stopping() {
    return absl::CancelledError("wmt: the workload is closing");
  }

  // Up to index_threads of the executor's serving threads.
  uint64_t Threads(uint64_t n) const {
    return std::max<uint64_t>(1,
                              std::min<uint64_t>(options_.index_threads,
                                                 n / 64 + 1));
  }

  absl::Status CheckOrder(const EpochOrder& order) const {
    if (!train_) {
      return absl::FailedPreconditionError(
          "wmt: eval splits are not packed into rows");
    }
    if (order.num_examples != source_->size() || !order.id_at) {
      return absl::InvalidArgumentError(
          absl::StrCat("wmt: the epoch order covers ", order.num_examples,
                       " examples, the data has ", source_->size()));
    }
    return absl::OkStatus();
  }

  // An epoch's table as it grows while the length pass runs.
  struct GrowingTable {
    GrowingTable(const EpochOrder& order, uint64_t max_length)
        : order(order), builder(order, max_length) {}
    std::mutex mu;  // held while it grows
    const EpochOrder order;
    EpochTableBuilder builder;  // guarded by mu
  };

  // Learns the epoch's first windows until they hold want_rows rows and
  // want_windows windows (or the epoch ends), tokenizing their pairs in
  // blocks of positions, and publishes the table so far (CachedTableFor).
  absl::StatusOr<KnownRows> Extend(const EpochOrder& order, uint64_t want_rows,
                                   uint64_t want_windows) const {
    std::shared_ptr<GrowingTable> g;
    {
      std::lock_guard<std::mutex> lock(tables_mu_);
      for (const std::shared_ptr<GrowingTable>& x : growing_) {
        if (x->order.seed == order.seed && x->order.epoch == order.epoch) g = x;
      }
      if (g == nullptr) {
        if (growing_.size() >= kEpochTables) growing_.erase(growing_.begin());
        g = std::make_shared<GrowingTable>(order, options_.max_length);
        growing_.push_back(g);
      }
    }
    // Positions tokenized at once: a window's worth, which makes at least
    // a row.
    const uint64_t block = options_.max_length;
    const uint64_t n = order.num_examples;
    std::lock_guard<std::mutex> lock(g->mu);
    EpochTableBuilder& b = g->builder;
    const uint64_t before = b.closed_windows();
    std::vector<uint64_t> ids;
    while (!b.finished() &&
           (b.rows() < want_rows || b.closed_windows() < want_windows)) {
      if (stopping_.load()) return Stopping();
      const uint64_t p0 = b.next_position(), p1 = std::min(n, p0 + block);
      ids.resize(p1 - p0);
      EpochIds(order, p0, p1 - p0, ids.data());
      for (uint64_t i = 0; i < ids.size(); ++i) {
        if (ids[i] >= source_->size()) {
          return absl::InternalError(absl::StrCat(
              "wmt: the epoch order gives id ", ids[i], " at position ",
              p0 + i));
        }
      }
      absl::Status s = index_->Learn(ids);
      if (!s.ok()) return s;
      for (uint64_t id : ids) b.Add(LengthAt(id));
      if (b.next_position() == n) b.Finish();
    }
    if (b.closed_windows() != before || b.finished() ||
        CachedTableFor(order) == nullptr) {
      std::shared_ptr<EpochTable> table = b.Table();
      std::lock_guard<std::mutex> tables_lock(tables_mu_);
      Remember(std::move(table));
    }
    return KnownRows{b.rows(), b.finished()};
  }

  // Keeps `table` (replacing the epoch's earlier one), dropping the least
  // recently used beyond kEpochTables. Requires tables_mu_.
  void Remember(std::shared_ptr<const EpochTable> table) const {
    for (CachedTable& c : tables_) {
      if (c.table->seed == table->seed && c.table->epoch == table->epoch) {
        c = {std::move(table), ++use_clock_};
        return;
      }
    }
    if (tables_.size() >= kEpochTables) {
      tables_.erase(
          std::min_element(tables_.begin(), tables_.end(),
                           [](const CachedTable& a, const CachedTable& b) {
                             return a.last_use < b.last_use;
                           }));
    }
    tables_.push_back({std::move(table), ++use_clock_});
  }

  // The epoch's table: the complete one once every length is known (built
  // here if need be); before that, what Extend has learnt of it, which
  // holds every row the schedule located.
  absl::StatusOr<std::shared_ptr<const EpochTable>> TableFor(
      const EpochOrder& order) const {
    if (absl::Status s = CheckOrder(order); !s.ok()) return s;
    std::shared_ptr<const EpochTable> cached = CachedTableFor(order);
    if (!index_->ready()) {
      if (cached != nullptr) return cached;
      // Not served by a schedule (a tool, a test): all lengths first.
      if (absl::Status s = index_->Wait(); !s.ok()) return s;
    }
    if (cached != nullptr && cached->complete) return cached;
    // Built outside the lock: two threads may both build one (same result).
    absl::StatusOr<std::shared_ptr<EpochTable>> built = BuildEpochTable(
        *index_, order, options_.max_length, executor_, options_.index_threads);
    if (!built.ok()) return built.status();
    std::shared_ptr<const EpochTable> table = *std::move(built);
    std::lock_guard<std::mutex> lock(tables_mu_);
    Remember(table);
    return table;
  }

  // The epoch's table if it is built already (never builds one), else null.
  std::shared_ptr<const EpochTable> CachedTableFor(
      const EpochOrder& order) const {
    std::lock_guard<std::mutex> lock(tables_mu_);
    for (CachedTable& c : tables_) {
      if (c.table->seed == order.seed && c.table->epoch == order.epoch) {
        c.last_use = ++use_clock_;
        return c.table;
      }
    }
    return nullptr;
  }

  // The kept pairs of window `w` as the table saw them: their ids,
  // positions in the epoch's order and lengths. Drops are counted into
  // `counters` (may be null), up to the next window's start.
  absl::Status WindowPairs(const EpochOrder& order, const EpochTable& table,
                           uint64_t w, WorkloadCounters* counters,
                           std::vector<uint64_t>* ids,
                           std::vector<uint64_t>* positions,
                           std::vector<PackedLengths>* lengths) const {
    for (uint64_t p = table.window_start[w]; p < table.window_start[w + 1];
         ++p) {
      const uint64_t id = order.id_at(p);
      if (id >= source_->size()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "wmt: the epoch order gives id ", id, " at position ", p));
      }
      const PackedLengths l = LengthAt(id);
      if (Dropped(l)) {
        CountDrop(l, counters);
        continue;
      }
      if (ids->size() == options_.max_length) {
        if (counters != nullptr) continue;  // still counting the drops
        break;
      }
      ids->push_back(id);
      positions->push_back(p);
      lengths->push_back(l);
    }
    return absl::OkStatus();
  }

  // Tokenizes the pairs of an eval split once, in file order, to know
  // which are kept; stops after `limit` kept pairs (eval_train reads only
  // the head of train, in blocks, not all of it).
  absl::Status IndexEvalPairs(uint64_t limit) {
    const uint64_t n = source_->size();
    const uint64_t block =
        limit == UINT64_MAX ? n : std::max<uint64_t>(4096, limit + limit / 4);
    uint32_t skipped = 0, errors = 0;
    for (uint64_t lo = 0; lo < n && eval_pairs_.size() < limit; lo += block) {
      const uint64_t hi = std::min(n, lo + block);
      std::vector<PackedLengths> marks(hi - lo);
      absl::Status s = ParallelFor(
          executor_, Priority::kServing, marks.size(), Threads(marks.size()),
          [&](uint64_t i) {
            TokenPair pair;
            absl::StatusOr<PairFate> fate = LoadPair(lo + i, &pair);
            if (!fate.ok()) return fate.status();
            marks[i] =
                *fate == PairFate::kKept ? PackedLengths{} : DroppedMark(*fate);
            return absl::OkStatus();
          });
      if (!s.ok()) return s;
      for (uint64_t i = 0; i < marks.size() && eval_pairs_.size() < limit;
           ++i) {
        if (Dropped(marks[i])) {
          (marks[i].inputs == kDroppedDamaged ? errors : skipped) += 1;
          continue;
        }
        eval_pairs_.push_back({lo + i, skipped, errors});
        skipped = errors = 0;
      }
    }
    if (eval_pairs_.empty()) {
      return absl::FailedPreconditionError(
          absl::StrCat("wmt: no usable pair in ", source_->Describe(), " (", n,
                       " dropped)"));
    }
    eval_pairs_.back().skipped_before += skipped;  // drops after the last pair
    eval_pairs_.back().errors_before += errors;
    return absl::OkStatus();
  }

  struct CachedTable {
    std::shared_ptr<const EpochTable> table;
    uint64_t last_use;
  };

  // Constant after construction (eval_pairs_ after Create, the index and
  // its key after UseIndex).
  const Options options_;
  const bool train_;
  const std::shared_ptr<const Tokenizer> tokenizer_;
  const std::shared_ptr<const PairSource> source_;
  Executor* const executor_;  // borrowed; outlives the workload
  std::vector<TensorLayout> tensors_;
  std::vector<EvalPair> eval_pairs_;
  ExamplePrefetch* prefetch_ = nullptr;  // set before the first FillItem
  // The train split's lengths (and stored token ids), perhaps shared with
  // other streams; null for the eval splits.
  std::shared_ptr<LengthIndex> index_;
  std::string lengths_key_;
  // Where epoch row counts are kept (train split, cache on); else null.
  std::shared_ptr<const CacheDir> cache_;
  // Asks Extend to stop (the destructor).
  mutable std::atomic<bool> stopping_{false};

  mutable std::mutex tables_mu_;
  mutable std::vector<CachedTable> tables_;  // guarded by tables_mu_
  mutable uint64_t use_clock_ = 0;           // guarded by tables_mu_
  // Tables of epochs served while the pass runs; guarded by tables_mu_.
  mutable std::vector<std::shared_ptr<GrowingTable>> growing_;
};

absl::Status WmtWorkload::FillRow(const EpochOrder& order, uint64_t row,
                                  uint8_t* const* out,
                                  WorkloadCounters* counters) const {
  absl::StatusOr<std::shared_ptr<const EpochTable>> table_or = TableFor(order);
  if (!table_or.ok()) return table_or.status();
  const EpochTable& table = **table_or;
  if (row >= table.first_row.back()) {
    return absl::OutOfRangeError(absl::StrCat("wmt: row ", row, " of epoch ",
                                              order.epoch, " (which has ",
                                              table.first_row.back(), ")"));
  }
  const uint64_t w = table.WindowOfRow(row);
  const uint64_t r = row - table.first_row[w];

  // The window's kept pairs, as the table saw them, and its plan: the last
  // window this thread planned, if it is this one (a window's rows are
  // mostly filled one after another by one worker), else planned now. It
  // is kept with the table it came from, whose object it holds, so it is
  // never taken for a window of another table.
  thread_local WindowPlan plan;
  if (plan.table.get() != &table || plan.window != w) {
    plan.table.reset();
    plan.ids.clear();
    plan.positions.clear();
    plan.lengths.clear();
    WorkloadCounters drops;
    absl::Status listed = WindowPairs(order, table, w, &drops, &plan.ids,
                                      &plan.positions, &plan.lengths);
    if (!listed.ok()) return listed;
    plan.starts = PlanWindow(plan.lengths, options_.max_length);
    plan.skipped = drops.skipped_examples.load();
    plan.damaged = drops.decode_errors.load();
    plan.window = w;
    plan.table = *table_or;
  }
  // Its first row counts its drops.
  if (r == 0 && counters != nullptr) {
    counters->skipped_examples.fetch_add(plan.skipped,
                                         std::memory_order_relaxed);
    counters->decode_errors.fetch_add(plan.damaged, std::memory_order_relaxed);
  }
  const std::vector<uint64_t>& ids = plan.ids;
  const std::vector<uint64_t>& positions = plan.positions;
  const std::vector<PackedLengths>& lengths = plan.lengths;
  const std::vector<uint32_t>& starts = plan.starts;
  if (r >= starts.size()) {
    return absl::InternalError("wmt: window plan disagrees with its table");
  }
  const size_t end = r + 1 < starts.size() ? starts[r + 1] : ids.size();

  std::vector<TokenPair> pairs(end - starts[r]);
  std::vector<const TokenPair*> members;
  PackedRow packed;
  if (index_->tokens_ready()) {
    // From the stored token ids: no reading of the text, no tokenizing.
    // The cache is an optimisation: a stored id that cannot be read (or is
    // forged) sends the row to the text, never fails it.
    bool stored = true;
    for (size_t i = starts[r]; i < end && stored; ++i) {
      TokenPair& pair = pairs[i - starts[r]];
      stored = index_->StoredPair(ids[i], lengths[i], &pair).ok();
      members.push_back(&pair);
    }
    if (stored) {
      FillCutRow(members, options_.max_length, &packed);
      CountRowFromStoredTokens();
      return WriteRow(packed, out);
    }
    members.clear();
  }
  for (size_t i = starts[r]; i < end; ++i) {
    TokenPair& pair = pairs[i - starts[r]];
    const ExampleKey key{order.epoch, positions[i], ids[i]};
    absl::StatusOr<PairFate> fate = LoadPair(ids[i], &pair, &key);
    if (!fate.ok()) return fate.status();
    const PackedLengths now = PackedLengthsOf(pair, options_.max_length);
    if (*fate != PairFate::kKept || now.inputs != lengths[i].inputs ||
        now.targets != lengths[i].targets) {
      return absl::DataLossError(absl::StrCat("wmt: pair ", ids[i], " of ",
                                              source_->Describe(),
                                              " changed since it was indexed"));
    }
    members.push_back(&pair);
  }
  FillPackedRow(members, options_.max_length, &packed);
  return WriteRow(packed, out);
}

absl::Status WmtWorkload::WriteRow(const PackedRow& packed,
                                   uint8_t* const* out) const {
  WriteTokens(packed.inputs, options_.int64, out[0]);
  WriteTokens(packed.targets, options_.int64, out[1]);
  WriteTokens(packed.inputs_position, options_.int64, out[2]);
  WriteTokens(packed.inputs_segmentation, options_.int64, out[3]);
  WriteTokens(packed.targets_position, options_.int64, out[4]);
  WriteTokens(packed.targets_segmentation, options_.int64, out[5]);
  return absl::OkStatus();
}

bool WmtWorkload::ExamplesOfRows(const EpochOrder& order, uint64_t first_row,
                                 uint64_t count,
                                 std::vector<ExampleKey>* keys) const {
  // Only what is at hand: the epoch's table once built (by the counting
  // thread, Extend, or a worker).
  if (!train_ || order.num_examples != source_->size() || !order.id_at) {
    return false;
  }
  // Rows made from stored token ids read nothing from the source.
  if (index_->tokens_ready()) return true;
  const std::shared_ptr<const EpochTable> table = CachedTableFor(order);
  if (table == nullptr || first_row + count > table->first_row.back()) {
    return false;
  }
  std::vector<ExampleKey> found;
  uint64_t window = UINT64_MAX;
  std::vector<uint64_t> ids, positions;
  std::vector<PackedLengths> lengths;
  std::vector<uint32_t> starts;
  for (uint64_t row = first_row; row < first_row + count; ++row) {
    const uint64_t w = table->WindowOfRow(row);
    if (w != window) {
      window = w;
      ids.clear();
      positions.clear();
      lengths.clear();
      if (!WindowPairs(order, *table, w, nullptr, &ids, &positions, &lengths)
               .ok()) {
        return false;
      }
      starts = PlanWindow(lengths, options_.max_length);
    }
    const uint64_t r = row - table->first_row[w];
    if (r >= starts.size()) return false;
    const size_t end = r + 1 < starts.size() ? starts[r + 1] : ids.size();
    for (size_t i = starts[r]; i < end; ++i) {
      found.push_back({order.epoch, positions[i], ids[i]});
    }
  }
  keys->insert(keys->end(), found.begin(), found.end());
  return true;
}

absl::Status WmtWorkload::FillItem(const ItemRef& ex, uint8_t* const* out,
                                   WorkloadCounters* counters) const {
  if (train_) {
    // The item is row ex.position of the shuffled epoch (PackedSchedule).
    return FillRow(ShuffledOrder(source_->size(), ex.seed, ex.epoch),
                   ex.position, out, counters);
  }
  const size_t n = options_.max_length;
  std::vector<float> weights(n, 0.0f);
  if (!ex.valid) {
    for (int k = 0; k < 2; ++k) memset(out[k], 0, n * (options_.int64 ? 8 : 4));
    memcpy(out[2], weights.data(), 4 * n);
    return absl::OkStatus();
  }
  if (ex.id >= eval_pairs_.size()) {
    return absl::OutOfRangeError(
        absl::StrCat("wmt: example ", ex.id, " of ", eval_pairs_.size()));
  }
  const EvalPair& e = eval_pairs_[ex.id];
  TokenPair pair;
  const ExampleKey key{ex.epoch, ex.position, ex.id};
  absl::StatusOr<PairFate> fate = LoadPair(e.id, &pair, &key);
  if (!fate.ok()) return fate.status();
  if (*fate != PairFate::kKept) {
    return absl::DataLossError(absl::StrCat("wmt: pair ", e.id, " of ",
                                            source_->Describe(),
                                            " changed since it was indexed"));
  }
  if (counters != nullptr) {
    counters->skipped_examples.fetch_add(e.skipped_before,
                                         std::memory_order_relaxed);
    counters->decode_errors.fetch_add(e.errors_before,
                                      std::memory_order_relaxed);
  }
  WritePadded(pair.inputs, n, options_.int64, out[0]);
  WritePadded(pair.targets, n, options_.int64, out[1]);
  for (size_t i = 0; i < pair.targets.size() && i < n; ++i) {
    weights[i] = pair.targets[i] > 0 ? 1.0f : 0.0f;
  }
  memcpy(out[2], weights.data(), 4 * n);
  return absl::OkStatus();
}

}  // namespace wmt

absl::StatusOr<std::unique_ptr<Workload>> CreateWmtWorkload(
    const WorkloadConfig& config) {
  return wmt::WmtWorkload::Create(config);
}

}  // namespace batchd

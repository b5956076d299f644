// The WMT workload; see wmt.h.
#include "base/paths.h"
#include "workloads/wmt/wmt.h"

#include <limits.h>
#include <stdlib.h>

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "workloads/common/cache_dir.h"
#include "workloads/packed_schedule.h"
#include "workloads/wmt/length_cache.h"
#include "workloads/wmt/packing.h"
#include "workloads/wmt/pair_source.h"
#include "workloads/wmt/tokenizer.h"

namespace batchd {
namespace wmt {
namespace {

// Packed lengths of every pair; these values in `inputs` mark a dropped
// pair (a kept one is at most max_length <= kMaxLength).
constexpr uint16_t kDroppedTooLong = 0xffff;
constexpr uint16_t kDroppedEmpty = 0xfffe;
constexpr uint16_t kDroppedDamaged = 0xfffd;
constexpr uint64_t kMaxLength = 4096;
constexpr size_t kEpochTables = 4;  // per-epoch tables kept (LRU)
// Pairs per entry of the index of where stored token ids start.
constexpr uint64_t kTokenStride = 8;

static_assert(kDroppedDamaged > kLengthUnknown && kMaxLength < kFirstMark,
              "the drop marks are marks of a persisted table "
              "(length_cache.h)");

bool Dropped(const PackedLengths& l) { return l.inputs > kMaxLength; }

struct Options {
  std::string vocab = "wmt_sentencepiece_model";
  std::string source = "auto";
  bool int64 = false;
  uint64_t max_length = 256;
  bool skip_empty = false;
  uint64_t index_threads = 0;
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
  v = opts->Uint("index_threads", 0);
  if (!v.ok()) return v.status();
  o.index_threads = *v;
  if (o.index_threads == 0) {
    o.index_threads = std::max(1u, std::thread::hardware_concurrency());
  }
  v = opts->Uint("eval_train_examples", o.eval_train_examples);
  if (!v.ok() || *v == 0) {
    return opts->Invalid("eval_train_examples", "is not a positive integer");
  }
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

// Runs fn(i) for i in [0, n) on `threads` threads; the first error stops
// the others and is returned. A thread takes up to `max_chunk` items at a
// time: 1 where an item is long work, so that the threads end together.
absl::Status ParallelFor(uint64_t n, uint64_t threads,
                         const std::function<absl::Status(uint64_t)>& fn,
                         uint64_t max_chunk = 256) {
  threads = std::max<uint64_t>(1, std::min<uint64_t>(threads, n / 64 + 1));
  std::atomic<uint64_t> next{0};
  std::atomic<bool> failed{false};
  std::mutex mu;
  absl::Status first_error;
  // Chunks small enough for every thread to get some.
  const uint64_t chunk =
      std::max<uint64_t>(1, std::min<uint64_t>(max_chunk, n / (4 * threads)));
  auto work = [&] {
    while (!failed.load(std::memory_order_relaxed)) {
      const uint64_t begin = next.fetch_add(chunk);
      if (begin >= n) return;
      for (uint64_t i = begin; i < std::min(n, begin + chunk); ++i) {
        absl::Status s = fn(i);
        if (!s.ok()) {
          std::lock_guard<std::mutex> lock(mu);
          if (first_error.ok()) first_error = s;
          failed = true;
          return;
        }
      }
    }
  };
  std::vector<std::thread> pool;
  for (uint64_t t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
  return first_error;
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

// Where each window of one epoch starts, and its first row. A table that is
// not `complete` holds the epoch's first windows only (those whose pairs'
// lengths were known when it was made), exactly as the complete table
// holds them.
struct EpochTable {
  uint64_t seed = 0, epoch = 0, num_examples = 0;
  bool complete = true;
  // Position of the first pair each window considers (the one after the
  // previous window's last kept pair), then num_examples (complete) or the
  // position after the last window's last kept pair (not complete).
  std::vector<uint64_t> window_start;
  // First row of each window, then the rows of these windows.
  std::vector<uint64_t> first_row;
  uint64_t windows() const { return first_row.size() - 1; }
  // The window holding `row` (< first_row.back()).
  uint64_t WindowOfRow(uint64_t row) const {
    return uint64_t(std::upper_bound(first_row.begin(), first_row.end(), row) -
                    first_row.begin()) -
           1;
  }
};

// Makes an epoch's table from its pairs' lengths, in the epoch's order: a
// window is `window` consecutive kept pairs; its rows are PlanWindow's. The
// one place windows are cut, for complete tables and for the first windows
// of an epoch still being indexed alike.
class EpochTableBuilder {
 public:
  EpochTableBuilder(const EpochOrder& order, uint64_t max_length)
      : max_length_(max_length) {
    table_.seed = order.seed;
    table_.epoch = order.epoch;
    table_.num_examples = order.num_examples;
    in_window_.reserve(max_length);
  }
  // The next position's lengths (positions come in order, from 0).
  void Add(const PackedLengths& l) {
    const uint64_t p = next_position_++;
    if (Dropped(l)) return;
    if (in_window_.empty()) table_.window_start.push_back(next_start_);
    in_window_.push_back(l);
    if (in_window_.size() == max_length_) {
      CloseWindow();
      next_start_ = p + 1;
    }
  }
  // After the epoch's last position: the last window, even if short.
  void Finish() {
    if (!in_window_.empty()) CloseWindow();
    finished_ = true;
  }
  uint64_t next_position() const { return next_position_; }
  bool finished() const { return finished_; }
  uint64_t rows() const { return rows_; }
  uint64_t closed_windows() const { return table_.first_row.size(); }
  // The table so far: the closed windows (all of them once finished).
  std::shared_ptr<EpochTable> Table() const {
    auto t = std::make_shared<EpochTable>();
    t->seed = table_.seed;
    t->epoch = table_.epoch;
    t->num_examples = table_.num_examples;
    t->complete = finished_;
    t->first_row = table_.first_row;
    t->first_row.push_back(rows_);
    t->window_start.assign(table_.window_start.begin(),
                           table_.window_start.begin() + closed_windows());
    t->window_start.push_back(finished_ ? table_.num_examples : next_start_);
    return t;
  }

 private:
  void CloseWindow() {
    table_.first_row.push_back(rows_);
    rows_ += PlanWindow(in_window_, max_length_).size();
    in_window_.clear();
  }

  const uint64_t max_length_;
  EpochTable table_;  // window_start may hold the open window's start too
  std::vector<PackedLengths> in_window_;
  uint64_t next_position_ = 0, next_start_ = 0, rows_ = 0;
  bool finished_ = false;
};

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
    std::thread pass;
    {
      std::lock_guard<std::mutex> lock(lengths_mu_);
      pass = std::move(pass_thread_);
    }
    if (pass.joinable()) pass.join();
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
    absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer =
        Tokenizer::Load(*model_path, **root);
    if (!tokenizer.ok()) {
      return absl::Status(tokenizer.status().code(),
                          absl::StrCat("wmt: ", tokenizer.status().message()));
    }
    absl::StatusOr<std::unique_ptr<PairSource>> source = OpenPairSource(
        config.data_path, eval_train ? "train" : config.split, options->source,
        PairSourceOptions{*root, kDefaultMaxFileBytes, config.cache});
    if (!source.ok()) return source.status();
    if ((*source)->size() == 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("wmt: ", (*source)->Describe(), " holds no pairs"));
    }
    std::unique_ptr<WmtWorkload> w(new WmtWorkload(
        *options, train, std::move(*tokenizer), std::move(*source)));
    if (const char* delay = getenv("BATCHD_TEST_WMT_INDEX_DELAY_US")) {
      uint64_t us = 0;
      if (absl::SimpleAtoi(delay, &us)) w->index_delay_us_ = us;
    }
    if (train && config.cache != nullptr && config.cache->enabled()) {
      // The lengths depend on the model's bytes, not its path.
      LengthsKeyParts key;
      absl::Status read = ReadFileCapped(
          **root, *model_path, kDefaultMaxFileBytes, &key.model_bytes);
      if (!read.ok()) return read;
      key.source_identity = w->source_->Identity();
      key.max_length = options->max_length;
      key.skip_empty = options->skip_empty;
      key.invalid_utf8 =
          options->invalid_utf8 == InvalidUtf8::kDrop ? "drop" : "encode";
      key.source_kind = options->source;
      key.split = config.split;
      w->cache_ = config.cache;
      w->lengths_key_ = LengthsKey(key);
      w->token_width_ = w->tokenizer_->vocab_size() <= 65536 ? 2 : 4;
      w->tokens_key_ = absl::StrCat(w->lengths_key_, "\ntoken bytes ",
                                    w->token_width_);
    }
    if (!train) {
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
    return std::make_unique<PackedSchedule>(*this, sampler);
  }
  uint64_t num_examples() const override {
    return train_ ? source_->size() : eval_pairs_.size();
  }
  bool shuffle() const override { return train_; }
  const std::vector<TensorLayout>& tensors() const override { return tensors_; }

  absl::StatusOr<uint64_t> RowsInEpoch(const EpochOrder& order) const override {
    // An epoch's order is ShuffledOrder(N, seed, epoch); its first ids are
    // in the key too, so that an order made otherwise never meets the count
    // of another.
    std::string key = absl::StrCat(lengths_key_, "\nseed ", order.seed,
                                   " epoch ", order.epoch, " n ",
                                   order.num_examples, " ids");
    if (order.id_at) {
      for (uint64_t p = 0; p < std::min<uint64_t>(order.num_examples, 16);
           ++p) {
        absl::StrAppend(&key, " ", order.id_at(p));
      }
    }
    if (train_) {
      // All lengths first (from the cache when it holds them, else from the
      // length pass, which this starts if need be and waits for).
      if (absl::Status s = WaitLengths(); !s.ok()) return s;
    }
    if (cache_ != nullptr && train_) {
      absl::StatusOr<std::string> v = cache_->Get(kEpochRowsKind, key);
      if (v.ok() && v->size() == 8) {
        uint64_t rows = 0;
        for (int i = 7; i >= 0; --i) rows = rows << 8 | uint8_t((*v)[i]);
        return rows;
      }
    }
    absl::StatusOr<std::shared_ptr<const EpochTable>> table = TableFor(order);
    if (!table.ok()) return table.status();
    const uint64_t rows = (*table)->first_row.back();
    CountEpochCounted();
    if (cache_ != nullptr) {
      std::string value(8, '\0');
      for (int i = 0; i < 8; ++i) value[i] = char((rows >> (8 * i)) & 0xff);
      (void)cache_->Put(kEpochRowsKind, key, value);  // best effort
    }
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
    StartLengths();
    if (absl::Status s = PassError(); !s.ok()) return s;
    if (!lengths_ready_.load(std::memory_order_acquire)) {
      return Extend(order, want_rows, 0);
    }
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
    StartLengths();
    if (!lengths_ready_.load(std::memory_order_acquire)) {
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
              std::unique_ptr<Tokenizer> tokenizer,
              std::unique_ptr<PairSource> source)
      : options_(options),
        train_(train),
        tokenizer_(std::move(tokenizer)),
        source_(std::move(source)) {
    if (train_) {
      const uint64_t n = source_->size();
      lengths_.reset(new std::atomic<uint32_t>[n]);
      for (uint64_t id = 0; id < n; ++id) {
        StoreLength(id, {kLengthUnknown, kLengthUnknown});
      }
    }
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

  static int64_t SteadyNanos() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }

 public:
  std::optional<IndexProgress> progress() const override {
    if (!indexing_.load(std::memory_order_acquire)) return std::nullopt;
    IndexProgress p;
    p.what = tokens_only_.load(std::memory_order_relaxed) ? "wmt tokens"
                                                          : "wmt lengths";
    p.unit = "pairs";
    p.total = index_total_.load(std::memory_order_relaxed);
    p.done = std::min(index_done_.load(std::memory_order_relaxed), p.total);
    const double elapsed =
        double(SteadyNanos() - index_start_ns_.load(std::memory_order_relaxed)) /
        1e9;
    if (elapsed > 0 && p.done > 0) {
      p.rate = double(p.done) / elapsed;
      p.eta_seconds = double(p.total - p.done) / p.rate;
    }
    return p;
  }

 private:
  static PackedLengths DroppedMark(PairFate fate) {
    const uint16_t mark = fate == PairFate::kTooLong ? kDroppedTooLong
                          : fate == PairFate::kEmpty ? kDroppedEmpty
                                                     : kDroppedDamaged;
    return {mark, mark};
  }

  static void CountDrop(const PackedLengths& l, WorkloadCounters* counters) {
    if (counters == nullptr) return;
    if (l.inputs == kDroppedDamaged) {
      counters->decode_errors.fetch_add(1, std::memory_order_relaxed);
    } else {
      counters->skipped_examples.fetch_add(1, std::memory_order_relaxed);
    }
  }

  // Lengths are one atomic word per pair (inputs | targets << 16), each
  // written once, with its final value, by whichever of the length pass
  // and Extend tokenizes the pair first (they compute the same), so
  // readers need no lock; a reader reaches a pair only through a table
  // made after its length was known.
  PackedLengths LengthAt(uint64_t id) const {
    const uint32_t v = lengths_[id].load(std::memory_order_relaxed);
    return {uint16_t(v & 0xffff), uint16_t(v >> 16)};
  }
  static uint32_t Word(const PackedLengths& l) {
    return uint32_t(l.inputs) | uint32_t(l.targets) << 16;
  }
  void StoreLength(uint64_t id, const PackedLengths& l) const {
    lengths_[id].store(Word(l), std::memory_order_relaxed);
  }
  // Stores a length learnt by tokenizing; true if it was not known yet
  // (the pass and Extend may both tokenize a pair; one of them learns it).
  bool LearntLength(uint64_t id, const PackedLengths& l) const {
    uint32_t unknown = Word({kLengthUnknown, kLengthUnknown});
    return lengths_[id].compare_exchange_strong(unknown, Word(l),
                                                std::memory_order_relaxed);
  }
  bool Known(uint64_t id) const {
    return LengthAt(id).inputs != kLengthUnknown;
  }

  // Tokenizes pair `id` for its length and stores it, counting it into
  // *learnt (and LengthPassTokenizations) if it was not known yet.
  absl::Status LearnLength(uint64_t id, std::atomic<uint64_t>* learnt) const {
    if (index_delay_us_ > 0) {
      std::this_thread::sleep_for(std::chrono::microseconds(index_delay_us_));
    }
    TokenPair pair;
    absl::StatusOr<PairFate> fate = LoadPair(id, &pair);
    if (!fate.ok()) return fate.status();
    if (LearntLength(id, *fate == PairFate::kKept
                             ? PackedLengthsOf(pair, options_.max_length)
                             : DroppedMark(*fate))) {
      learnt->fetch_add(1, std::memory_order_relaxed);
      CountLengthPassTokenizations(1);
    }
    return absl::OkStatus();
  }

  // Takes the lengths the cache holds that are not known here yet; returns
  // how many pairs are still unknown.
  uint64_t LoadCachedLengths() const {
    const uint64_t n = source_->size();
    std::vector<PackedLengths> cached;
    absl::StatusOr<std::string> value = cache_->Get(kLengthsKind, lengths_key_);
    if (value.ok() &&
        DecodeLengths(*value, n, options_.max_length, &cached)) {
      for (uint64_t id = 0; id < n; ++id) {
        if (cached[id].inputs != kLengthUnknown && !Known(id)) {
          StoreLength(id, cached[id]);
        }
      }
    }
    uint64_t unknown = 0;
    for (uint64_t id = 0; id < n; ++id) unknown += !Known(id);
    return unknown;
  }

  // Starts learning every pair's length, once: from the cache when it holds
  // them all (then they are ready on return), else on the length pass's
  // thread (LengthPass).
  void StartLengths() const {
    std::lock_guard<std::mutex> lock(lengths_mu_);
    if (pass_started_) return;
    pass_started_ = true;
    lengths_start_ = std::chrono::steady_clock::now();
    if (cache_ != nullptr && LoadCachedLengths() == 0) {
      LogLengths(0, "cache");
      lengths_ready_.store(true, std::memory_order_release);
      if (OpenTokens()) return;
      tokens_only_.store(true);  // the pass stores the token ids alone
    }
    pass_thread_ = std::thread([this] { LengthPass(); });
  }

  // The length pass: every pair not known yet, in file order (sequential
  // reads), on index_threads threads at a lower CPU priority (nice +10), so
  // that serving the first windows (Extend, at normal priority) comes
  // first. With a cache, under the entry's build lock, so that streams and
  // daemons sharing the cache tokenize the data once: a second builder
  // waits for the lock (in steps, to stop when asked) and then loads what
  // the first stored. Stopped early, it stores what it has learnt (unknown
  // pairs marked), which the next start takes up.
  void LengthPass() const {
    setpriority(PRIO_PROCESS, pid_t(syscall(SYS_gettid)), 10);  // best effort
    if (cache_ == nullptr) {
      absl::Status s = PlainPass();
      if (s.ok()) LogLengths(pass_tokenized_.load(), "pass");
      return FinishLengths(s);
    }
    CacheDir::Lock build_lock;
    while (true) {
      absl::StatusOr<CacheDir::Lock> locked =
          cache_->TryLockEntry(kLengthsKind, lengths_key_);
      if (!locked.ok()) return FinishLengths(locked.status());
      if (locked->held()) {
        build_lock = std::move(*locked);
        break;
      }
      if (stopping_.load()) return FinishLengths(Stopping());
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    // Another builder may have stored them meanwhile.
    if (!lengths_ready_.load() && LoadCachedLengths() == 0) {
      LogLengths(0, "cache");
      FinishLengths(absl::OkStatus());
    }
    if (lengths_ready_.load() && OpenTokens()) return;
    absl::Status s = TokenPass();
    if (!s.ok() && lengths_ready_.load() && !stopping_.load()) {
      fprintf(stderr,
              "batchd: level=warn event=wmt_tokens_failed error=\"%s\" "
              "action=\"rows are tokenized as they are served\"\n",
              std::string(s.message()).c_str());
    }
    FinishLengths(s);  // an error only counts while lengths are missing
  }

  // Marks the lengths ready, or failed with `error`.
  void FinishLengths(const absl::Status& error) const {
    std::lock_guard<std::mutex> lock(lengths_mu_);
    if (error.ok()) {
      lengths_ready_.store(true, std::memory_order_release);
    } else if (!lengths_ready_.load()) {
      pass_error_ = error;
    }
    lengths_cv_.notify_all();
  }

  void StartProgress(uint64_t total) const {
    index_done_.store(0, std::memory_order_relaxed);
    index_total_.store(total, std::memory_order_relaxed);
    index_start_ns_.store(SteadyNanos(), std::memory_order_relaxed);
    indexing_.store(true, std::memory_order_release);
  }

  // The length pass without a cache: every pair not known yet.
  absl::Status PlainPass() const {
    StartProgress(source_->size());
    absl::Status s =
        ParallelFor(source_->size(), options_.index_threads, [&](uint64_t id) {
          if (stopping_.load(std::memory_order_relaxed)) return Stopping();
          index_done_.fetch_add(1, std::memory_order_relaxed);
          if (Known(id)) return absl::OkStatus();
          return LearnLength(id, &pass_tokenized_);
        });
    indexing_.store(false, std::memory_order_release);
    return s;
  }

  // The pass with a cache: every pair is tokenized, in file order and in
  // blocks, for the lengths not known yet (stored, and marked ready, at the
  // end) and for the token ids of every kept pair, streamed in order into
  // the "wmt-tokens" blob (its first max-length-cut tokens of each side,
  // as packing takes them), which later rows are read from (OpenTokens).
  // Stopped early, it stores the lengths it learnt.
  absl::Status TokenPass() const {
    const uint64_t n = source_->size();
    const bool had_lengths = lengths_ready_.load();
    tokens_only_.store(had_lengths);
    absl::StatusOr<std::unique_ptr<CacheDir::BlobWriter>> writer =
        cache_->BeginBlob(kTokensKind, tokens_key_);
    if (!writer.ok()) {
      fprintf(stderr, "batchd: level=warn event=cache_put_failed kind=%s "
              "error=\"%s\"\n", kTokensKind,
              std::string(writer.status().message()).c_str());
    }
    constexpr uint64_t kBlock = 16384;
    std::vector<TokenPair> pairs(kBlock);
    std::vector<uint8_t> kept(kBlock);
    std::string bytes;
    StartProgress(n);
    absl::Status s;
    for (uint64_t lo = 0; lo < n && s.ok(); lo += kBlock) {
      const uint64_t hi = std::min(n, lo + kBlock);
      s = ParallelFor(hi - lo, options_.index_threads, [&](uint64_t i) {
        if (stopping_.load(std::memory_order_relaxed)) return Stopping();
        index_done_.fetch_add(1, std::memory_order_relaxed);
        const uint64_t id = lo + i;
        if (index_delay_us_ > 0) {
          std::this_thread::sleep_for(
              std::chrono::microseconds(index_delay_us_));
        }
        TokenPair& pair = pairs[i];
        absl::StatusOr<PairFate> fate = LoadPair(id, &pair);
        if (!fate.ok()) return fate.status();
        kept[i] = *fate == PairFate::kKept;
        const PackedLengths l = kept[i]
                                    ? PackedLengthsOf(pair, options_.max_length)
                                    : DroppedMark(*fate);
        if (LearntLength(id, l)) {
          pass_tokenized_.fetch_add(1, std::memory_order_relaxed);
          CountLengthPassTokenizations(1);
        } else if (Word(LengthAt(id)) != Word(l)) {
          return absl::DataLossError(
              absl::StrCat("wmt: pair ", id, " of ", source_->Describe(),
                           " changed since it was indexed"));
        }
        return absl::OkStatus();
      });
      if (!s.ok() || *writer == nullptr) continue;
      bytes.clear();
      for (uint64_t i = 0; i < hi - lo; ++i) {
        if (!kept[i]) continue;
        const PackedLengths l = LengthAt(lo + i);
        AppendTokens(pairs[i].inputs, l.inputs, &bytes);
        AppendTokens(pairs[i].targets, l.targets, &bytes);
      }
      absl::Status put = (*writer)->Append(bytes.data(), bytes.size());
      if (!put.ok()) {
        fprintf(stderr, "batchd: level=warn event=cache_put_failed kind=%s "
                "error=\"%s\"\n", kTokensKind,
                std::string(put.message()).c_str());
        writer->reset();  // the lengths go on
      }
    }
    indexing_.store(false, std::memory_order_release);
    if (!had_lengths && (s.ok() || stopping_.load())) {
      std::vector<PackedLengths> table(n);
      for (uint64_t id = 0; id < n; ++id) table[id] = LengthAt(id);
      absl::Status put =
          cache_->Put(kLengthsKind, lengths_key_, EncodeLengths(table));
      if (!put.ok()) {
        fprintf(stderr,
                "batchd: level=warn event=cache_put_failed kind=%s "
                "error=\"%s\"\n",
                kLengthsKind, std::string(put.message()).c_str());
      }
    }
    if (!s.ok()) return s;
    if (!had_lengths) {
      LogLengths(pass_tokenized_.load(), "pass,cached");
      FinishLengths(absl::OkStatus());
    }
    if (*writer != nullptr) {
      absl::Status committed = (*writer)->Commit();
      if (!committed.ok()) return committed;
      if (!OpenTokens()) {
        return absl::DataLossError("wmt: the stored token ids do not open");
      }
    }
    return absl::OkStatus();
  }

  // Appends the first `count` of `tokens` in token_width_ bytes each
  // (little endian).
  void AppendTokens(const std::vector<int32_t>& tokens, uint16_t count,
                    std::string* out) const {
    for (uint16_t i = 0; i < count; ++i) {
      const uint32_t t = uint32_t(tokens[i]);
      for (uint32_t b = 0; b < token_width_; ++b) {
        out->push_back(char((t >> (8 * b)) & 0xff));
      }
    }
  }

  // Serves rows from the stored token ids if the cache holds them for every
  // kept pair (lengths known): indexes where each pair's ids start.
  bool OpenTokens() const {
    if (cache_ == nullptr || !lengths_ready_.load()) return false;
    if (tokens_ready_.load(std::memory_order_acquire)) return true;
    const auto start = std::chrono::steady_clock::now();
    absl::StatusOr<std::shared_ptr<const CacheDir::Blob>> blob =
        cache_->OpenBlob(kTokensKind, tokens_key_);
    if (!blob.ok()) return false;
    const uint64_t n = source_->size();
    std::vector<uint64_t> starts;
    starts.reserve(n / kTokenStride + 2);
    uint64_t at = 0;
    for (uint64_t id = 0; id < n; ++id) {
      if (id % kTokenStride == 0) starts.push_back(at);
      const PackedLengths l = LengthAt(id);
      if (!Dropped(l)) at += uint64_t(l.inputs) + l.targets;
    }
    if (at * token_width_ != (*blob)->size()) {
      fprintf(stderr,
              "batchd: level=warn event=cache_corrupt kind=%s reason=\"%llu "
              "bytes, the lengths say %llu\" action=\"tokenize rows\"\n",
              kTokensKind, (unsigned long long)(*blob)->size(),
              (unsigned long long)(at * token_width_));
      return false;
    }
    token_starts_ = std::move(starts);
    tokens_ = *blob;
    tokens_ready_.store(true, std::memory_order_release);
    fprintf(stderr,
            "batchd: level=info event=wmt_tokens pairs=%llu bytes=%llu "
            "seconds=%.3f\n",
            (unsigned long long)n, (unsigned long long)(*blob)->size(),
            std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                          start)
                .count());
    return true;
  }

  // Pair `id`'s token ids, as packing takes them, from the stored ones.
  absl::Status StoredPair(uint64_t id, const PackedLengths& l,
                          TokenPair* pair) const {
    uint64_t at = token_starts_[id / kTokenStride];
    for (uint64_t j = id - id % kTokenStride; j < id; ++j) {
      const PackedLengths before = LengthAt(j);
      if (!Dropped(before)) at += uint64_t(before.inputs) + before.targets;
    }
    const size_t count = size_t(l.inputs) + l.targets;
    uint8_t buf[2 * kMaxLength * 4];
    absl::Status s =
        tokens_->Read(at * token_width_, count * token_width_, buf);
    if (!s.ok()) return s;
    auto token = [&](size_t i) {
      const uint8_t* b = buf + i * token_width_;
      return token_width_ == 2 ? int32_t(uint32_t(b[0]) | uint32_t(b[1]) << 8)
                               : int32_t(uint32_t(b[0]) | uint32_t(b[1]) << 8 |
                                         uint32_t(b[2]) << 16 |
                                         uint32_t(b[3]) << 24);
    };
    pair->inputs.resize(l.inputs);
    pair->targets.resize(l.targets);
    for (size_t i = 0; i < l.inputs; ++i) pair->inputs[i] = token(i);
    for (size_t i = 0; i < l.targets; ++i) {
      pair->targets[i] = token(l.inputs + i);
    }
    return absl::OkStatus();
  }

  static absl::Status Stopping() {
    return absl::CancelledError("wmt: the workload is closing");
  }

  // The end of the length pass: `tokenized` pairs by the pass itself,
  // first_windows by Extend before the pass reached them.
  void LogLengths(uint64_t tokenized, const char* from) const {
    fprintf(stderr,
            "batchd: level=info event=wmt_lengths pairs=%llu tokenized=%llu "
            "first_windows=%llu from=%s seconds=%.3f\n",
            (unsigned long long)source_->size(),
            (unsigned long long)tokenized,
            (unsigned long long)first_windows_.load(), from,
            std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                          lengths_start_)
                .count());
  }

  absl::Status PassError() const {
    std::lock_guard<std::mutex> lock(lengths_mu_);
    return pass_error_;
  }

  // Every pair's length: starts the pass if need be and waits for it.
  absl::Status WaitLengths() const {
    StartLengths();
    std::unique_lock<std::mutex> lock(lengths_mu_);
    lengths_cv_.wait(lock, [this] {
      return lengths_ready_.load(std::memory_order_relaxed) ||
             !pass_error_.ok();
    });
    return pass_error_;
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
    std::vector<uint64_t> ids, todo;
    while (!b.finished() &&
           (b.rows() < want_rows || b.closed_windows() < want_windows)) {
      if (stopping_.load()) return Stopping();
      const uint64_t p0 = b.next_position(), p1 = std::min(n, p0 + block);
      ids.resize(p1 - p0);
      EpochIds(order, p0, p1 - p0, ids.data());
      todo.clear();
      for (uint64_t i = 0; i < ids.size(); ++i) {
        if (ids[i] >= source_->size()) {
          return absl::InternalError(absl::StrCat(
              "wmt: the epoch order gives id ", ids[i], " at position ",
              p0 + i));
        }
        if (!Known(ids[i])) todo.push_back(ids[i]);
      }
      absl::Status s = ParallelFor(
          todo.size(), options_.index_threads,
          [&](uint64_t i) { return LearnLength(todo[i], &first_windows_); });
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
    if (!lengths_ready_.load(std::memory_order_acquire)) {
      if (cached != nullptr) return cached;
      // Not served by a schedule (a tool, a test): all lengths first.
      if (absl::Status s = WaitLengths(); !s.ok()) return s;
    }
    if (cached != nullptr && cached->complete) return cached;
    // Built outside the lock: two threads may both build one (same result).
    // The pairs' lengths in the epoch's order are gathered on index_threads
    // threads (the permutation and the scattered reads are what costs),
    // then cut into windows in order.
    const uint64_t n = order.num_examples, pairs = source_->size();
    std::vector<uint32_t> words(n);
    constexpr uint64_t kSpan = 8192;
    absl::Status gathered = ParallelFor(
        (n + kSpan - 1) / kSpan, options_.index_threads, [&](uint64_t k) {
          const uint64_t p0 = k * kSpan, count = std::min(kSpan, n - p0);
          std::vector<uint64_t> ids(count);
          EpochIds(order, p0, count, ids.data());
          for (uint64_t i = 0; i < count; ++i) {
            if (ids[i] >= pairs) {
              return absl::InternalError(
                  absl::StrCat("wmt: the epoch order gives id ", ids[i],
                               " at position ", p0 + i));
            }
            words[p0 + i] = lengths_[ids[i]].load(std::memory_order_relaxed);
          }
          return absl::OkStatus();
        },
        /*max_chunk=*/1);
    if (!gathered.ok()) return gathered;
    EpochTableBuilder b(order, options_.max_length);
    for (uint64_t p = 0; p < n; ++p) {
      b.Add({uint16_t(words[p] & 0xffff), uint16_t(words[p] >> 16)});
    }
    b.Finish();
    std::shared_ptr<const EpochTable> table = b.Table();
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
      absl::Status s =
          ParallelFor(marks.size(), options_.index_threads, [&](uint64_t i) {
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

  // Constant after construction (eval_pairs_ after Create).
  const Options options_;
  const bool train_;
  const std::unique_ptr<Tokenizer> tokenizer_;
  const std::unique_ptr<PairSource> source_;
  std::vector<TensorLayout> tensors_;
  std::vector<EvalPair> eval_pairs_;
  ExamplePrefetch* prefetch_ = nullptr;  // set before the first FillItem

  // Set by Create (train split, cache on); else null and empty.
  std::shared_ptr<const CacheDir> cache_;
  std::string lengths_key_;

  // The length pass's progress (progress()): set while it runs.
  mutable std::atomic<bool> indexing_{false};
  mutable std::atomic<uint64_t> index_done_{0};
  mutable std::atomic<uint64_t> index_total_{0};
  mutable std::atomic<int64_t> index_start_ns_{0};
  // Test hook: microseconds slept per pair the length pass tokenizes
  // ($BATCHD_TEST_WMT_INDEX_DELAY_US, read at Create); 0 otherwise.
  uint64_t index_delay_us_ = 0;

  // Every train pair's length (LengthAt), kLengthUnknown until learnt.
  std::unique_ptr<std::atomic<uint32_t>[]> lengths_;
  // All of them are known (set once, with release).
  mutable std::atomic<bool> lengths_ready_{false};
  // Asks the length pass and Extend to stop (the destructor).
  mutable std::atomic<bool> stopping_{false};
  mutable std::mutex lengths_mu_;
  mutable std::condition_variable lengths_cv_;  // lengths ready, or error
  mutable bool pass_started_ = false;            // guarded by lengths_mu_
  mutable absl::Status pass_error_;              // guarded by lengths_mu_
  mutable std::thread pass_thread_;              // guarded by lengths_mu_
  mutable std::chrono::steady_clock::time_point lengths_start_;
  // Pairs whose lengths Extend learnt (the pass had not yet), and those the
  // pass learnt.
  mutable std::atomic<uint64_t> first_windows_{0};
  mutable std::atomic<uint64_t> pass_tokenized_{0};

  // The stored token ids (OpenTokens): tokens_ and token_starts_ (where
  // the ids of pair k * kTokenStride start, in tokens) are written once,
  // before tokens_ready_ (release). Set at Create: the blob's key and the
  // bytes of one token.
  std::string tokens_key_;
  uint32_t token_width_ = 4;
  mutable std::atomic<bool> tokens_ready_{false};
  mutable std::shared_ptr<const CacheDir::Blob> tokens_;
  mutable std::vector<uint64_t> token_starts_;
  // The pass stores token ids only (the lengths were cached): progress
  // says so.
  mutable std::atomic<bool> tokens_only_{false};

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
  if (tokens_ready_.load(std::memory_order_acquire)) {
    // From the stored token ids: no reading of the text, no tokenizing.
    for (size_t i = starts[r]; i < end; ++i) {
      TokenPair& pair = pairs[i - starts[r]];
      absl::Status s = StoredPair(ids[i], lengths[i], &pair);
      if (!s.ok()) return s;
      members.push_back(&pair);
    }
    FillCutRow(members, options_.max_length, &packed);
    CountRowFromStoredTokens();
    return WriteRow(packed, out);
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
  if (tokens_ready_.load(std::memory_order_acquire)) return true;
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

// criteo1tb's train split: blocks permuted per epoch, lines shuffled
// within windows of blocks; see criteo1tb.h and docs/criteo1tb.md.
#include <algorithm>
#include <atomic>
#include <deque>
#include <map>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "workloads/criteo1tb/criteo_workload.h"
#include "workloads/packed_schedule.h"

namespace batchd {
namespace criteo {
namespace {

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
// before each, where each row of the window reads (its lines permuted, by
// a permutation seeded by the seed, the window and the epoch), and for each
// block the least row of the window (counted from the window's first) that
// reads it: the row the block is read ahead for.
struct WindowLayout {
  uint64_t seed = 0, epoch = 0, window = 0;
  std::vector<uint64_t> blocks;
  std::vector<uint64_t> first;   // blocks + 1
  std::vector<uint64_t> reader;  // per block; UINT64_MAX: a block of no line
  // Per row: (block index in the window << 32) | line in that block.
  std::vector<uint64_t> source;
  // Per block: the address of its parsed values when a thread last read it,
  // as a number. Only a hint for prefetching a later row's line: the block
  // may have been dropped since, so it is never read through (a prefetch
  // of an address that is no longer mapped does nothing).
  std::unique_ptr<std::atomic<uintptr_t>[]> values_at;
};

class TrainWorkload : public PackedWorkload {
 public:
  TrainWorkload(Options o, std::shared_ptr<BlockTable> table, Executor* pool,
                std::shared_ptr<const CacheDir> cache)
      : PackedWorkload(pool),
        o_(o),
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

  // The schedule's examples are blocks; its rows are lines (a block gives
  // many: max_rows_per_example).
  uint64_t num_examples() const override { return nb_; }
  const std::vector<TensorLayout>& tensors() const override { return tensors_; }

  const ExampleSource* source() const override { return &blocks_; }

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
                       uint8_t* const* out, FillContext& ctx) const override {
    return Fill(order.seed, order.epoch, row, out, ctx);
  }
  // The blocks read first by rows [first_row, first_row + count): each
  // block of a window is read ahead for the window's first row that reads
  // it (WindowLayout::reader), keyed by (epoch, its position in the epoch's
  // block order, block).
  bool ExamplesOfRows(const EpochOrder& order, uint64_t first_row,
                      uint64_t count,
                      std::vector<ExampleKey>* keys) const override;
  bool KeysOfRows(
      const EpochOrder& order, uint64_t first_row, uint64_t count,
      std::vector<std::pair<uint64_t, ExampleKey>>* out) const override;

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
  // Window w's blocks, their lines, where each row reads and the row that
  // reads each block first; null when a block of it is not counted yet.
  // Computation only (no I/O): one thread makes a window's layout (about
  // 15 ns a line), the others wait for it.
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
  mutable absl::Mutex build_mu_ ABSL_ACQUIRED_BEFORE(layouts_mu_);
  mutable absl::Mutex mu_;
  // Counts the epochs replaced by ones of other rows (entered at a cursor):
  // a thread's copy of an epoch (Fill) is good while it is unchanged.
  mutable std::atomic<uint64_t> replaced_{0};
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
    if (replace) replaced_.fetch_add(1, std::memory_order_release);
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
  auto find = [&]() -> std::shared_ptr<const WindowLayout> {
    absl::MutexLock lock(&layouts_mu_);
    for (const auto& l : layouts_) {
      if (l->seed == seed && l->epoch == epoch && l->window == w) return l;
    }
    return nullptr;
  };
  if (auto l = find()) return l;
  absl::MutexLock build(&build_mu_);
  if (auto l = find()) return l;  // made meanwhile
  auto l = std::make_shared<WindowLayout>();
  l->seed = seed;
  l->epoch = epoch;
  l->window = w;
  const uint64_t p0 = w * o_.window_blocks;
  const uint64_t p1 = std::min(nb_, p0 + o_.window_blocks);
  l->blocks.resize(p1 - p0);
  EpochPermutation(nb_, seed, epoch).Fill(p0, p1 - p0, l->blocks.data());
  l->first.assign(1, 0);
  l->reader.assign(l->blocks.size(), UINT64_MAX);
  l->values_at.reset(new std::atomic<uintptr_t>[l->blocks.size()]());
  for (uint64_t b : l->blocks) {
    const uint32_t n = table_->KnownLines(b);
    if (n == UINT32_MAX) return nullptr;
    l->first.push_back(l->first.back() + n);
  }
  if (l->first.back() != lines) return nullptr;
  // The window's lines in block order, then shuffled (Fisher-Yates, from a
  // counter-based stream of the seed, the window and the epoch): about
  // 15 ns a line, a third of a counter-based permutation's per line.
  l->source.resize(lines);
  for (size_t k = 0, q = 0; k < l->blocks.size(); ++k) {
    for (uint64_t j = 0; j < l->first[k + 1] - l->first[k]; ++j, ++q) {
      l->source[q] = (uint64_t(k) << 32) | j;
    }
  }
  uint64_t state = Mix(Mix(seed ^ Mix(w + 0x5bd1e995)) + epoch);
  for (uint64_t i = lines; i > 1; --i) {
    state += 0x9e3779b97f4a7c15ull;
    const uint64_t pick =
        uint64_t((static_cast<unsigned __int128>(Mix(state)) * i) >> 64);
    std::swap(l->source[i - 1], l->source[pick]);
  }
  for (uint64_t r = 0; r < lines; ++r) {
    const uint64_t k = l->source[r] >> 32;
    if (l->reader[k] == UINT64_MAX) l->reader[k] = r;
  }
  absl::MutexLock lock(&layouts_mu_);
  layouts_.push_back(l);
  while (layouts_.size() > kLayouts) layouts_.pop_front();
  return l;
}

bool TrainWorkload::ExamplesOfRows(const EpochOrder& order, uint64_t first_row,
                                   uint64_t count,
                                   std::vector<ExampleKey>* keys) const {
  std::vector<std::pair<uint64_t, ExampleKey>> found;
  if (!KeysOfRows(order, first_row, count, &found)) return false;
  for (const auto& [row, key] : found) keys->push_back(key);
  return true;
}

bool TrainWorkload::KeysOfRows(
    const EpochOrder& order, uint64_t first_row, uint64_t count,
    std::vector<std::pair<uint64_t, ExampleKey>>* out) const {
  std::shared_ptr<const EpochRows> t = Find(order.seed, order.epoch);
  if (t == nullptr || count == 0 || !t->Has(first_row) ||
      first_row + count > t->first_row.back()) {
    return false;
  }
  const size_t from = out->size();
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
      out->push_back(
          {f + r, {order.epoch, w * o_.window_blocks + k, l->blocks[k]}});
    }
  }
  std::sort(out->begin() + int64_t(from), out->end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  return true;
}

// Row `row` of the epoch: window w's lines, in the order of w's blocks,
// permuted by a permutation of its own (seeded by seed, w and the epoch).
absl::Status TrainWorkload::Fill(uint64_t seed, uint64_t epoch, uint64_t row,
                                 uint8_t* const* out, FillContext& ctx) const {
  // The epoch and window this thread served last (a batch's rows are
  // mostly of one window): a row in them takes no lock.
  struct Last {
    uint64_t owner = 0, seed = 0, epoch = 0, replaced = 0;
    std::shared_ptr<const EpochRows> rows;
    std::shared_ptr<const WindowLayout> layout;
    // The blocks of the layout's window this thread has read, not owned
    // (the cache decides what stays): a row of one still alive reads it
    // without the cache's lock.
    std::vector<std::weak_ptr<const ParsedBlock>> blocks;
  };
  thread_local Last last;
  const uint64_t replaced = replaced_.load(std::memory_order_acquire);
  if (last.owner != instance_ || last.seed != seed || last.epoch != epoch ||
      last.replaced != replaced || last.rows == nullptr ||
      !last.rows->Has(row)) {
    last.rows = Find(seed, epoch);
    last.layout = nullptr;
    if (last.rows == nullptr || !last.rows->Has(row)) {
      last.owner = 0;
      return absl::InternalError(absl::StrCat(kName, ": row ", row,
                                              " of epoch ", epoch,
                                              " is not counted yet"));
    }
    last.owner = instance_;
    last.seed = seed;
    last.epoch = epoch;
    last.replaced = replaced;
  }
  const EpochRows& t = *last.rows;
  const uint64_t w = WindowOf(t, row);
  if (last.layout == nullptr || last.layout->window != w) {
    last.layout = LayoutOf(seed, epoch, w, t.Row(w + 1) - t.Row(w));
    if (last.layout == nullptr) {
      return absl::InternalError(absl::StrCat(
          kName, ": window ", w, " of epoch ", epoch, " is not counted yet"));
    }
    last.blocks.assign(last.layout->blocks.size(), {});
  }
  const WindowLayout& l = *last.layout;
  const uint64_t r = row - t.Row(w);
  const uint64_t k = l.source[r] >> 32;
  const uint64_t j = uint32_t(l.source[r]);
  // The row a block is read ahead for reads it through its context.
  const bool reader = l.reader[k] == r;
  std::shared_ptr<const ParsedBlock> held =
      reader ? nullptr : last.blocks[k].lock();
  if (held == nullptr) {
    absl::StatusOr<std::shared_ptr<const ParsedBlock>> read = BlockOf(
        cache_, ctx, ExampleKey{epoch, w * o_.window_blocks + k, l.blocks[k]},
        reader);
    if (!read.ok()) return read.status();
    held = *std::move(read);
    last.blocks[k] = held;
    l.values_at[k].store(reinterpret_cast<uintptr_t>(held->values.data()),
                         std::memory_order_relaxed);
  }
  if (j >= held->lines) {
    return absl::DataLossError(absl::StrCat(
        kName, ": ", table_->Describe(l.blocks[k]), " holds ", held->lines,
        " lines now, ", l.first[k + 1] - l.first[k],
        " when counted (the file changed)"));
  }
  // Rows are random lines of the window's parsed blocks (tens of MB): the
  // line of a row a few ahead, which this thread likely fills next, is
  // fetched into the cache meanwhile.
  constexpr uint64_t kAhead = 6;
  if (r + kAhead < l.source.size()) {
    const uint64_t next = l.source[r + kAhead];
    const uintptr_t at =
        l.values_at[next >> 32].load(std::memory_order_relaxed);
    if (at != 0) {
      const uintptr_t line = at + uint32_t(next) * kFields * sizeof(float);
      for (uintptr_t b = 0; b < kFields * sizeof(float); b += 64) {
        __builtin_prefetch(reinterpret_cast<const void*>(line + b));
      }
      __builtin_prefetch(
          reinterpret_cast<const void*>(line + kFields * sizeof(float) - 1));
    }
  }
  WriteLine(held.get(), j, o_.exact_ids, out, ctx.counters());
  return absl::OkStatus();
}

}  // namespace

std::unique_ptr<Workload> MakeTrainWorkload(
    const Options& o, std::shared_ptr<BlockTable> table, Executor* pool,
    std::shared_ptr<const CacheDir> cache) {
  return std::make_unique<TrainWorkload>(o, std::move(table), pool,
                                         std::move(cache));
}

}  // namespace criteo
}  // namespace batchd

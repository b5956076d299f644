// The tables of a WMT train epoch: where each window of the epoch's order
// starts and its first row (EpochTable), cut from the pairs' packed lengths
// in that order by EpochTableBuilder, the one place windows are cut; and an
// epoch's row count as the cache keeps it (kind "wmt-epoch-rows"), so that a
// resume far ahead reads it instead of packing the epoch again.
//
// Also the tables one train stream keeps (EpochTableCache: the last few
// used, and those still growing while the length pass runs).
//
// Thread safety: EpochTable is a value (immutable once shared);
// EpochTableBuilder is not thread-safe (GrowingTable guards one with its
// mutex); EpochTableCache and the functions are.
#ifndef BATCHD_WORKLOADS_WMT_EPOCH_TABLES_H_
#define BATCHD_WORKLOADS_WMT_EPOCH_TABLES_H_

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "base/executor.h"
#include "storage/cache_dir.h"
#include "workloads/sampler.h"
#include "workloads/wmt/length_index.h"
#include "workloads/wmt/packing.h"

namespace batchd {
namespace wmt {

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
// window is max_length consecutive kept pairs; its rows are PlanWindow's.
// The one place windows are cut, for complete tables and for the first
// windows of an epoch still being indexed alike.
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

// The tables of an epoch as it grows while the length pass runs: the
// windows learnt so far, cut by the one builder (Extend).
struct GrowingTable {
  GrowingTable(const EpochOrder& order, uint64_t max_length)
      : order(order), builder(order, max_length) {}
  const EpochOrder order;
  absl::Mutex mu;  // held while it grows
  EpochTableBuilder builder ABSL_GUARDED_BY(mu);
};

// The epoch tables one train stream keeps: the last kEpochTables tables
// used (least recently used dropped first), and as many tables still
// growing while the length pass runs.
//
// Thread safety: thread-safe; tables are shared immutable values.
class EpochTableCache {
 public:
  static constexpr size_t kEpochTables = 4;

  // The table of (seed, epoch) if one is kept (never builds one), else
  // null; counts as a use.
  std::shared_ptr<const EpochTable> Find(uint64_t seed, uint64_t epoch);
  // Keeps `table`, replacing its epoch's earlier one, dropping the least
  // recently used beyond kEpochTables.
  void Remember(std::shared_ptr<const EpochTable> table);
  // The growing table of `order`'s epoch, made if none is kept (dropping
  // the oldest beyond kEpochTables).
  std::shared_ptr<GrowingTable> Growing(const EpochOrder& order,
                                        uint64_t max_length);

 private:
  struct Kept {
    std::shared_ptr<const EpochTable> table;
    uint64_t last_use;
  };

  absl::Mutex mu_;
  std::vector<Kept> tables_ ABSL_GUARDED_BY(mu_);
  uint64_t use_clock_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::shared_ptr<GrowingTable>> growing_ ABSL_GUARDED_BY(mu_);
};

// The complete table of `order`'s epoch from `index`, every length known:
// the lengths gathered in the epoch's order on up to `threads` of the
// executor's threads of `priority` (the permutation and the scattered reads
// are what costs), then cut into windows in order.
absl::StatusOr<std::shared_ptr<EpochTable>> BuildEpochTable(
    const LengthIndex& index, const EpochOrder& order, uint64_t max_length,
    Executor* executor, uint64_t threads,
    Priority priority = Priority::kServing);

// The cache key of an epoch's row count: the lengths' key, the seed, the
// epoch, N and the order's first ids (so that an order made otherwise never
// meets the count of another).
std::string EpochRowsKey(const std::string& lengths_key,
                         const EpochOrder& order);
// The row count the cache holds for `key`, if any.
std::optional<uint64_t> StoredEpochRows(const CacheDir& cache,
                                        const std::string& key);
// Stores it (best effort).
void StoreEpochRows(const CacheDir& cache, const std::string& key,
                    uint64_t rows);

}  // namespace wmt
}  // namespace batchd

#endif  // BATCHD_WORKLOADS_WMT_EPOCH_TABLES_H_

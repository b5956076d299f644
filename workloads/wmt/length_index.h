// Every WMT train pair's packed length, learnt once per data set: by the
// one-time length pass over every pair (in file order, as background work
// of the daemon's executor, on at most index_threads of its threads), or
// from the cache (kind "wmt-lengths", length_cache.h); plus the token ids
// the pass stores (kind "wmt-tokens", a TokenStore: token_store.h), from
// which rows are then made without reading the text or tokenizing.
//
// One index per data identity (its lengths key: every file's identity, the
// model's bytes, the options that change lengths), shared by the streams of
// that data through the daemon's SharedWork, so that a second stream joins
// the pass that runs instead of starting another. With a cache the pass,
// once a stream was made with it, runs to its end whether or not its
// streams are still open (the index lives as long as its pass), so that
// after any first use a restarted daemon loads every length and token id
// from the cache; it stops early only when the executor stops (daemon
// shutdown), and then stores what it learnt, which the next start takes
// up. A pass that nobody wants stops when the last workload using the
// index lets go: without a cache (nothing would keep the result), without
// SharedWork (tools, tests), or when no stream was ever made with it (its
// requests were cancelled or refused, or were Plans). It is the index's
// work, not a request's: it runs under its first user's owner, never
// under a request's cancellation. After a daemon's
// pass, the first epochs' row counts of the seeds its streams used are
// counted and stored too (NoteSeed).
//
// A cache that cannot be used (its directory removed, made read-only, its
// disk full) is a warning: the pass goes on without it.
//
// Lengths are one atomic word per pair (inputs | targets << 16), each
// written once, with its final value, by whichever of the pass and Learn
// tokenizes the pair first (they compute the same), so readers need no
// lock; a reader reaches a pair only through a table made after its length
// was known.
//
// Thread safety: thread-safe.
#ifndef BATCHD_WORKLOADS_WMT_LENGTH_INDEX_H_
#define BATCHD_WORKLOADS_WMT_LENGTH_INDEX_H_

#include <atomic>
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
#include "workloads/wmt/length_cache.h"
#include "workloads/wmt/packing.h"
#include "workloads/wmt/pair_source.h"
#include "workloads/wmt/token_store.h"
#include "workloads/wmt/tokenizer.h"
#include "workloads/wmt/wmt_constants.h"
#include "workloads/workload.h"

namespace batchd {
namespace wmt {

class LengthIndex : public std::enable_shared_from_this<LengthIndex> {
 public:
  struct Options {
    uint64_t max_length = 256;
    bool skip_empty = false;
    InvalidUtf8 invalid_utf8 = InvalidUtf8::kEncode;
    // Threads of the executor's class that the pass (background) and
    // Learn (serving) may use at once.
    uint64_t index_threads = 1;
    // Test hook: microseconds slept per pair tokenized
    // ($BATCHD_TEST_WMT_INDEX_DELAY_US); 0 otherwise.
    uint64_t delay_us = 0;
  };

  // `key` is LengthsKey's; `cache` may be null or disabled; `executor` runs
  // the pass and outlives the index. With `outlive_users` the pass runs to
  // its end even after the last user detaches (a daemon's index with a
  // cache).
  static std::shared_ptr<LengthIndex> Create(
      std::shared_ptr<const PairSource> source,
      std::shared_ptr<const Tokenizer> tokenizer, const Options& options,
      std::string key, std::shared_ptr<const CacheDir> cache,
      Executor* executor, bool outlive_users);
  ~LengthIndex();

  // A workload uses the index from Attach to Detach; `stream_made` says
  // whether a stream was made with it (its request handed it out). The
  // last Detach stops the pass and waits for it, unless it outlives its
  // users (with outlive_users, once any stream was made); Attach is false
  // once that happened (the index is then no use: make another).
  bool Attach();
  void Detach(bool stream_made);

  uint64_t size() const { return n_; }
  const std::string& key() const { return key_; }
  PackedLengths LengthAt(uint64_t id) const {
    const uint32_t v = lengths_[id].load(std::memory_order_relaxed);
    return {uint16_t(v & 0xffff), uint16_t(v >> 16)};
  }
  uint32_t WordAt(uint64_t id) const {
    return lengths_[id].load(std::memory_order_relaxed);
  }
  bool Known(uint64_t id) const {
    return LengthAt(id).inputs != kLengthUnknown;
  }

  // Starts learning every length, once: from the cache when it holds them
  // all (ready() on return), else by the pass.
  void Start();
  // Every length is known (acquire).
  bool ready() const { return ready_.load(std::memory_order_acquire); }
  // The pass's error while lengths are missing (then final); else OK.
  absl::Status Error() const;
  // Start(), then waits until every length is known or the pass failed.
  // Never call it from a task of the executor (the pass may be queued
  // behind it): workloads call it only outside the daemon's schedules.
  absl::Status Wait();
  // Tokenizes, at serving priority, the pairs of `ids` whose lengths are
  // not known yet (an epoch's first windows, before the pass reaches
  // them), on up to index_threads threads.
  absl::Status Learn(const std::vector<uint64_t>& ids);

  // Rows are made from stored token ids (acquire): once the pass stored
  // them, or the cache held them.
  bool tokens_ready() const { return tokens_.ready(); }
  // Pair `id`'s token ids as packing takes them (`l` its lengths), from the
  // stored ones. DataLoss for an id outside the vocabulary (a forged blob:
  // then the stored ids are dropped, with a cache_corrupt warning, and
  // stored again by a new pass; the caller tokenizes the pair).
  absl::Status StoredPair(uint64_t id, const PackedLengths& l,
                          TokenPair* pair) const {
    return tokens_.Pair(
        id, l, [this](uint64_t j) { return LengthAt(j); }, pair);
  }

  // The seed of an epoch order a stream asked about. A daemon's pass with a
  // cache, once it has stored every length, counts the first
  // kCountedEpochs epochs of every seed noted (up to kMaxSeeds) and stores
  // their row counts, so that a stream resumed far ahead by step after a
  // restart reads them instead of packing each epoch before its step.
  void NoteSeed(uint64_t seed);
  static constexpr uint64_t kCountedEpochs = 32;
  static constexpr size_t kMaxSeeds = 4;

  // Reads and tokenizes pair `id` (damaged records are a fate, I/O failures
  // errors).
  absl::StatusOr<PairFate> LoadPair(uint64_t id, TokenPair* pair) const;
  // The pass in progress, if any.
  std::optional<IndexProgress> progress() const;

 private:
  LengthIndex(std::shared_ptr<const PairSource> source,
              std::shared_ptr<const Tokenizer> tokenizer,
              const Options& options, std::string key,
              std::shared_ptr<const CacheDir> cache, Executor* executor,
              bool outlive_users);

  bool Stopping() const;
  static absl::Status StoppingError();
  uint32_t Word(const PackedLengths& l) const {
    return uint32_t(l.inputs) | uint32_t(l.targets) << 16;
  }
  void StoreLength(uint64_t id, const PackedLengths& l) const {
    lengths_[id].store(Word(l), std::memory_order_relaxed);
  }
  // Stores a length learnt by tokenizing; true if it was not known yet.
  bool LearntLength(uint64_t id, const PackedLengths& l) const {
    uint32_t unknown = Word({kLengthUnknown, kLengthUnknown});
    return lengths_[id].compare_exchange_strong(unknown, Word(l),
                                                std::memory_order_relaxed);
  }
  // Tokenizes pair `id` for its length, counting it into *learnt if new.
  absl::Status LearnLength(uint64_t id, std::atomic<uint64_t>* learnt) const;
  void Delay() const;
  uint64_t LoadCachedLengths();
  void Pass();  // the background task
  absl::Status PassWithCache();
  absl::Status PlainPass();
  absl::Status TokenPass();
  absl::Status TokenBlock(uint64_t lo, uint64_t hi,
                          std::vector<TokenPair>* pairs,
                          std::vector<uint8_t>* kept);
  void StoreLengths();
  void CountFirstEpochs();
  void Finish(const absl::Status& error);
  void StartProgress(uint64_t total);
  void LogProgress();  // the pass task only
  void WarnCache(const char* kind, const absl::Status& why,
                 const char* action) const;
  bool OpenTokens();
  void LogLengths(uint64_t tokenized, const char* from) const;

  // Constant after construction.
  const std::shared_ptr<const PairSource> source_;
  const std::shared_ptr<const Tokenizer> tokenizer_;
  const Options options_;
  const std::string key_;
  const std::shared_ptr<const CacheDir> cache_;  // null: no cache
  Executor* const executor_;
  const bool outlive_users_;
  const uint64_t n_;
  const std::unique_ptr<std::atomic<uint32_t>[]> lengths_;

  std::atomic<bool> ready_{false};
  std::atomic<bool> stop_{false};  // the last user let go
  // The pass's progress: set while it runs.
  std::atomic<bool> indexing_{false};
  std::atomic<bool> tokens_only_{false};
  std::atomic<uint64_t> index_done_{0}, index_total_{0};
  std::atomic<uint64_t> index_start_ns_{0};  // MonotonicNanos
  std::atomic<uint64_t> start_ns_{0};  // when Start began (MonotonicNanos)
  uint64_t last_progress_log_ns_ = 0;  // the pass task only
  // Pairs whose lengths Learn tokenized before the pass, and the pass did.
  std::atomic<uint64_t> first_windows_{0}, pass_tokenized_{0};

  // The stored token ids (opened by OpenTokens, once every length is
  // known).
  TokenStore tokens_;

  mutable absl::Mutex mu_;
  absl::CondVar changed_;  // ready, failed, or the pass ended
  int users_ ABSL_GUARDED_BY(mu_) = 0;
  bool stream_made_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<uint64_t> seeds_ ABSL_GUARDED_BY(mu_);
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  bool pass_running_ ABSL_GUARDED_BY(mu_) = false;  // started, not ended
  absl::Status error_ ABSL_GUARDED_BY(mu_);
};

}  // namespace wmt
}  // namespace batchd

#endif  // BATCHD_WORKLOADS_WMT_LENGTH_INDEX_H_

// Every WMT train pair's packed length, and the pass that learns them; see
// length_index.h.
#include "workloads/wmt/length_index.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/clock.h"
#include "base/log.h"
#include "workloads/sampler.h"
#include "workloads/wmt/epoch_tables.h"
#include "workloads/wmt/pair_reader.h"

namespace batchd {
namespace wmt {
namespace {

// Pairs the pass tokenizes (and stores the ids of) at a time.
constexpr uint64_t kBlock = 16384;
// How often a running pass logs its progress (event wmt_pass).
constexpr int64_t kProgressLogSeconds = 30;

// Threads for a loop of n items: a thread for every 64 items at least.
uint64_t ThreadsFor(uint64_t n, uint64_t index_threads) {
  return std::max<uint64_t>(1, std::min<uint64_t>(index_threads, n / 64 + 1));
}

}  // namespace

std::shared_ptr<LengthIndex> LengthIndex::Create(
    std::shared_ptr<const PairSource> source,
    std::shared_ptr<const Tokenizer> tokenizer, const Options& options,
    std::string key, std::shared_ptr<const CacheDir> cache, Executor* executor,
    bool outlive_users) {
  if (cache != nullptr && !cache->enabled()) cache.reset();
  // Before `cache` is moved: the order in which arguments are evaluated is
  // the compiler's (clang moves it first, gcc last).
  const bool outlive = outlive_users && cache != nullptr;
  return std::shared_ptr<LengthIndex>(
      new LengthIndex(std::move(source), std::move(tokenizer), options,
                      std::move(key), std::move(cache), executor, outlive));
}

LengthIndex::LengthIndex(std::shared_ptr<const PairSource> source,
                         std::shared_ptr<const Tokenizer> tokenizer,
                         const Options& options, std::string key,
                         std::shared_ptr<const CacheDir> cache,
                         Executor* executor, bool outlive_users)
    : source_(std::move(source)),
      tokenizer_(std::move(tokenizer)),
      options_(options),
      key_(std::move(key)),
      cache_(std::move(cache)),
      executor_(executor),
      outlive_users_(outlive_users),
      n_(source_->size()),
      lengths_(new std::atomic<uint32_t>[n_]),
      tokens_(cache_, key_, tokenizer_->vocab_size(), n_) {
  for (uint64_t id = 0; id < n_; ++id) {
    StoreLength(id, {kLengthUnknown, kLengthUnknown});
  }
}

LengthIndex::~LengthIndex() = default;

bool LengthIndex::Attach() {
  absl::MutexLock lock(&mu_);
  if (stop_.load()) return false;
  ++users_;
  return true;
}

void LengthIndex::Detach(bool stream_made) {
  absl::MutexLock lock(&mu_);
  stream_made_ = stream_made_ || stream_made;
  if (--users_ > 0 || (outlive_users_ && stream_made_)) return;
  // Nobody will use what the pass learns: stop it (it stores what it has
  // learnt when there is a cache) and wait for it if it runs, as the
  // workload's end did. A pass still queued behind others is not waited
  // for (that could take as long as they do): it ends as it starts.
  stop_.store(true);
  while (pass_running_) changed_.Wait(&mu_);
}

bool LengthIndex::Stopping() const {
  return stop_.load(std::memory_order_relaxed) ||
         (executor_ != nullptr && executor_->stopping());
}

absl::Status LengthIndex::StoppingError() {
  return absl::CancelledError("wmt: the length pass is stopping");
}

void LengthIndex::Delay() const {
  if (options_.delay_us > 0) {
    std::this_thread::sleep_for(std::chrono::microseconds(options_.delay_us));
  }
}

absl::StatusOr<PairFate> LengthIndex::LoadPair(uint64_t id,
                                               TokenPair* pair) const {
  std::string de, en;
  absl::Status s = source_->Read(id, &de, &en);
  return TokenizeRead(s, de, en, *tokenizer_, options_.max_length,
                      options_.skip_empty, options_.invalid_utf8, pair);
}

absl::Status LengthIndex::LearnLength(uint64_t id,
                                      std::atomic<uint64_t>* learnt) const {
  Delay();
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

absl::Status LengthIndex::Learn(const std::vector<uint64_t>& ids) {
  std::vector<uint64_t> todo;
  for (uint64_t id : ids) {
    if (id >= n_) {
      return absl::InternalError(
          absl::StrCat("wmt: pair ", id, " of ", n_, " asked for"));
    }
    if (!Known(id)) todo.push_back(id);
  }
  return ParallelFor(
      executor_, Priority::kServing, todo.size(),
      ThreadsFor(todo.size(), options_.index_threads),
      [&](uint64_t i) { return LearnLength(todo[i], &first_windows_); });
}

uint64_t LengthIndex::LoadCachedLengths() {
  std::vector<PackedLengths> cached;
  absl::StatusOr<std::string> value = cache_->Get(kLengthsKind, key_);
  if (value.ok() && DecodeLengths(*value, n_, options_.max_length, &cached)) {
    for (uint64_t id = 0; id < n_; ++id) {
      if (cached[id].inputs != kLengthUnknown && !Known(id)) {
        StoreLength(id, cached[id]);
      }
    }
  }
  uint64_t unknown = 0;
  for (uint64_t id = 0; id < n_; ++id) unknown += !Known(id);
  return unknown;
}

void LengthIndex::Start() {
  {
    absl::MutexLock lock(&mu_);
    if (started_) return;
    started_ = true;
  }
  start_ns_.store(MonotonicNanos());
  if (cache_ != nullptr && LoadCachedLengths() == 0) {
    LogLengths(0, "cache");
    Finish(absl::OkStatus());
    if (OpenTokens()) return;
    tokens_only_.store(true);  // the pass stores the token ids alone
  }
  absl::MutexLock lock(&mu_);
  // The pass holds the index: it may outlive every stream (outlive_users_).
  std::shared_ptr<LengthIndex> self = shared_from_this();
  // The index's work, not the request's that started it (other streams
  // join it): never cancelled with that request; Detach stops it.
  WorkScope pass_work(WorkContext{CurrentWork().owner, nullptr});
  absl::Status queued =
      executor_ == nullptr
          ? absl::FailedPreconditionError("no executor")
          : executor_->Submit(Priority::kBackground, [self] { self->Pass(); });
  if (!queued.ok()) {
    if (!ready_.load()) {
      error_ = absl::Status(
          queued.code(),
          absl::StrCat("wmt: cannot start the length pass: ", queued.message()));
    }
    changed_.SignalAll();
  }
}

absl::Status LengthIndex::Error() const {
  absl::MutexLock lock(&mu_);
  return error_;
}

absl::Status LengthIndex::Wait() {
  Start();
  absl::MutexLock lock(&mu_);
  while (!ready_.load(std::memory_order_relaxed) && error_.ok()) {
    changed_.Wait(&mu_);
  }
  return error_;
}

void LengthIndex::Finish(const absl::Status& error) {
  absl::MutexLock lock(&mu_);
  if (error.ok()) {
    ready_.store(true, std::memory_order_release);
  } else if (!ready_.load()) {
    error_ = error;
  }
  changed_.SignalAll();
}

void LengthIndex::StartProgress(uint64_t total) {
  index_done_.store(0, std::memory_order_relaxed);
  index_total_.store(total, std::memory_order_relaxed);
  index_start_ns_.store(MonotonicNanos(), std::memory_order_relaxed);
  indexing_.store(true, std::memory_order_release);
}

std::optional<IndexProgress> LengthIndex::progress() const {
  if (!indexing_.load(std::memory_order_acquire)) return std::nullopt;
  IndexProgress p;
  p.what = tokens_only_.load(std::memory_order_relaxed) ? "wmt tokens"
                                                        : "wmt lengths";
  p.unit = "pairs";
  p.total = index_total_.load(std::memory_order_relaxed);
  p.done = std::min(index_done_.load(std::memory_order_relaxed), p.total);
  const double elapsed =
      double(MonotonicNanos() -
             index_start_ns_.load(std::memory_order_relaxed)) /
      1e9;
  if (elapsed > 0 && p.done > 0) {
    p.rate = double(p.done) / elapsed;
    p.eta_seconds = double(p.total - p.done) / p.rate;
  }
  return p;
}

void LengthIndex::WarnCache(const char* kind, const absl::Status& why,
                            const char* action) const {
  Log(LogLevel::kWarn, "cache_unusable",
      {{"kind", kind},
       {"dir", cache_ != nullptr ? cache_->path() : ""},
       {"error", std::string(why.message())},
       {"action", action}});
}

// The pass: every pair not known yet, in file order (sequential reads), as
// background work (below the serving of the first windows, Learn). With a
// cache, under the entry's build lock, so that streams and daemons sharing
// the cache tokenize the data once: a second builder waits for the lock (in
// steps, to stop when asked) and then loads what the first stored.
void LengthIndex::Pass() {
  {
    absl::MutexLock lock(&mu_);
    if (stop_.load()) {
      if (!ready_.load()) error_ = StoppingError();
      changed_.SignalAll();
      return;
    }
    pass_running_ = true;
  }
  absl::Status s = cache_ == nullptr ? PlainPass() : PassWithCache();
  if (s.ok() && outlive_users_ && ready_.load()) CountFirstEpochs();
  if (!s.ok() && ready_.load() && !Stopping()) {
    Log(LogLevel::kWarn, "wmt_tokens_failed",
        {{"error", std::string(s.message())},
         {"action", "rows are tokenized as they are served"}});
  }
  Finish(s);  // an error only counts while lengths are missing
  absl::MutexLock lock(&mu_);
  pass_running_ = false;
  changed_.SignalAll();
}

absl::Status LengthIndex::PassWithCache() {
  CacheDir::Lock build_lock;
  while (true) {
    absl::StatusOr<CacheDir::Lock> locked =
        cache_->TryLockEntry(kLengthsKind, key_);
    if (!locked.ok()) {
      // An optimisation that cannot be had is no reason to fail or wait.
      WarnCache(kLengthsKind, locked.status(),
                "the length pass runs without the cache");
      return ready_.load() ? absl::OkStatus() : PlainPass();
    }
    if (locked->held()) {
      build_lock = *std::move(locked);
      break;
    }
    if (Stopping()) return StoppingError();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  // Another builder may have stored them meanwhile.
  if (!ready_.load() && LoadCachedLengths() == 0) {
    LogLengths(0, "cache");
    Finish(absl::OkStatus());
  }
  if (ready_.load() && OpenTokens()) return absl::OkStatus();
  return TokenPass();
}

absl::Status LengthIndex::PlainPass() {
  StartProgress(n_);
  absl::Status s;
  for (uint64_t lo = 0; lo < n_ && s.ok(); lo += kBlock) {
    const uint64_t hi = std::min(n_, lo + kBlock);
    s = ParallelFor(
        executor_, Priority::kBackground, hi - lo,
        ThreadsFor(hi - lo, options_.index_threads), [&](uint64_t i) {
          if (Stopping()) return StoppingError();
          index_done_.fetch_add(1, std::memory_order_relaxed);
          if (Known(lo + i)) return absl::OkStatus();
          return LearnLength(lo + i, &pass_tokenized_);
        });
    LogProgress();
  }
  indexing_.store(false, std::memory_order_release);
  if (s.ok()) {
    LogLengths(pass_tokenized_.load(),
               cache_ == nullptr ? "pass" : "pass,uncached");
  }
  return s;
}

// Every kProgressLogSeconds while the pass runs: its streams may all have
// closed, and then no stream's status shows it.
void LengthIndex::LogProgress() {
  const uint64_t now = MonotonicNanos();
  if (now - last_progress_log_ns_ < uint64_t(kProgressLogSeconds * 1e9)) {
    return;
  }
  last_progress_log_ns_ = now;
  std::optional<IndexProgress> p = progress();
  if (!p) return;
  Log(LogLevel::kInfo, "wmt_pass",
      {{"what", p->what},
       {"done", absl::StrCat(p->done)},
       {"total", absl::StrCat(p->total)},
       {"unit", p->unit},
       {"rate", absl::StrFormat("%.0f", p->rate)},
       {"eta_s", absl::StrFormat("%.0f", p->eta_seconds)}});
}

absl::Status LengthIndex::TokenBlock(uint64_t lo, uint64_t hi,
                                     std::vector<TokenPair>* pairs,
                                     std::vector<uint8_t>* kept) {
  return ParallelFor(
      executor_, Priority::kBackground, hi - lo,
      ThreadsFor(hi - lo, options_.index_threads), [&](uint64_t i) {
        if (Stopping()) return StoppingError();
        index_done_.fetch_add(1, std::memory_order_relaxed);
        const uint64_t id = lo + i;
        Delay();
        TokenPair& pair = (*pairs)[i];
        absl::StatusOr<PairFate> fate = LoadPair(id, &pair);
        if (!fate.ok()) return fate.status();
        (*kept)[i] = *fate == PairFate::kKept;
        const PackedLengths l = (*kept)[i]
                                    ? PackedLengthsOf(pair, options_.max_length)
                                    : DroppedMark(*fate);
        if (LearntLength(id, l)) {
          pass_tokenized_.fetch_add(1, std::memory_order_relaxed);
          CountLengthPassTokenizations(1);
        } else if (WordAt(id) != Word(l)) {
          return absl::DataLossError(
              absl::StrCat("wmt: pair ", id, " of ", source_->Describe(),
                           " changed since it was indexed"));
        }
        return absl::OkStatus();
      });
}

// The pass with a cache: every pair is tokenized, in file order and in
// blocks, for the lengths not known yet (stored, and marked ready, at the
// end) and for the token ids of every kept pair, streamed in order into the
// "wmt-tokens" blob (its first max-length-cut tokens of each side, as
// packing takes them), which later rows are read from (OpenTokens). Stopped
// early, it stores the lengths it learnt.
absl::Status LengthIndex::TokenPass() {
  const bool had_lengths = ready_.load();
  tokens_only_.store(had_lengths);
  absl::StatusOr<std::unique_ptr<CacheDir::BlobWriter>> writer =
      cache_->BeginBlob(kTokensKind, tokens_.key());
  if (!writer.ok()) {
    WarnCache(kTokensKind, writer.status(), "rows are tokenized as served");
    writer = std::unique_ptr<CacheDir::BlobWriter>();
  }
  std::vector<TokenPair> pairs(kBlock);
  std::vector<uint8_t> kept(kBlock);
  std::string bytes;
  StartProgress(n_);
  absl::Status s;
  for (uint64_t lo = 0; lo < n_ && s.ok(); lo += kBlock) {
    const uint64_t hi = std::min(n_, lo + kBlock);
    s = TokenBlock(lo, hi, &pairs, &kept);
    LogProgress();
    if (!s.ok() || *writer == nullptr) continue;
    bytes.clear();
    for (uint64_t i = 0; i < hi - lo; ++i) {
      if (!kept[i]) continue;
      const PackedLengths l = LengthAt(lo + i);
      tokens_.Append(pairs[i].inputs, l.inputs, &bytes);
      tokens_.Append(pairs[i].targets, l.targets, &bytes);
    }
    absl::Status put = (*writer)->Append(bytes.data(), bytes.size());
    if (!put.ok()) {
      WarnCache(kTokensKind, put, "rows are tokenized as served");
      writer->reset();  // the lengths go on
    }
  }
  indexing_.store(false, std::memory_order_release);
  if (!had_lengths && (s.ok() || Stopping())) StoreLengths();
  if (!s.ok()) return s;
  if (!had_lengths) {
    LogLengths(pass_tokenized_.load(), "pass,cached");
    Finish(absl::OkStatus());
  }
  if (*writer != nullptr) {
    absl::Status committed = (*writer)->Commit();
    if (!committed.ok()) {
      WarnCache(kTokensKind, committed, "rows are tokenized as served");
      return absl::OkStatus();
    }
    if (!OpenTokens()) {
      return absl::DataLossError("wmt: the stored token ids do not open");
    }
  }
  return absl::OkStatus();
}

void LengthIndex::NoteSeed(uint64_t seed) {
  absl::MutexLock lock(&mu_);
  if (std::find(seeds_.begin(), seeds_.end(), seed) != seeds_.end()) return;
  if (seeds_.size() < kMaxSeeds) seeds_.push_back(seed);
}

// Row counts of the first epochs of the seeds noted, stored (at the pass's
// priority, stopping between epochs when asked).
void LengthIndex::CountFirstEpochs() {
  std::vector<uint64_t> seeds;
  {
    absl::MutexLock lock(&mu_);
    seeds = seeds_;
  }
  const uint64_t start = MonotonicNanos();
  uint64_t counted = 0;
  for (uint64_t seed : seeds) {
    for (uint64_t epoch = 0; epoch < kCountedEpochs && !Stopping(); ++epoch) {
      const EpochOrder order = ShuffledOrder(n_, seed, epoch);
      const std::string key = EpochRowsKey(key_, order);
      if (StoredEpochRows(*cache_, key)) continue;
      absl::StatusOr<std::shared_ptr<EpochTable>> table =
          BuildEpochTable(*this, order, options_.max_length, executor_,
                          options_.index_threads, Priority::kBackground);
      if (!table.ok()) return;  // the streams that need it will say why
      StoreEpochRows(*cache_, key, (*table)->first_row.back());
      CountEpochCounted();
      ++counted;
    }
  }
  if (counted > 0) {
    Log(LogLevel::kInfo, "wmt_epochs_counted",
        {{"seeds", absl::StrCat(seeds.size())},
         {"epochs", absl::StrCat(counted)},
         {"seconds",
          absl::StrFormat("%.1f", double(MonotonicNanos() - start) / 1e9)}});
  }
}

// Stores the lengths learnt (unknown pairs marked), which the next start
// takes up; best effort.
void LengthIndex::StoreLengths() {
  std::vector<PackedLengths> table(n_);
  for (uint64_t id = 0; id < n_; ++id) table[id] = LengthAt(id);
  absl::Status put = cache_->Put(kLengthsKind, key_, EncodeLengths(table));
  if (!put.ok()) WarnCache(kLengthsKind, put, "not stored");
}

// Serves rows from the stored token ids once every length is known and
// the cache holds them (TokenStore::Open).
bool LengthIndex::OpenTokens() {
  if (cache_ == nullptr || !ready_.load()) return false;
  return tokens_.Open([this](uint64_t id) { return LengthAt(id); });
}

// The end of the length pass: `tokenized` pairs by the pass itself,
// first_windows by Learn before the pass reached them.
void LengthIndex::LogLengths(uint64_t tokenized, const char* from) const {
  Log(LogLevel::kInfo, "wmt_lengths",
      {{"pairs", absl::StrCat(n_)},
       {"tokenized", absl::StrCat(tokenized)},
       {"first_windows", absl::StrCat(first_windows_.load())},
       {"from", from},
       {"seconds",
        absl::StrFormat("%.3f",
                        double(MonotonicNanos() - start_ns_.load()) / 1e9)}});
}

}  // namespace wmt
}  // namespace batchd

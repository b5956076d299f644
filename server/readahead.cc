// The read-ahead stage: its streams and lanes, and the I/O threads that
// read for them; see readahead.h.
#include "server/readahead.h"

#include <pthread.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "base/clock.h"
#include "base/log.h"

namespace batchd {

// ------------------------------------------------------------ ReadAhead

ReadAhead::ReadAhead(const Options& options) : options_(options) {}

ReadAhead::~ReadAhead() { Stop(0); }

int ReadAhead::live_threads() const {
  absl::MutexLock lock(&mu_);
  return live_;
}

std::shared_ptr<ReadAheadStream> ReadAhead::AddStream(
    const std::string& name, std::shared_ptr<const ExampleSource> source) {
  if (!enabled() || source == nullptr) return nullptr;
  std::shared_ptr<ReadAheadStream> handle(new ReadAheadStream(this, name));
  auto state = std::make_unique<StreamState>();
  state->handle = handle.get();
  state->source = std::move(source);
  absl::MutexLock lock(&mu_);
  streams_[handle.get()] = std::move(state);
  return handle;
}

namespace {

// A source made of functions (tests, tools).
class FunctionSource : public ExampleSource {
 public:
  FunctionSource(ExampleReadFn read, ExampleDescribeFn describe)
      : read_(std::move(read)), describe_(std::move(describe)) {}
  absl::Status Read(const ExampleKey& key, std::string* bytes,
                    int64_t* label) const override {
    return read_(key.id, bytes, label);
  }
  std::string Describe(const ExampleKey& key) const override {
    return describe_ ? describe_(key.id) : ExampleSource::Describe(key);
  }

 private:
  const ExampleReadFn read_;
  const ExampleDescribeFn describe_;
};

}  // namespace

std::shared_ptr<ReadAheadStream> ReadAhead::AddStream(
    const std::string& name, ExampleReadFn read, ExampleDescribeFn describe) {
  if (!read) return nullptr;
  return AddStream(name, std::make_shared<FunctionSource>(std::move(read),
                                                          std::move(describe)));
}

absl::Status ReadAhead::EnsureThread() {
  if (!enabled()) return absl::OkStatus();
  absl::MutexLock lock(&mu_);
  if (live_ > 0 || stop_ || StartIoThread()) return absl::OkStatus();
  // StartThread's message: which thread, the limit, the flag.
  return absl::ResourceExhaustedError(thread_error_);
}

void ReadAhead::RemoveStream(ReadAheadStream* handle) {
  std::unique_ptr<StreamState> gone;
  bool landed = false;
  {
    absl::MutexLock lock(&mu_);
    auto it = streams_.find(handle);
    if (it == streams_.end()) return;
    StreamState* s = it->second.get();
    for (LaneId id : s->lanes) lanes_.erase(id);
    s->lanes.clear();
    s->demand.clear();  // nothing more is issued for the stream
    // Reads of storage that answers are waited for, as their function may
    // use what goes with the stream; a read that has not returned within
    // kRemoveWaitSeconds of its start (a stalled mount) is not.
    while (!s->read_starts.empty()) {
      const uint64_t until = *s->read_starts.rbegin() +
                             uint64_t(kRemoveWaitSeconds * 1e9);
      const uint64_t now = MonotonicNanos();
      if (now >= until) break;
      done_cv_.WaitWithTimeout(&mu_, absl::Nanoseconds(until - now));
    }
    it = streams_.find(handle);
    for (auto& [key, e] : s->entries) landed |= Land(&e);
    s->entries.clear();
    s->by_file.clear();
    s->removed = true;
    // A read still in flight (stuck in a stalled mount, perhaps) keeps the
    // state, and the read function, until it returns.
    if (s->in_flight > 0) {
      orphaned_ += s->in_flight;
      removed_.push_back(std::move(it->second));
    } else {
      gone = std::move(it->second);
    }
    streams_.erase(it);
    done_cv_.SignalAll();
    Wake(true);  // the other streams' shares grew
  }
  if (landed) CallOnLanded();
  gone.reset();  // the read function (and what it holds) goes here
}

ReadAhead::LaneId ReadAhead::AddLane(
    const std::shared_ptr<ReadAheadStream>& stream, LaneOrderFn order,
    uint64_t first_step) {
  if (stream == nullptr) return 0;
  absl::MutexLock lock(&mu_);
  StreamState* s = StateOf(stream.get());
  const LaneId id = next_lane_++;
  Lane& lane = lanes_[id];
  lane.stream = s;
  lane.order = std::move(order);
  lane.first_step = first_step;
  lane.next_step = first_step;
  s->lanes.push_back(id);
  Wake(true);
  return id;
}

void ReadAhead::RemoveLane(LaneId id) {
  if (id == 0) return;
  bool landed = false;
  {
    absl::MutexLock lock(&mu_);
    auto it = lanes_.find(id);
    if (it == lanes_.end()) return;
    StreamState* s = it->second.stream;
    for (auto e = s->entries.begin(); e != s->entries.end();) {
      if (e->second.lane == id) {
        landed |= Land(&e->second);
        e = Erase(s, e);
      } else {
        ++e;
      }
    }
    s->lanes.erase(std::remove(s->lanes.begin(), s->lanes.end(), id),
                   s->lanes.end());
    lanes_.erase(it);
    Wake(true);             // the other lanes' shares grew
    done_cv_.SignalAll();  // a waiter may wait for an entry just dropped
  }
  if (landed) CallOnLanded();
}

void ReadAhead::Decoding(LaneId id, uint64_t step) {
  if (id == 0) return;
  absl::MutexLock lock(&mu_);
  auto it = lanes_.find(id);
  if (it == lanes_.end()) return;
  Lane& lane = it->second;
  if (!lane.any_decoding || step > lane.decoding) lane.decoding = step;
  lane.any_decoding = true;
  // A step the order did not know may be known now (a packed stream's
  // epoch counted since).
  lane.at_end = false;
  // While the workers read inline there is nothing to issue: the I/O
  // threads sleep (and end), rather than wake at every step.
  if (!ReadsInline(*lane.stream, MonotonicNanos())) Wake(true);
}

void ReadAhead::FinishItem(ReadAheadItem* item) {
  if (item->stream_ == nullptr ||
      (item->taken_.empty() && item->waited_ns_ == 0)) {
    item->wait_.reset();
    return;
  }
  absl::MutexLock lock(&mu_);
  auto st = streams_.find(item->stream_);
  if (st != streams_.end()) {
    StreamState* s = st->second.get();
    for (const Key& k : item->taken_) {
      auto it = s->entries.find(k);
      if (it != s->entries.end()) Erase(s, it);
    }
    s->stats.io_wait_ns += item->waited_ns_;
    Wake(false);  // budget freed
  }
  item->taken_.clear();
  item->waited_ns_ = 0;
  item->wait_.reset();
  item->pending_since_ns_ = 0;
}

void ReadAhead::SetOnLanded(std::function<void()> on_landed) {
  absl::MutexLock lock(&landed_mu_);
  on_landed_ = std::move(on_landed);
}

void ReadAhead::CallOnLanded() {
  absl::MutexLock lock(&landed_mu_);
  if (on_landed_) on_landed_();
}

bool ReadAhead::StartIoThread() {
  const uint64_t id = next_thread_id_++;
  absl::StatusOr<Thread> t =
      StartThread("a read-ahead I/O thread", "--readahead-threads",
                  [this, id] { IoLoop(id); });
  if (!t.ok()) {
    thread_error_ = std::string(t.status().message());
    LogKeyed(LogLevel::kWarn, "readahead_thread_failed", "thread_failed",
             {{"what", "read-ahead I/O thread"},
              {"threads", std::to_string(live_)},
              {"msg", thread_error_}});
    return false;
  }
  threads_.emplace(id, *std::move(t));
  ++live_;
  return true;
}

bool ReadAhead::Wake(bool all) {
  if (stop_) return false;
  if (idle_ > 0) {
    if (all) {
      work_cv_.SignalAll();
    } else {
      work_cv_.Signal();
    }
    return true;
  }
  // Every thread is in a read: one more, up to io_threads that are neither
  // stuck in streams that went nor beyond their stream's share now (a
  // stream that had every thread before others came, whose reads then
  // stalled), and never more than twice io_threads.
  const int share = PerStreamThreads();
  int excess = 0;
  for (const auto& [handle, s] : streams_) {
    excess += std::max(0, s->in_flight - share);
  }
  if (live_ - orphaned_ - excess < options_.io_threads &&
      live_ < 2 * options_.io_threads) {
    return StartIoThread() || live_ > 0;
  }
  return live_ > 0;
}

void ReadAhead::IoLoop(uint64_t thread_id) {
  // Named, so that ps, top and the tests tell the I/O threads apart (a
  // thread is otherwise named after whichever thread started it).
  pthread_setname_np(pthread_self(), "batchd-io");
  mu_.Lock();
  std::string bytes;
  const absl::Duration idle_exit = absl::Seconds(kIdleExitSeconds);
  while (!stop_) {
    Pick pick;
    if (NextRead(&pick)) {
      RunRead(pick, &bytes);
      continue;
    }
    ++idle_;
    const bool woken = !work_cv_.WaitWithTimeout(&mu_, idle_exit);
    --idle_;
    if (!woken && !stop_ && !NextRead(&pick)) break;  // idle: end
    if (!woken && !stop_) RunRead(pick, &bytes);
  }
  // Join the threads that ended before this one (at most one is left
  // unjoined at a time: the last to end, joined by Stop or the next).
  std::vector<Thread> ended;
  for (uint64_t id : finished_) {
    ended.push_back(std::move(threads_.at(id)));
    threads_.erase(id);
  }
  finished_.assign(1, thread_id);
  --live_;
  done_cv_.SignalAll();
  mu_.Unlock();
  for (Thread& t : ended) t.Join();
}

bool ReadAhead::Stop(uint64_t deadline_ns) {
  absl::ReleasableMutexLock lock(&mu_);
  stop_ = true;
  work_cv_.SignalAll();
  while (live_ > 0) {
    if (deadline_ns == 0) {
      done_cv_.Wait(&mu_);
      continue;
    }
    const uint64_t now = MonotonicNanos();
    if (now >= deadline_ns) break;
    done_cv_.WaitWithTimeout(&mu_, absl::Nanoseconds(deadline_ns - now));
  }
  if (live_ > 0) {
    Log(LogLevel::kWarn, "readahead_threads_abandoned",
        {{"threads", std::to_string(live_)},
         {"msg", "I/O threads stuck in reads that have not returned are "
                 "left to end with the process"}});
    return false;
  }
  std::vector<Thread> ended;
  for (auto& [id, t] : threads_) ended.push_back(std::move(t));
  threads_.clear();
  finished_.clear();
  lock.Release();
  for (Thread& t : ended) t.Join();
  return true;
}

void ReadAhead::WaitIdleForTest() {
  absl::MutexLock lock(&mu_);
  while (true) {
    bool demand = false;
    for (const auto& [handle, s] : streams_) demand |= !s->demand.empty();
    Pick pick;
    if (in_flight_ == 0 && !demand && !NextRead(&pick)) return;
    Wake(true);
    done_cv_.WaitWithTimeout(&mu_, absl::Milliseconds(5));
  }
}

}  // namespace batchd

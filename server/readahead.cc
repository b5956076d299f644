// The read-ahead stage; see readahead.h.
#include "server/readahead.h"

#include <algorithm>
#include <chrono>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "base/clock.h"
#include "base/log.h"

namespace batchd {

namespace {

// What an in-flight read counts for before a stream has read anything: about
// one ImageNet JPEG.
constexpr uint64_t kFirstGuessBytes = 128 << 10;

// Steps a lane may look at in one pick before it yields to the next lane
// (an evaluation stream's padding steps hold no example).
constexpr int kEmptyStepsPerPick = 4;

// The item whose reads this thread makes (ReadAheadItem::Scope).
thread_local ReadAheadItem* t_item = nullptr;

std::string Seconds(uint64_t ns) {
  return absl::StrFormat("%.1f", double(ns) / 1e9);
}

}  // namespace

// ------------------------------------------------------------ items

ReadAheadItem::Scope::Scope(ReadAheadItem* item) : previous_(t_item) {
  t_item = item;
  if (item->wait_ != nullptr) {
    item->waited_ns_ += MonotonicNanos() - item->pending_since_ns_;
    item->wait_.reset();
    item->pending_since_ns_ = 0;
  }
}

ReadAheadItem::Scope::~Scope() { t_item = previous_; }

bool ReadAheadItem::landed() const {
  return wait_ == nullptr || wait_->landed.load(std::memory_order_acquire);
}

// ------------------------------------------------------------ streams

ReadAheadStream::~ReadAheadStream() { owner_->RemoveStream(this); }

ReadAhead::StreamState* ReadAhead::StateOf(
    const ReadAheadStream* handle) const {
  return streams_.at(handle).get();
}

absl::Status ReadAheadStream::Read(uint64_t epoch, uint64_t position,
                                   uint64_t id, std::string* bytes,
                                   int64_t* label) {
  ReadAheadItem* item = t_item;
  if (item == nullptr || item->stream_ != this) {
    return ReadBlocking(epoch, position, id, bytes, label);
  }
  ReadAhead& ra = *owner_;
  absl::MutexLock lock(&ra.mu_);
  ReadAhead::StreamState& s = *ra.StateOf(this);
  const ReadAhead::Key key{epoch, position, id};
  auto it = s.entries.find(key);
  if (it != s.entries.end() && it->second.done) {
    ReadAhead::Entry& e = it->second;
    if (e.status.ok() || e.retried) {
      // Copied, not moved: the item may run again (a later read of it is
      // pending) and must find the same bytes.
      if (!e.taken) {
        e.taken = true;
        item->taken_.push_back(key);
      }
      if (!e.demand && !e.counted && e.status.ok()) {
        e.counted = true;
        ++s.stats.hits;
      }
      if (!e.status.ok()) return e.status;
      *bytes = e.bytes;
      *label = e.label;
      return absl::OkStatus();
    }
    // A read that failed is made once more, as the worker would have made
    // it without read-ahead; that result stands.
    e.retried = true;
    e.done = e.started = false;
    e.demand = true;
    e.status = absl::OkStatus();
    e.serial = ra.next_serial_++;
    s.demand.push_back(key);
    ra.Wake(false);
  } else if (it == s.entries.end()) {
    ReadAhead::Entry& e = s.entries[key];
    e.lane = item->lane_;
    e.id = id;
    e.step = item->step_;
    e.demand = true;
    e.serial = ra.next_serial_++;
    s.demand.push_back(key);
    ++s.stats.sync_reads;
    ra.Wake(false);
    it = s.entries.find(key);
  } else if (!it->second.demand) {
    ++s.stats.waits;
  }
  ReadAhead::Entry& e = it->second;
  if (!e.taken) {
    e.taken = true;
    item->taken_.push_back(key);
  }
  if (e.wait == nullptr) e.wait = std::make_shared<ReadAheadItem::Wait>();
  item->wait_ = e.wait;
  item->waiting_for_ = key;
  item->pending_since_ns_ = MonotonicNanos();
  return ReadPendingError();
}

absl::Status ReadAheadStream::ReadBlocking(uint64_t epoch, uint64_t position,
                                           uint64_t id, std::string* bytes,
                                           int64_t* label) {
  ReadAhead& ra = *owner_;
  const uint64_t start = MonotonicNanos();
  absl::MutexLock lock(&ra.mu_);
  ReadAhead::StreamState& s = *ra.StateOf(this);
  // What was read for this place under another id is not this example.
  for (auto m = s.entries.lower_bound({epoch, position, 0});
       m != s.entries.end() && std::get<0>(m->first) == epoch &&
       std::get<1>(m->first) == position;) {
    m = std::get<2>(m->first) != id && !m->second.taken ? ra.Erase(&s, m)
                                                        : std::next(m);
  }
  const ReadAhead::Key key{epoch, position, id};
  auto it = s.entries.find(key);
  if (it != s.entries.end() && !it->second.done) {
    ++s.stats.waits;
    while (true) {
      it = s.entries.find(key);
      if (it == s.entries.end() || it->second.done) break;
      ra.done_cv_.Wait(&ra.mu_);
    }
  }
  if (it != s.entries.end() && !it->second.taken) {
    ReadAhead::Entry& e = it->second;
    const bool ok = e.status.ok();
    if (ok) {
      bytes->swap(e.bytes);
      *label = e.label;
      ++s.stats.hits;
    }
    ra.Erase(&s, it);
    ra.Wake(false);
    if (ok) {
      s.stats.io_wait_ns += MonotonicNanos() - start;
      return absl::OkStatus();
    }
  }
  // Not read ahead, or the read ahead failed: read now, as without
  // read-ahead, so that the error is the source's own.
  ++s.stats.sync_reads;
  ra.mu_.Unlock();
  absl::Status st = s.read(id, bytes, label);
  const uint64_t waited = MonotonicNanos() - start;
  ra.mu_.Lock();
  s.stats.io_wait_ns += waited;
  return st;
}

ReadAheadStats ReadAheadStream::stats() const {
  ReadAhead& ra = *owner_;
  absl::MutexLock lock(&ra.mu_);
  const ReadAhead::StreamState& s = *ra.StateOf(this);
  ReadAheadStats out = s.stats;
  const uint64_t now = MonotonicNanos();
  uint64_t oldest = now;
  for (const auto& [key, e] : s.entries) {
    // What the workers asked for on demand is a sync read, outside the
    // budget (held 0), not read ahead: in neither depth nor bytes.
    ++(e.demand ? out.on_demand_examples : out.depth_examples);
    (e.done ? out.bytes_buffered : out.bytes_in_flight) += e.held;
    if (e.started && !e.done) oldest = std::min(oldest, e.start_ns);
  }
  out.oldest_read_seconds = double(now - oldest) / 1e9;
  if (!s.lanes.empty()) {
    out.budget_bytes = ra.LaneShare(ra.lanes_.at(s.lanes[0])) * s.lanes.size();
  }
  return out;
}

std::string ReadAheadStream::StallReason(const ReadAheadItem& item,
                                         uint64_t now_ns) const {
  ReadAhead& ra = *owner_;
  absl::MutexLock lock(&ra.mu_);
  const ReadAhead::StreamState& s = *ra.StateOf(this);
  auto describe = [&](uint64_t id) {
    return s.describe ? s.describe(id) : absl::StrCat("example ", id);
  };
  const ReadAhead::Entry* stuck = nullptr;
  auto it = s.entries.find(item.waiting_for_);
  if (it != s.entries.end() && it->second.started && !it->second.done) {
    stuck = &it->second;
  } else {
    // Not started: the stream's I/O threads are all in reads that have not
    // returned; the oldest of them is the one to name.
    for (const auto& [key, e] : s.entries) {
      if (e.started && !e.done && (stuck == nullptr ||
                                   e.start_ns < stuck->start_ns)) {
        stuck = &e;
      }
    }
  }
  if (stuck != nullptr) {
    return absl::StrCat("reading ", describe(stuck->id),
                        " has not returned for ",
                        Seconds(now_ns - std::min(now_ns, stuck->start_ns)),
                        " s");
  }
  const uint64_t id = std::get<2>(item.waiting_for_);
  if (ra.live_ == 0) {
    return absl::StrCat("no I/O thread could be started to read ",
                        describe(id), " (", ra.thread_error_, ")");
  }
  return absl::StrCat("the read of ", describe(id), " has waited ",
                      Seconds(now_ns - std::min(now_ns,
                                                item.pending_since_ns())),
                      " s for an I/O thread");
}

// ------------------------------------------------------------ ReadAhead

ReadAhead::ReadAhead(const Options& options) : options_(options) {}

ReadAhead::~ReadAhead() { Stop(0); }

int ReadAhead::live_threads() const {
  absl::MutexLock lock(&mu_);
  return live_;
}

std::shared_ptr<ReadAheadStream> ReadAhead::AddStream(
    const std::string& name, ExampleReadFn read, ExampleDescribeFn describe) {
  if (!enabled() || !read) return nullptr;
  std::shared_ptr<ReadAheadStream> handle(new ReadAheadStream(this, name));
  auto state = std::make_unique<StreamState>();
  state->handle = handle.get();
  state->read = std::move(read);
  state->describe = std::move(describe);
  absl::MutexLock lock(&mu_);
  streams_[handle.get()] = std::move(state);
  return handle;
}

absl::Status ReadAhead::EnsureThread() {
  if (!enabled()) return absl::OkStatus();
  absl::MutexLock lock(&mu_);
  if (live_ > 0 || stop_ || StartThread()) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat(
      "cannot start a read-ahead I/O thread: ", thread_error_,
      " (the daemon is at its thread limit: systemd's TasksMax, "
      "RLIMIT_NPROC or the kernel's threads-max; raise it or lower "
      "--threads and --readahead-threads)"));
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
        e = s->entries.erase(e);
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
  Wake(true);
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

uint64_t ReadAhead::MeanBytes(const StreamState& s) const {
  return s.reads_done == 0 ? kFirstGuessBytes
                           : std::max<uint64_t>(1, s.bytes_read / s.reads_done);
}

uint64_t ReadAhead::LaneShare(const Lane& lane) const {
  uint64_t streams = 0;
  for (const auto& [handle, s] : streams_) streams += s->lanes.empty() ? 0 : 1;
  streams = std::max<uint64_t>(1, streams);
  const uint64_t lanes = std::max<size_t>(1, lane.stream->lanes.size());
  return options_.budget_bytes / streams / lanes;
}

int ReadAhead::PerStreamThreads() const {
  int streams = 0;
  for (const auto& [handle, s] : streams_) {
    streams += s->lanes.empty() && s->demand.empty() ? 0 : 1;
  }
  return std::max(1, options_.io_threads / std::max(1, streams));
}

void ReadAhead::NoteTotal() {
  uint64_t total = 0;
  for (const auto& [id, lane] : lanes_) total += lane.held;
  max_total_held_ = std::max(max_total_held_, total);
}

uint64_t ReadAhead::max_total_held_bytes() const {
  absl::MutexLock lock(&mu_);
  return max_total_held_;
}

void ReadAhead::Release(Lane* lane, Entry* e) {
  lane->held -= std::min(lane->held, e->held);
  e->held = 0;
}

bool ReadAhead::Land(Entry* e) {
  if (e->wait == nullptr) return false;
  e->wait->landed.store(true, std::memory_order_release);
  e->wait.reset();
  return true;
}

std::map<ReadAhead::Key, ReadAhead::Entry>::iterator ReadAhead::Erase(
    StreamState* s, std::map<Key, Entry>::iterator it) {
  auto lane = lanes_.find(it->second.lane);
  if (lane != lanes_.end()) Release(&lane->second, &it->second);
  Land(&it->second);
  return s->entries.erase(it);
}

bool ReadAhead::NextRead(Pick* pick) {
  return NextDemandRead(pick) || NextLaneRead(pick);
}

bool ReadAhead::NextDemandRead(Pick* pick) {
  if (streams_.empty()) return false;
  const int per_stream = PerStreamThreads();
  const size_t n = streams_.size();
  auto it = streams_.begin();
  std::advance(it, demand_round_robin_ % n);
  for (size_t i = 0; i < n; ++i, ++it) {
    if (it == streams_.end()) it = streams_.begin();
    StreamState* s = it->second.get();
    // Keys whose entry went (its item finished or failed) or was read.
    while (!s->demand.empty()) {
      auto e = s->entries.find(s->demand.front());
      if (e != s->entries.end() && !e->second.started && !e->second.done) {
        break;
      }
      s->demand.pop_front();
    }
    if (s->demand.empty() || s->in_flight >= per_stream) continue;
    const Entry& e = s->entries.at(s->demand.front());
    *pick = {s, s->demand.front(), e.lane, e.step, true};
    demand_round_robin_ = (demand_round_robin_ + i + 1) % n;
    return true;
  }
  return false;
}

bool ReadAhead::NextLaneRead(Pick* pick) {
  if (lanes_.empty()) return false;
  uint64_t total = 0;
  for (const auto& [id, lane] : lanes_) total += lane.held;
  // A stream may keep its share of the I/O threads busy, no more, so that
  // one stream's stalled storage cannot take every I/O thread from another.
  const int per_stream = PerStreamThreads();
  auto start = lanes_.upper_bound(round_robin_);
  if (start == lanes_.end()) start = lanes_.begin();
  auto it = start;
  do {
    Lane& lane = it->second;
    const uint64_t est = MeanBytes(*lane.stream);
    const uint64_t share = LaneShare(lane);
    const uint64_t need = std::min(est, share);
    // Within the lane's share (one example always, so that a file larger
    // than the share still goes ahead) and, while shares change as ranks
    // come and go, within the whole budget.
    const bool room = (lane.held == 0 || lane.held + need <= share) &&
                      (total == 0 || total + need <= options_.budget_bytes);
    const bool threads_free = lane.stream->in_flight < per_stream;
    for (int tries = 0;
         room && threads_free && !lane.at_end && tries < kEmptyStepsPerPick;
         ++tries) {
      // Only steps after the one the workers decode: what they decode now
      // and is not read yet, they ask for on demand.
      if (lane.any_decoding && lane.next_step <= lane.decoding) {
        lane.next_step = lane.decoding + 1;
        lane.have_keys = false;
      }
      if (!lane.have_keys) {
        lane.keys.clear();
        if (!lane.order(lane.next_step, &lane.keys)) {
          lane.at_end = true;
          break;
        }
        lane.have_keys = true;
        lane.next_index = 0;
      }
      if (lane.next_index >= lane.keys.size()) {
        ++lane.next_step;
        lane.have_keys = false;
        continue;
      }
      const ReadAheadKey& k = lane.keys[lane.next_index];
      if (lane.stream->entries.count({k.epoch, k.position, k.id}) != 0) {
        ++lane.next_index;  // already read (by an earlier lane, on demand)
        continue;
      }
      *pick = {lane.stream, {k.epoch, k.position, k.id}, it->first,
               lane.next_step, false};
      round_robin_ = it->first;
      return true;
    }
    if (++it == lanes_.end()) it = lanes_.begin();
  } while (it != start);
  return false;
}

void ReadAhead::RunRead(const Pick& pick, std::string* bytes) {
  StreamState* s = pick.stream;
  ReadAheadStats& st = s->stats;
  Entry& e = s->entries[pick.key];
  if (pick.demand) {
    s->demand.pop_front();  // NextDemandRead picked the front
  } else {
    Lane& lane = lanes_.at(pick.lane);
    ++lane.next_index;
    const uint64_t ahead = lane.any_decoding ? pick.step - lane.decoding
                                             : pick.step + 1 - lane.first_step;
    st.min_steps_ahead =
        st.reads_issued == 0 ? ahead : std::min(st.min_steps_ahead, ahead);
    st.max_steps_ahead = std::max(st.max_steps_ahead, ahead);
    ++st.reads_issued;
    e.lane = pick.lane;
    e.id = std::get<2>(pick.key);
    e.step = pick.step;
    e.serial = next_serial_++;
    // Counted at the mean size until it lands, at most the lane's share (a
    // first guess must not exceed a small budget on its own).
    e.held = std::min(MeanBytes(*s), LaneShare(lane));
    lane.held += e.held;
    st.max_held_bytes = std::max(st.max_held_bytes, lane.held);
    NoteTotal();
    st.max_lane_share = std::max(st.max_lane_share, LaneShare(lane));
  }
  e.started = true;
  e.start_ns = MonotonicNanos();
  const uint64_t serial = e.serial, id = e.id, started = e.start_ns;
  s->read_starts.insert(started);
  ++s->in_flight;
  ++in_flight_;
  // This thread may not come back (a stalled mount): whatever else waits
  // must find another, idle or new.
  Pick next;
  if (idle_ == 0 && NextRead(&next)) Wake(false);
  // The state (and its function) stays while in_flight > 0, even after
  // its stream went.
  const ExampleReadFn& read = s->read;
  mu_.Unlock();
  int64_t label = 0;
  bytes->clear();
  absl::Status status = read(id, bytes, &label);
  mu_.Lock();
  s->read_starts.erase(s->read_starts.find(started));
  --s->in_flight;
  --in_flight_;
  if (s->removed) {
    --orphaned_;
    if (s->in_flight == 0) {
      std::unique_ptr<StreamState> gone;
      for (auto& r : removed_) {
        if (r.get() == s) gone = std::move(r);
      }
      removed_.erase(std::remove(removed_.begin(), removed_.end(), nullptr),
                     removed_.end());
      mu_.Unlock();
      gone.reset();
      mu_.Lock();
    }
    return;
  }
  bool landed = false;
  auto it = s->entries.find(pick.key);
  if (it != s->entries.end() && it->second.serial == serial &&
      !it->second.done) {
    Entry& done = it->second;
    auto lane_it = lanes_.find(done.lane);
    Lane* l = lane_it == lanes_.end() ? nullptr : &lane_it->second;
    done.done = true;
    if (l != nullptr) Release(l, &done);
    if (status.ok()) {
      // What a worker asked for now is outside the budget, as a worker's
      // own read would be: bounded by the items in progress.
      done.held = done.demand ? 0 : bytes->size();
      if (l != nullptr) {
        l->held += done.held;
        st.max_held_bytes = std::max(st.max_held_bytes, l->held);
      }
      s->bytes_read += bytes->size();
      ++s->reads_done;
      done.bytes.swap(*bytes);
      done.label = label;
      NoteTotal();
    } else {
      ++st.failed_reads;
      done.status = std::move(status);
    }
    landed = Land(&done);
  }
  done_cv_.SignalAll();
  if (landed) {
    mu_.Unlock();
    CallOnLanded();
    mu_.Lock();
  }
}

bool ReadAhead::StartThread() {
  try {
    const uint64_t id = next_thread_id_++;
    threads_.emplace(id, std::thread([this, id] { IoLoop(id); }));
    ++live_;
    return true;
  } catch (const std::system_error& e) {
    thread_error_ = e.what();
    LogKeyed(LogLevel::kWarn, "readahead_thread_failed", "thread_failed",
             {{"what", "read-ahead I/O thread"},
              {"threads", std::to_string(live_)},
              {"msg", e.what()}});
    return false;
  }
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
    return StartThread() || live_ > 0;
  }
  return live_ > 0;
}

void ReadAhead::IoLoop(uint64_t thread_id) {
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
  std::vector<std::thread> ended;
  for (uint64_t id : finished_) {
    ended.push_back(std::move(threads_.at(id)));
    threads_.erase(id);
  }
  finished_.assign(1, thread_id);
  --live_;
  done_cv_.SignalAll();
  mu_.Unlock();
  for (std::thread& t : ended) t.join();
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
  std::vector<std::thread> ended;
  for (auto& [id, t] : threads_) ended.push_back(std::move(t));
  threads_.clear();
  finished_.clear();
  lock.Release();
  for (std::thread& t : ended) t.join();
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

// The read-ahead's reads: a worker's read for its item (buffered, pending or
// inline), a read outside any item, the reads of the I/O threads, and what
// the stream reports (stats, stall reasons). See readahead.h.
#include <sys/resource.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/clock.h"
#include "server/readahead.h"

namespace batchd {

namespace {

std::string Seconds(uint64_t ns) {
  return absl::StrFormat("%.1f", double(ns) / 1e9);
}

// How often this thread has given up the CPU to wait (for storage, a lock):
// a read during which it did not return at once, however long a busy
// machine kept the thread from running.
uint64_t Waits() {
  struct rusage u;
  return getrusage(RUSAGE_THREAD, &u) == 0 ? uint64_t(u.ru_nvcsw) : 0;
}

}  // namespace

// ------------------------------------------------------------ items

absl::Status ReadAheadItem::Read(const ExampleKey& key, std::string* bytes,
                                 int64_t* label) {
  return stream_->Read(this, key, bytes, label);
}

void ReadAheadItem::BeginAttempt() {
  if (wait_ != nullptr) {
    waited_ns_ += MonotonicNanos() - pending_since_ns_;
    wait_.reset();
    pending_since_ns_ = 0;
  }
}

// ------------------------------------------------------------ streams

ReadAheadStream::~ReadAheadStream() { owner_->RemoveStream(this); }

ReadAhead::StreamState* ReadAhead::StateOf(
    const ReadAheadStream* handle) const {
  return streams_.at(handle).get();
}

absl::Status ReadAheadStream::Read(ReadAheadItem* item, const ExampleKey& k,
                                   std::string* bytes, int64_t* label) {
  if (item == nullptr || item->stream_ != this) {
    return ReadBlocking(k, bytes, label);
  }
  ReadAhead& ra = *owner_;
  absl::MutexLock lock(&ra.mu_);
  ReadAhead::StreamState& s = *ra.StateOf(this);
  const ReadAhead::Key key = EntryKeyOf(k);
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
    const uint64_t now = MonotonicNanos();
    if (ra.ReadsInline(s, now)) {
      // Storage answers at once: the worker reads, as without read-ahead,
      // and nothing is kept (an item whose reads are all inline never runs
      // again).
      ++s.stats.sync_reads;
      ++s.stats.inline_reads;
      auto start = s.inline_starts.insert(now);
      // The state and its source stay while the stream's handle lives,
      // which outlives this call.
      const ExampleSource& source = *s.source;
      ra.mu_.Unlock();
      const uint64_t waits = Waits();
      absl::Status st = source.Read(k, bytes, label);
      const bool waited = Waits() != waits;
      const uint64_t took = MonotonicNanos() - now;
      ra.mu_.Lock();
      s.inline_starts.erase(start);
      ra.NoteReadTime(&s, took, waited, /*ahead=*/true);
      return st;
    }
    ReadAhead::Entry& e = ra.Insert(&s, key);
    e.lane = item->lane_;
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

void ReadAheadStream::Forgo(const ExampleKey& k) {
  ReadAhead& ra = *owner_;
  absl::MutexLock lock(&ra.mu_);
  ReadAhead::StreamState& s = *ra.StateOf(this);
  auto it = s.entries.find(EntryKeyOf(k));
  if (it == s.entries.end() || it->second.taken) return;
  ra.Erase(&s, it);
  ra.Wake(false);  // its share is free
}

absl::Status ReadAheadStream::ReadBlocking(const ExampleKey& k,
                                           std::string* bytes, int64_t* label) {
  ReadAhead& ra = *owner_;
  const uint64_t start = MonotonicNanos();
  absl::MutexLock lock(&ra.mu_);
  ReadAhead::StreamState& s = *ra.StateOf(this);
  // What was read for this place under another id is not this example.
  for (auto m = s.entries.lower_bound({k.epoch, k.position, 0, 0});
       m != s.entries.end() && std::get<0>(m->first) == k.epoch &&
       std::get<1>(m->first) == k.position;) {
    m = (std::get<2>(m->first) != k.id ||
         std::get<3>(m->first) != int(k.kind)) &&
                !m->second.taken
            ? ra.Erase(&s, m)
            : std::next(m);
  }
  const ReadAhead::Key key = EntryKeyOf(k);
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
  const ExampleSource& source = *s.source;
  ra.mu_.Unlock();
  absl::Status st = source.Read(k, bytes, label);
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
  if (!s.inline_starts.empty()) {
    oldest = std::min(oldest, *s.inline_starts.begin());
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
  auto describe = [&](const ReadAhead::Key& key) {
    return s.source->Describe(ExampleKeyOf(key));
  };
  const ReadAhead::Key* stuck_key = nullptr;
  const ReadAhead::Entry* stuck = nullptr;
  auto it = s.entries.find(item.waiting_for_);
  if (it != s.entries.end() && it->second.started && !it->second.done) {
    stuck_key = &it->first;
    stuck = &it->second;
  } else {
    // Not started: the stream's I/O threads are all in reads that have not
    // returned; the oldest of them is the one to name.
    for (const auto& [key, e] : s.entries) {
      if (e.started && !e.done &&
          (stuck == nullptr || e.start_ns < stuck->start_ns)) {
        stuck_key = &key;
        stuck = &e;
      }
    }
  }
  if (stuck != nullptr) {
    return absl::StrCat(
        "reading ", describe(*stuck_key), " has not returned for ",
        Seconds(now_ns - std::min(now_ns, stuck->start_ns)), " s");
  }
  if (ra.live_ == 0) {
    return absl::StrCat("no I/O thread could be started to read ",
                        describe(item.waiting_for_), " (", ra.thread_error_,
                        ")");
  }
  return absl::StrCat(
      "the read of ", describe(item.waiting_for_), " has waited ",
      Seconds(now_ns - std::min(now_ns, item.pending_since_ns())),
      " s for an I/O thread");
}

// ------------------------------------------------------------ I/O threads

void ReadAhead::RunRead(const Pick& pick, std::string* bytes) {
  StreamState* s = pick.stream;
  ReadAheadStats& st = s->stats;
  Entry& e = pick.demand ? s->entries.at(pick.key) : Insert(s, pick.key);
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
    e.step = pick.step;
    e.serial = next_serial_++;
    st.max_lane_share = std::max(st.max_lane_share, LaneShare(lane));
    if (const Entry* twin = Twin(*s, pick.key)) {
      // The same file is buffered under another key (an epoch that fits the
      // budget many times): its bytes, not another read.
      e.bytes = twin->bytes;
      e.label = twin->label;
      e.started = e.done = true;
      e.held = e.bytes.size();
      lane.held += e.held;
      st.max_held_bytes = std::max(st.max_held_bytes, lane.held);
      ++st.copies;
      NoteTotal();
      return;
    }
    // Counted at the mean size until it lands, at most the lane's share (a
    // first guess must not exceed a small budget on its own).
    e.held = std::min(MeanBytes(*s), LaneShare(lane));
    lane.held += e.held;
    st.max_held_bytes = std::max(st.max_held_bytes, lane.held);
    NoteTotal();
  }
  e.started = true;
  e.start_ns = MonotonicNanos();
  const uint64_t serial = e.serial, started = e.start_ns;
  s->read_starts.insert(started);
  ++s->in_flight;
  ++in_flight_;
  // This thread may not come back (a stalled mount): whatever else waits
  // must find another, idle or new.
  Pick next;
  if (idle_ == 0 && NextRead(&next)) Wake(false);
  // The state (and its source) stays while in_flight > 0, even after its
  // stream went.
  const ExampleSource& source = *s->source;
  // A buffer from an entry that went, unless this thread holds one: the
  // source replaces its contents (a buffer of the size it needs is used as
  // it is).
  if (bytes->capacity() == 0 && !spare_.empty()) {
    bytes->swap(spare_.back());
    spare_.pop_back();
  }
  mu_.Unlock();
  int64_t label = 0;
  const uint64_t waits = Waits();
  absl::Status status = source.Read(ExampleKeyOf(pick.key), bytes, &label);
  const bool waited = Waits() != waits;
  const uint64_t took = MonotonicNanos() - started;
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
  NoteReadTime(s, took, waited, !pick.demand);
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

}  // namespace batchd

// The read-ahead's reads, stream by stream; see readahead_reader.h.
#include "server/readahead_reader.h"

#include <algorithm>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/clock.h"

namespace batchd {

namespace {

// What an in-flight read counts for before a stream has read anything: about
// one ImageNet JPEG.
constexpr uint64_t kFirstGuessBytes = 128 << 10;

// A few spare buffers suffice: one per I/O thread's next read and a margin;
// a buffer larger than the cap goes back to the allocator.
constexpr size_t kSpareBuffers = 8;
constexpr size_t kMaxSpareBytes = size_t(16) << 20;

}  // namespace

ReadAheadReader::ReadAheadReader(const Options& options, ReadAheadLanes* lanes)
    : options_(options), lanes_(lanes) {}

ReadAheadReader::~ReadAheadReader() = default;

ReadAheadReader::StreamState* ReadAheadReader::State(StreamId stream) const {
  auto it = streams_.find(stream);
  return it == streams_.end() ? nullptr : it->second.get();
}

// ------------------------------------------------------------ streams

ReadAheadInline* ReadAheadReader::AddStream(
    ReadAheadStream* handle, std::shared_ptr<const ExampleSource> source) {
  auto state = std::make_unique<StreamState>();
  state->source = std::move(source);
  ReadAheadInline* path = &state->inline_path;
  streams_[handle] = std::move(state);
  return path;
}

void ReadAheadReader::Closing(StreamId stream) {
  if (StreamState* s = State(stream)) {
    s->demand.clear();
    s->inline_path.Allow(false);
  }
}

uint64_t ReadAheadReader::NewestReadStart(StreamId stream) const {
  const StreamState* s = State(stream);
  return s == nullptr || s->read_starts.empty() ? 0 : *s->read_starts.rbegin();
}

bool ReadAheadReader::RemoveStream(StreamId stream,
                                   std::shared_ptr<const ExampleSource>* gone) {
  auto it = streams_.find(stream);
  if (it == streams_.end()) return false;
  StreamState* s = it->second.get();
  bool landed = false;
  for (auto& [key, e] : s->entries) landed |= Land(&e);
  s->entries.clear();
  s->by_file.clear();
  s->demand.clear();
  s->removed = true;
  Reconsider(s);
  // A read still in flight (stuck in a stalled mount, perhaps) keeps the
  // state, and the source, until it returns.
  if (s->in_flight > 0) {
    orphaned_ += s->in_flight;
    removed_.push_back(std::move(it->second));
  } else {
    *gone = std::move(s->source);
  }
  streams_.erase(it);
  return landed;
}

bool ReadAheadReader::DropLane(StreamId stream, LaneId lane) {
  StreamState* s = State(stream);
  if (s == nullptr) return false;
  bool landed = false;
  for (auto e = s->entries.begin(); e != s->entries.end();) {
    if (e->second.lane == lane) {
      landed |= Land(&e->second);
      e = Erase(s, e);
    } else {
      ++e;
    }
  }
  return landed;
}

// ------------------------------------------------------------ entries

ReadAheadReader::Entry& ReadAheadReader::Insert(StreamState* s,
                                                const Key& key) {
  auto [it, added] = s->entries.try_emplace(key);
  if (added) {
    s->by_file.emplace(std::make_pair(std::get<2>(key), std::get<3>(key)), key);
    Reconsider(s);
  }
  return it->second;
}

const ReadAheadReader::Entry* ReadAheadReader::Twin(const StreamState& s,
                                                    const Key& key,
                                                    bool* in_flight) const {
  if (in_flight != nullptr) *in_flight = false;
  auto [lo, hi] =
      s.by_file.equal_range(std::make_pair(std::get<2>(key), std::get<3>(key)));
  for (auto f = lo; f != hi; ++f) {
    if (f->second == key) continue;
    auto e = s.entries.find(f->second);
    if (e == s.entries.end()) continue;
    if (e->second.done && e->second.status.ok() && !e->second.bytes.empty()) {
      return &e->second;
    }
    if (in_flight != nullptr && e->second.started && !e->second.done) {
      *in_flight = true;
    }
  }
  return nullptr;
}

std::map<ReadAheadReader::Key, ReadAheadReader::Entry>::iterator
ReadAheadReader::Erase(StreamState* s, std::map<Key, Entry>::iterator it) {
  lanes_->Uncharge(it->second.lane, it->second.held);
  it->second.held = 0;
  Land(&it->second);
  auto [lo, hi] = s->by_file.equal_range(
      std::make_pair(std::get<2>(it->first), std::get<3>(it->first)));
  for (auto f = lo; f != hi; ++f) {
    if (f->second == it->first) {
      s->by_file.erase(f);
      break;
    }
  }
  KeepSpare(&it->second.bytes);
  auto next = s->entries.erase(it);
  if (s->entries.empty()) Reconsider(s);
  return next;
}

bool ReadAheadReader::Land(Entry* e) {
  if (e->wait == nullptr) return false;
  e->wait->landed.store(true, std::memory_order_release);
  e->wait.reset();
  return true;
}

void ReadAheadReader::KeepSpare(std::string* buffer) {
  if (buffer->capacity() == 0 || buffer->capacity() > kMaxSpareBytes ||
      spare_.size() >= kSpareBuffers) {
    return;
  }
  spare_.emplace_back();
  spare_.back().swap(*buffer);
}

void ReadAheadReader::LendSpare(std::string* buffer) {
  // A buffer from an entry that went, unless the thread holds one: the
  // source replaces its contents (a buffer of the size it needs is used as
  // it is).
  if (buffer->capacity() == 0 && !spare_.empty()) {
    buffer->swap(spare_.back());
    spare_.pop_back();
  }
}

// ------------------------------------------------------------ inline or ahead

bool ReadAheadReader::ReadsInline(const StreamState& s) const {
  return options_.inline_read_ns != 0 && s.reads_inline;
}

bool ReadAheadReader::WorkerReadsInline(StreamState& s, uint64_t now_ns) {
  if (!ReadsInline(s)) return false;
  // A worker's read blocked many times the bound (50 ms for the daemon's):
  // the storage may have stopped answering, and the next reads go to the
  // I/O threads rather than hold another worker. A read merely kept from a
  // CPU on a busy machine is not blocked, however long it takes. Its
  // thread is looked at once it is older than the bound, then each time
  // its age doubles.
  const uint64_t bound = kInlineStallFactor * options_.inline_read_ns;
  for (WorkerReadInFlight& r : s.worker_reads) {
    if (r.returned.load(std::memory_order_acquire)) continue;
    const uint64_t age = now_ns - std::min(now_ns, r.start.wall_ns);
    if (age <= bound) continue;
    if (now_ns >= r.next_check_ns) {
      r.stalled = r.clock->BlockedNowNs(r.start, now_ns) > bound;
      r.next_check_ns = now_ns + age;
    }
    if (r.stalled) return false;
  }
  return !s.inline_path.Stalled(now_ns, bound);
}

bool ReadAheadReader::NoteReadTime(StreamState* s, uint64_t blocked_ns,
                                   bool ahead) {
  if (options_.inline_read_ns == 0) return false;
  bool again = false;
  if (blocked_ns <= options_.inline_read_ns) {
    if (ahead) s->fast_reads = std::min(s->fast_reads + 1, kFastReadsForInline);
    if (s->fast_reads == kFastReadsForInline) s->reads_inline = true;
  } else {
    // Slow storage: read ahead again.
    s->fast_reads -= std::min(s->fast_reads, kSlowReadCost);
    if (s->reads_inline && s->fast_reads < kLeaveInlineScore) {
      s->reads_inline = false;
      again = true;
    }
  }
  Reconsider(s);
  return again;
}

void ReadAheadReader::Reconsider(StreamState* s) {
  s->inline_path.Allow(ReadsInline(*s) && !s->removed &&
                       s->fast_reads == kFastReadsForInline &&
                       s->entries.empty());
}

bool ReadAheadReader::NoteSlowInlineRead(StreamId stream, uint64_t blocked_ns) {
  StreamState* s = State(stream);
  return s != nullptr && NoteReadTime(s, blocked_ns, /*ahead=*/true);
}

int ReadAheadReader::PerStreamThreads() const {
  int streams = 0;
  for (const auto& [id, s] : streams_) {
    streams += lanes_->HasLanes(id) || !s->demand.empty() ? 1 : 0;
  }
  return std::max(1, options_.io_threads / std::max(1, streams));
}

bool ReadAheadReader::ReadsInline(StreamId stream) const {
  const StreamState* s = State(stream);
  return s != nullptr && ReadsInline(*s);
}

bool ReadAheadReader::MayReadAhead(StreamId stream) const {
  StreamState* s = State(stream);
  // A stream may keep its share of the I/O threads busy, no more, so that
  // one stream's stalled storage cannot take every I/O thread from
  // another; reads that return at once buy nothing ahead: the workers
  // read them.
  return s != nullptr && s->in_flight < PerStreamThreads() && !ReadsInline(*s);
}

uint64_t ReadAheadReader::MeanBytes(StreamId stream) const {
  const StreamState* s = State(stream);
  if (s == nullptr || s->reads_done == 0) return kFirstGuessBytes;
  return std::max<uint64_t>(1, s->bytes_read / s->reads_done);
}

ReadAheadLanes::Streams::Seen ReadAheadReader::Check(StreamId stream,
                                                     const Key& key) const {
  const StreamState* s = State(stream);
  if (s == nullptr || s->entries.count(key) != 0) return Seen::kHave;
  bool twin_in_flight = false;
  if (Twin(*s, key, &twin_in_flight) == nullptr && twin_in_flight) {
    return Seen::kTwin;
  }
  return Seen::kNew;
}

int ReadAheadReader::StuckThreads() const {
  // A stream beyond its share now (one that had every thread before others
  // came, whose reads then stalled) holds threads that do not count.
  const int share = PerStreamThreads();
  int excess = 0;
  for (const auto& [id, s] : streams_) {
    excess += std::max(0, s->in_flight - share);
  }
  return orphaned_ + excess;
}

bool ReadAheadReader::Idle() const {
  if (in_flight_ > 0) return false;
  for (const auto& [id, s] : streams_) {
    if (!s->demand.empty()) return false;
  }
  return true;
}

// ------------------------------------------------------------ a worker's reads

void ReadAheadReader::TakeFor(ReadAheadItem* item, const Key& key, Entry* e,
                              StreamState* s) {
  if (!e->taken) {
    e->taken = true;
    item->taken_.push_back(key);
  }
  if (e->done && !e->demand && !e->counted && e->status.ok()) {
    e->counted = true;
    ++s->stats.hits;
  }
}

void ReadAheadReader::Demand(StreamState* s, ReadAheadItem* item,
                             const Key& key) {
  auto it = s->entries.find(key);
  if (it == s->entries.end()) {
    Entry& e = Insert(s, key);
    e.lane = item->lane_;
    e.step = item->step_;
    ++s->stats.sync_reads;
    it = s->entries.find(key);
  } else {
    // A read that failed is made once more, as the worker would have made
    // it without read-ahead; that result stands.
    Entry& e = it->second;
    e.retried = true;
    e.done = e.started = false;
    e.status = absl::OkStatus();
  }
  it->second.demand = true;
  it->second.serial = next_serial_++;
  s->demand.push_back(key);
}

ReadAheadReader::WorkerRead ReadAheadReader::Pending(StreamState* s,
                                                     ReadAheadItem* item,
                                                     const Key& key,
                                                     bool queued) {
  Entry& e = s->entries.at(key);
  TakeFor(item, key, &e, s);
  if (e.wait == nullptr) e.wait = std::make_shared<ReadAheadItem::Wait>();
  item->wait_ = e.wait;
  item->waiting_for_ = key;
  item->pending_since_ns_ = MonotonicNanos();
  WorkerRead r;
  r.kind = WorkerRead::kPending;
  r.queued = queued;
  return r;
}

ReadAheadReader::WorkerRead ReadAheadReader::SelfReading(StreamState* s,
                                                         StreamId stream,
                                                         bool inline_read) {
  // The worker reads, as without read-ahead, and nothing is kept (an item
  // whose reads are all inline never runs again). The state and its source
  // stay while the stream's handle lives, which outlives the read.
  ++s->stats.sync_reads;
  if (inline_read) ++s->stats.inline_reads;
  WorkerRead r;
  r.kind = WorkerRead::kSelf;
  r.self.source = s->source.get();
  r.self.stream = stream;
  r.self.demand = !inline_read;
  return r;
}

void ReadAheadReader::BeginSelfRead(SelfRead* read) {
  StreamState* s = State(read->stream);
  const ThreadClock& clock = ThreadClock::Self();
  read->start = clock.Sample();
  WorkerReadInFlight& r = s->worker_reads.emplace_back();
  r.start = read->start;
  r.clock = &clock;
  read->in_flight = std::prev(s->worker_reads.end());
  read->begun = true;
  s->inline_path.CountLockedRead(+1);
}

void ReadAheadReader::HandOver(Entry* e, std::string* bytes) {
  bytes->swap(e->bytes);
  e->bytes.clear();  // its capacity goes to a later read (KeepSpare)
  e->handed = true;
}

ReadAheadReader::WorkerRead ReadAheadReader::ForItem(
    StreamId stream, ReadAheadItem* item, const Key& key, std::string* bytes,
    int64_t* label, uint64_t now_ns) {
  StreamState* s = State(stream);
  auto it = s->entries.find(key);
  // Bytes handed over this attempt: nothing it reads may be pending.
  const bool final_attempt = item->handed_over_;
  WorkerRead r;
  if (it != s->entries.end() && it->second.done && !it->second.handed) {
    Entry& e = it->second;
    if (e.status.ok() || e.retried) {
      TakeFor(item, key, &e, s);
      r.status = e.status;
      if (!e.status.ok()) return r;
      // Copied while the item may run again (a later read of it pending)
      // and must find the same bytes; handed over once it may not.
      if (final_attempt) {
        HandOver(&e, bytes);
      } else {
        *bytes = e.bytes;
      }
      *label = e.label;
      return r;
    }
    if (final_attempt) {
      e.retried = true;
      TakeFor(item, key, &e, s);
      r = SelfReading(s, stream, false);
      BeginSelfRead(&r.self);
      return r;
    }
    Demand(s, item, key);
    return Pending(s, item, key, true);
  }
  if (it != s->entries.end() && it->second.handed) {
    // Read twice in one attempt: the bytes went with the first read.
    r = SelfReading(s, stream, false);
    BeginSelfRead(&r.self);
    return r;
  }
  if (it == s->entries.end()) {
    const bool inline_read = WorkerReadsInline(*s, now_ns);
    if (inline_read || final_attempt) {
      r = SelfReading(s, stream, inline_read);
      BeginSelfRead(&r.self);
      return r;
    }
    Demand(s, item, key);
    return Pending(s, item, key, true);
  }
  if (final_attempt) {
    r.kind = WorkerRead::kWait;
    return r;
  }
  if (!it->second.demand) ++s->stats.waits;
  return Pending(s, item, key, false);
}

ReadAheadReader::WorkerRead ReadAheadReader::ForItemAll(
    StreamId stream, ReadAheadItem* item, const std::vector<ExampleKey>& keys,
    std::vector<std::string>* buffers, WorkerReads* results, Labels* labels,
    uint64_t now_ns) {
  StreamState* s = State(stream);
  results->assign(keys.size(), WorkerRead());
  labels->assign(keys.size(), 0);
  // First, whether every example is there (or read inline): the first that
  // is not makes the item pending, as a read of it would, and nothing is
  // given; the examples before it stay with the item.
  for (size_t i = 0; i < keys.size(); ++i) {
    const Key key = EntryKeyOf(keys[i]);
    auto it = s->entries.find(key);
    const bool inline_read =
        it == s->entries.end() && WorkerReadsInline(*s, now_ns);
    const bool there = it != s->entries.end() && it->second.done &&
                       !it->second.handed &&
                       (it->second.status.ok() || it->second.retried);
    if (there || inline_read) continue;
    for (size_t j = 0; j < i; ++j) {
      auto held = s->entries.find(EntryKeyOf(keys[j]));
      if (held != s->entries.end())
        TakeFor(item, held->first, &held->second, s);
    }
    if (it == s->entries.end() || it->second.done) {
      Demand(s, item, key);
      return Pending(s, item, key, true);
    }
    if (!it->second.demand) ++s->stats.waits;
    return Pending(s, item, key, false);
  }
  // Then each is given: the item will not run again for want of bytes, so
  // they are handed over (a key listed twice is copied but the last time).
  // The worker's own reads begin one at a time (the first here).
  bool begun = false;
  for (size_t i = 0; i < keys.size(); ++i) {
    const Key key = EntryKeyOf(keys[i]);
    auto it = s->entries.find(key);
    WorkerRead& r = (*results)[i];
    if (it == s->entries.end()) {
      r = SelfReading(s, stream, true);
      if (!begun) BeginSelfRead(&r.self);
      begun = true;
      continue;
    }
    Entry& e = it->second;
    TakeFor(item, key, &e, s);
    r.status = e.status;
    if (!e.status.ok()) continue;
    const bool again =
        std::find(keys.begin() + i + 1, keys.end(), keys[i]) != keys.end();
    if (again) {
      (*buffers)[i] = e.bytes;
    } else {
      HandOver(&e, &(*buffers)[i]);
      item->handed_over_ = true;
    }
    (*labels)[i] = e.label;
  }
  return WorkerRead();
}

bool ReadAheadReader::EndSelfRead(const SelfRead& read, uint64_t blocked_ns) {
  StreamState* s = State(read.stream);
  if (read.begun) {
    s->worker_reads.erase(read.in_flight);
    s->inline_path.CountLockedRead(-1);
  }
  return NoteReadTime(s, blocked_ns, /*ahead=*/!read.demand);
}

bool ReadAheadReader::FinishItem(ReadAheadItem* item) {
  StreamState* s = State(item->stream_);
  if (s == nullptr) return false;
  for (const Key& k : item->taken_) {
    auto it = s->entries.find(k);
    if (it != s->entries.end()) Erase(s, it);
  }
  s->stats.io_wait_ns += item->waited_ns_;
  return true;
}

bool ReadAheadReader::Forgo(StreamId stream, const Key& key) {
  StreamState* s = State(stream);
  if (s == nullptr) return false;
  auto it = s->entries.find(key);
  if (it == s->entries.end() || it->second.taken) return false;
  Erase(s, it);
  return true;
}

// ------------------------------------------------------------ outside items

bool ReadAheadReader::InFlight(StreamId stream, const Key& key,
                               bool count_wait) {
  StreamState* s = State(stream);
  // What was read for this place under another id is not this example.
  const uint64_t epoch = std::get<0>(key), position = std::get<1>(key);
  for (auto m = s->entries.lower_bound({epoch, position, 0, 0});
       m != s->entries.end() && std::get<0>(m->first) == epoch &&
       std::get<1>(m->first) == position;) {
    m = (std::get<2>(m->first) != std::get<2>(key) ||
         std::get<3>(m->first) != std::get<3>(key)) &&
                !m->second.taken
            ? Erase(s, m)
            : std::next(m);
  }
  auto it = s->entries.find(key);
  const bool in_flight = it != s->entries.end() && !it->second.done;
  if (in_flight && count_wait) ++s->stats.waits;
  return in_flight;
}

bool ReadAheadReader::TakeOutsideItem(StreamId stream, const Key& key,
                                      std::string* bytes, int64_t* label,
                                      bool* dropped) {
  StreamState* s = State(stream);
  auto it = s->entries.find(key);
  *dropped = false;
  if (it == s->entries.end() || it->second.taken) return false;
  *dropped = true;
  Entry& e = it->second;
  const bool ok = e.status.ok();
  if (ok) {
    bytes->swap(e.bytes);
    *label = e.label;
    ++s->stats.hits;
  }
  Erase(s, it);
  return ok;
}

const ExampleSource* ReadAheadReader::SyncRead(StreamId stream) {
  StreamState* s = State(stream);
  ++s->stats.sync_reads;
  return s->source.get();
}

void ReadAheadReader::AddIoWait(StreamId stream, uint64_t ns) {
  if (StreamState* s = State(stream)) s->stats.io_wait_ns += ns;
}

// ------------------------------------------------------------ the I/O threads

bool ReadAheadReader::NextDemand(Pick* pick) {
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
    pick->stream = it->first;
    pick->key = s->demand.front();
    pick->lane = e.lane;
    pick->step = e.step;
    pick->steps_ahead = 0;
    pick->demand = true;
    demand_round_robin_ = (demand_round_robin_ + i + 1) % n;
    return true;
  }
  return false;
}

bool ReadAheadReader::Start(const Pick& pick, Job* job) {
  StreamState* s = State(pick.stream);
  ReadAheadStats& st = s->stats;
  Entry& e = pick.demand ? s->entries.at(pick.key) : Insert(s, pick.key);
  if (pick.demand) {
    s->demand.pop_front();  // NextDemand picked the front
  } else {
    st.min_steps_ahead = st.reads_issued == 0
                             ? pick.steps_ahead
                             : std::min(st.min_steps_ahead, pick.steps_ahead);
    st.max_steps_ahead = std::max(st.max_steps_ahead, pick.steps_ahead);
    ++st.reads_issued;
    e.lane = pick.lane;
    e.step = pick.step;
    e.serial = next_serial_++;
    const uint64_t share = lanes_->Share(pick.lane);
    st.max_lane_share = std::max(st.max_lane_share, share);
    if (const Entry* twin = Twin(*s, pick.key)) {
      // The same file is buffered under another key (an epoch that fits the
      // budget many times): its bytes, not another read.
      e.bytes = twin->bytes;
      e.label = twin->label;
      e.started = e.done = true;
      e.held = e.bytes.size();
      st.max_held_bytes =
          std::max(st.max_held_bytes, lanes_->Charge(pick.lane, e.held));
      ++st.copies;
      return false;
    }
    // Counted at the mean size until it lands, at most the lane's share (a
    // first guess must not exceed a small budget on its own).
    e.held = std::min(MeanBytes(pick.stream), share);
    st.max_held_bytes =
        std::max(st.max_held_bytes, lanes_->Charge(pick.lane, e.held));
  }
  e.started = true;
  e.start_ns = MonotonicNanos();
  s->read_starts.insert(e.start_ns);
  ++s->in_flight;
  ++in_flight_;
  job->stream = s;
  job->key = pick.key;
  job->serial = e.serial;
  job->started_ns = e.start_ns;
  job->demand = pick.demand;
  // The state (and its source) stays while in_flight > 0, even after its
  // stream went.
  job->source = s->source.get();
  return true;
}

void ReadAheadReader::Finish(const Job& job, absl::Status status,
                             std::string* bytes, int64_t label,
                             uint64_t blocked_ns, bool* landed, bool* wake_all,
                             std::shared_ptr<const ExampleSource>* gone) {
  StreamState* s = job.stream;
  s->read_starts.erase(s->read_starts.find(job.started_ns));
  --s->in_flight;
  --in_flight_;
  *landed = *wake_all = false;
  if (s->removed) {
    --orphaned_;
    if (s->in_flight == 0) {
      *gone = std::move(s->source);
      removed_.erase(std::remove_if(removed_.begin(), removed_.end(),
                                    [s](const std::unique_ptr<StreamState>& r) {
                                      return r.get() == s;
                                    }),
                     removed_.end());
    }
    return;
  }
  *wake_all = NoteReadTime(s, blocked_ns, !job.demand);
  Landed(s, job, std::move(status), bytes, label, landed);
}

void ReadAheadReader::Landed(StreamState* s, const Job& job,
                             absl::Status status, std::string* bytes,
                             int64_t label, bool* landed) {
  auto it = s->entries.find(job.key);
  if (it == s->entries.end() || it->second.serial != job.serial ||
      it->second.done) {
    return;  // its lane, or its item, went meanwhile
  }
  Entry& e = it->second;
  e.done = true;
  lanes_->Uncharge(e.lane, e.held);
  e.held = 0;
  if (status.ok()) {
    // What a worker asked for now is outside the budget, as a worker's
    // own read would be: bounded by the items in progress.
    e.held = e.demand ? 0 : bytes->size();
    s->stats.max_held_bytes =
        std::max(s->stats.max_held_bytes, lanes_->Charge(e.lane, e.held));
    s->bytes_read += bytes->size();
    ++s->reads_done;
    e.bytes.swap(*bytes);
    e.label = label;
  } else {
    ++s->stats.failed_reads;
    e.status = std::move(status);
  }
  *landed = Land(&e);
}

// ------------------------------------------------------------ figures

ReadAheadStats ReadAheadReader::Stats(StreamId stream) const {
  const StreamState& s = *State(stream);
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
  for (const WorkerReadInFlight& r : s.worker_reads) {
    oldest = std::min(oldest, r.start.wall_ns);
  }
  if (const uint64_t start = s.inline_path.OldestStart(); start != 0) {
    oldest = std::min(oldest, start);
  }
  out.unlocked_reads = s.inline_path.reads();
  out.sync_reads += out.unlocked_reads;
  out.inline_reads += out.unlocked_reads;
  out.oldest_read_seconds = double(now - std::min(now, oldest)) / 1e9;
  out.budget_bytes = lanes_->StreamShare(stream);
  return out;
}

std::string ReadAheadReader::StallReason(
    StreamId stream, const ReadAheadItem& item, uint64_t now_ns, int io_threads,
    const std::string& thread_error) const {
  const StreamState& s = *State(stream);
  auto describe = [&](const Key& key) {
    return s.source->Describe(ExampleKeyOf(key));
  };
  auto seconds = [](uint64_t ns) {
    return absl::StrFormat("%.1f", double(ns) / 1e9);
  };
  const Key* stuck_key = nullptr;
  const Entry* stuck = nullptr;
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
        seconds(now_ns - std::min(now_ns, stuck->start_ns)), " s");
  }
  if (io_threads == 0) {
    return absl::StrCat("no I/O thread could be started to read ",
                        describe(item.waiting_for_), " (", thread_error, ")");
  }
  return absl::StrCat(
      "the read of ", describe(item.waiting_for_), " has waited ",
      seconds(now_ns - std::min(now_ns, item.pending_since_ns())),
      " s for an I/O thread");
}

}  // namespace batchd

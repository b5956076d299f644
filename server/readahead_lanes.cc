// The read-ahead's lanes, their order and the budget: which read to issue
// next, how many bytes each lane may hold, when a stream's reads return at
// once. See readahead.h.
#include <algorithm>

#include "base/clock.h"
#include "server/readahead.h"

namespace batchd {

namespace {

// What an in-flight read counts for before a stream has read anything: about
// one ImageNet JPEG.
constexpr uint64_t kFirstGuessBytes = 128 << 10;

// Steps a lane may look at in one pick before it yields to the next lane
// (an evaluation stream's padding steps hold no example).
constexpr int kEmptyStepsPerPick = 4;

}  // namespace

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

ReadAhead::Entry& ReadAhead::Insert(StreamState* s, const Key& key) {
  auto [it, added] = s->entries.try_emplace(key);
  if (added) {
    s->by_file.emplace(std::make_pair(std::get<2>(key), std::get<3>(key)), key);
  }
  return it->second;
}

const ReadAhead::Entry* ReadAhead::Twin(const StreamState& s, const Key& key,
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

std::map<ReadAhead::Key, ReadAhead::Entry>::iterator ReadAhead::Erase(
    StreamState* s, std::map<Key, Entry>::iterator it) {
  auto lane = lanes_.find(it->second.lane);
  if (lane != lanes_.end()) Release(&lane->second, &it->second);
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
  return s->entries.erase(it);
}

void ReadAhead::KeepSpare(std::string* buffer) {
  // A few buffers suffice: one per I/O thread's next read and a margin; a
  // buffer larger than the cap goes back to the allocator.
  constexpr size_t kSpareBuffers = 8;
  constexpr size_t kMaxSpareBytes = size_t(16) << 20;
  if (buffer->capacity() == 0 || buffer->capacity() > kMaxSpareBytes ||
      spare_.size() >= kSpareBuffers) {
    return;
  }
  spare_.emplace_back();
  spare_.back().swap(*buffer);
}

bool ReadAhead::ReadsInline(const StreamState& s, uint64_t now_ns) const {
  if (options_.inline_read_ns == 0 || !s.reads_inline) return false;
  // An inline read that has not returned within many times the bound (1 ms
  // for the daemon's): the
  // storage stopped answering at once (a read merely kept from a CPU on a
  // busy machine returns within it).
  return s.inline_starts.empty() ||
         now_ns - *s.inline_starts.begin() <=
             kInlineStallFactor * options_.inline_read_ns;
}

void ReadAhead::NoteReadTime(StreamState* s, uint64_t ns, bool waited,
                             bool ahead) {
  if (options_.inline_read_ns == 0) return;
  if (!waited || ns <= options_.inline_read_ns) {
    if (ahead) s->fast_reads = std::min(s->fast_reads + 1, kFastReadsForInline);
    if (s->fast_reads == kFastReadsForInline) s->reads_inline = true;
    return;
  }
  // Slow storage: read ahead again.
  s->fast_reads -= std::min(s->fast_reads, kSlowReadCost);
  if (s->reads_inline && s->fast_reads < kLeaveInlineScore) {
    s->reads_inline = false;
    Wake(true);
  }
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
  const uint64_t now = MonotonicNanos();
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
    // Reads that return at once buy nothing ahead: the workers read them.
    const bool ahead = !ReadsInline(*lane.stream, now);
    for (int tries = 0; ahead && room && threads_free && !lane.at_end &&
                        tries < kEmptyStepsPerPick;
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
      const Key k = EntryKeyOf(lane.keys[lane.next_index]);
      if (lane.stream->entries.count(k) != 0) {
        ++lane.next_index;  // already read (by an earlier lane, on demand)
        continue;
      }
      // The same file is being read under another key (an epoch earlier):
      // the lane goes on once it lands, with a copy of its bytes.
      bool twin_in_flight = false;
      if (Twin(*lane.stream, k, &twin_in_flight) == nullptr && twin_in_flight) {
        break;
      }
      *pick = {lane.stream, k, it->first, lane.next_step, false};
      round_robin_ = it->first;
      return true;
    }
    if (++it == lanes_.end()) it = lanes_.begin();
  } while (it != start);
  return false;
}

}  // namespace batchd

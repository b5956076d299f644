// The read-ahead stage; see readahead.h.
#include "server/readahead.h"

#include <algorithm>
#include <chrono>

#include "base/clock.h"

namespace batchd {

namespace {

// What an in-flight read counts for before a stream has read anything: about
// one ImageNet JPEG.
constexpr uint64_t kFirstGuessBytes = 128 << 10;

// Steps a lane may look at in one pick before it yields to the next lane
// (an evaluation stream's padding steps hold no example).
constexpr int kEmptyStepsPerPick = 4;

}  // namespace

ReadAheadStream::~ReadAheadStream() { owner_->RemoveStream(this); }

absl::Status ReadAheadStream::Read(uint64_t epoch, uint64_t position,
                                   uint64_t id, std::string* bytes,
                                   int64_t* label) {
  ReadAhead& ra = *owner_;
  const uint64_t start = MonotonicNanos();
  std::unique_lock<std::mutex> lock(ra.mu_);
  ReadAhead::StreamState& s = *ra.streams_.at(this);
  const auto key = std::make_pair(epoch, position);
  auto it = s.entries.find(key);
  if (it != s.entries.end() && !it->second.done) {
    ++s.stats.waits;
    ra.done_cv_.wait(lock, [&] {
      it = s.entries.find(key);
      return it == s.entries.end() || it->second.done;
    });
  }
  if (it != s.entries.end()) {
    ReadAhead::Entry& e = it->second;
    auto lane = ra.lanes_.find(e.lane);
    const bool ok = e.status.ok() && e.id == id;
    if (ok) {
      bytes->swap(e.bytes);
      *label = e.label;
      ++s.stats.hits;
    }
    if (lane != ra.lanes_.end()) {
      ra.Release(&lane->second, &e);
    }
    s.entries.erase(it);
    ra.work_cv_.notify_one();
    if (ok) {
      s.stats.io_wait_ns += MonotonicNanos() - start;
      return absl::OkStatus();
    }
  }
  // Not read ahead, or the read ahead failed: read now, as without
  // read-ahead, so that the error is the source's own.
  ++s.stats.sync_reads;
  lock.unlock();
  absl::Status st = read_(id, bytes, label);
  const uint64_t waited = MonotonicNanos() - start;
  lock.lock();
  s.stats.io_wait_ns += waited;
  return st;
}

ReadAheadStats ReadAheadStream::stats() const {
  ReadAhead& ra = *owner_;
  std::lock_guard<std::mutex> lock(ra.mu_);
  const ReadAhead::StreamState& s =
      *ra.streams_.at(const_cast<ReadAheadStream*>(this));
  ReadAheadStats out = s.stats;
  out.depth_examples = s.entries.size();
  for (const auto& [key, e] : s.entries) {
    (e.done ? out.bytes_buffered : out.bytes_in_flight) += e.held;
  }
  if (!s.lanes.empty()) {
    out.budget_bytes = ra.LaneShare(ra.lanes_.at(s.lanes[0])) * s.lanes.size();
  }
  return out;
}

ReadAhead::ReadAhead(const Options& options) : options_(options) {
  if (!enabled()) return;
  for (int i = 0; i < std::max(1, options_.io_threads); ++i) {
    threads_.emplace_back([this] { IoLoop(); });
  }
}

ReadAhead::~ReadAhead() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  for (std::thread& t : threads_) t.join();
}

std::shared_ptr<ReadAheadStream> ReadAhead::AddStream(const std::string& name,
                                                      ExampleReadFn read) {
  if (!enabled() || !read) return nullptr;
  std::shared_ptr<ReadAheadStream> handle(
      new ReadAheadStream(this, name, std::move(read)));
  auto state = std::make_unique<StreamState>();
  state->handle = handle.get();
  std::lock_guard<std::mutex> lock(mu_);
  streams_[handle.get()] = std::move(state);
  return handle;
}

void ReadAhead::RemoveStream(ReadAheadStream* handle) {
  std::unique_lock<std::mutex> lock(mu_);
  auto it = streams_.find(handle);
  if (it == streams_.end()) return;
  StreamState* s = it->second.get();
  for (LaneId id : std::vector<LaneId>(s->lanes)) {
    lanes_.erase(id);
  }
  s->lanes.clear();
  s->entries.clear();
  // A read in flight calls the stream's read function, which belongs to the
  // workload: wait for it before the workload may go.
  done_cv_.wait(lock, [&] { return s->in_flight == 0; });
  streams_.erase(it);
}

ReadAhead::LaneId ReadAhead::AddLane(
    const std::shared_ptr<ReadAheadStream>& stream, LaneOrderFn order,
    uint64_t first_step) {
  if (stream == nullptr) return 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    StreamState* s = streams_.at(stream.get()).get();
    const LaneId id = next_lane_++;
    Lane& lane = lanes_[id];
    lane.stream = s;
    lane.order = std::move(order);
    lane.first_step = first_step;
    lane.next_step = first_step;
    s->lanes.push_back(id);
  }
  work_cv_.notify_all();
  return next_lane_ - 1;
}

void ReadAhead::RemoveLane(LaneId id) {
  if (id == 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = lanes_.find(id);
  if (it == lanes_.end()) return;
  StreamState* s = it->second.stream;
  for (auto e = s->entries.begin(); e != s->entries.end();) {
    e = e->second.lane == id ? s->entries.erase(e) : std::next(e);
  }
  s->lanes.erase(std::remove(s->lanes.begin(), s->lanes.end(), id),
                 s->lanes.end());
  lanes_.erase(it);
  work_cv_.notify_all();  // the other lanes' shares grew
  done_cv_.notify_all();  // a worker may wait for an entry just dropped
}

void ReadAhead::Decoding(LaneId id, uint64_t step) {
  if (id == 0) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = lanes_.find(id);
    if (it == lanes_.end()) return;
    Lane& lane = it->second;
    if (!lane.any_decoding || step > lane.decoding) lane.decoding = step;
    lane.any_decoding = true;
    // A step the order did not know may be known now (a packed stream's
    // epoch counted since).
    lane.at_end = false;
  }
  work_cv_.notify_all();
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

void ReadAhead::NoteTotal() {
  uint64_t total = 0;
  for (const auto& [id, lane] : lanes_) total += lane.held;
  max_total_held_ = std::max(max_total_held_, total);
}

uint64_t ReadAhead::max_total_held_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return max_total_held_;
}

void ReadAhead::Release(Lane* lane, Entry* e) {
  lane->held -= std::min(lane->held, e->held);
  e->held = 0;
}

bool ReadAhead::NextRead(LaneId* lane_id, ReadAheadKey* key, uint64_t* step) {
  if (lanes_.empty()) return false;
  uint64_t total = 0;
  for (const auto& [id, lane] : lanes_) total += lane.held;
  // A stream may keep its share of the I/O threads busy, no more, so that
  // one stream's stalled storage cannot take every I/O thread from another.
  uint64_t streams = 0;
  for (const auto& [handle, s] : streams_) streams += s->lanes.empty() ? 0 : 1;
  const int per_stream =
      std::max(1, int(threads_.size() / std::max<uint64_t>(1, streams)));
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
    for (int tries = 0; room && threads_free && !lane.at_end && tries < kEmptyStepsPerPick;
         ++tries) {
      // Only steps after the one the workers decode: those are read by them.
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
      if (lane.stream->entries.count({k.epoch, k.position}) != 0) {
        ++lane.next_index;  // already read ahead (by an earlier lane)
        continue;
      }
      *lane_id = it->first;
      *key = k;
      *step = lane.next_step;
      round_robin_ = it->first;
      return true;
    }
    if (++it == lanes_.end()) it = lanes_.begin();
  } while (it != start);
  return false;
}

void ReadAhead::IoLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  std::string bytes;
  while (true) {
    LaneId lane_id = 0;
    ReadAheadKey key;
    uint64_t step = 0;
    while (!stop_ && !NextRead(&lane_id, &key, &step)) work_cv_.wait(lock);
    if (stop_) return;
    Lane& lane = lanes_.at(lane_id);
    ++lane.next_index;
    StreamState* s = lane.stream;
    const uint64_t ahead =
        lane.any_decoding ? step - lane.decoding : step + 1 - lane.first_step;
    ReadAheadStats& st = s->stats;
    st.min_steps_ahead =
        st.reads_issued == 0 ? ahead : std::min(st.min_steps_ahead, ahead);
    st.max_steps_ahead = std::max(st.max_steps_ahead, ahead);
    ++st.reads_issued;
    const auto k = std::make_pair(key.epoch, key.position);
    Entry& e = s->entries[k];
    e.lane = lane_id;
    e.id = key.id;
    // Counted at the mean size until it lands, at most the lane's share (a
    // first guess must not exceed a small budget on its own).
    e.held = std::min(MeanBytes(*s), LaneShare(lane));
    lane.held += e.held;
    st.max_held_bytes = std::max(st.max_held_bytes, lane.held);
    NoteTotal();
    st.max_lane_share = std::max(st.max_lane_share, LaneShare(lane));
    ++s->in_flight;
    ++in_flight_;
    // The stream waits for in_flight to drop, so its function outlives this.
    const ExampleReadFn& read = s->handle->read_;
    lock.unlock();
    int64_t label = 0;
    absl::Status status = read(key.id, &bytes, &label);
    lock.lock();
    --s->in_flight;
    --in_flight_;
    auto it = s->entries.find(k);
    auto lane_it = lanes_.find(lane_id);
    if (it != s->entries.end() && it->second.lane == lane_id &&
        !it->second.done && lane_it != lanes_.end()) {
      Entry& done = it->second;
      Lane& l = lane_it->second;
      done.done = true;
      Release(&l, &done);
      if (status.ok()) {
        done.held = bytes.size();
        l.held += done.held;
        s->bytes_read += bytes.size();
        ++s->reads_done;
        done.bytes.swap(bytes);
        done.label = label;
        st.max_held_bytes = std::max(st.max_held_bytes, l.held);
        NoteTotal();
      } else {
        ++st.failed_reads;
        done.status = std::move(status);
      }
    }
    done_cv_.notify_all();
  }
}

void ReadAhead::WaitIdleForTest() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    LaneId lane;
    ReadAheadKey key;
    uint64_t step;
    if (in_flight_ == 0 && !NextRead(&lane, &key, &step)) return;
    work_cv_.notify_all();
    done_cv_.wait_for(lock, std::chrono::milliseconds(5));
  }
}

}  // namespace batchd

// The read-ahead's lanes, their order and the byte budget; see
// readahead_lanes.h.
#include "server/readahead_lanes.h"

#include <algorithm>
#include <utility>

namespace batchd {

namespace {

// Keys a lane may look at in one pick before it yields to the next lane
// (an evaluation stream's padding steps hold no example).
constexpr int kKeysPerPick = 4;

}  // namespace

ReadAheadLanes::LaneId ReadAheadLanes::Add(StreamId stream, LaneOrderFn order,
                                           uint64_t first_step) {
  const LaneId id = next_lane_++;
  Lane& lane = lanes_[id];
  lane.stream = stream;
  lane.order = std::move(order);
  lane.first_step = first_step;
  lane.next_step = first_step;
  ++lanes_per_stream_[stream];
  return id;
}

bool ReadAheadLanes::Remove(LaneId id) {
  auto it = lanes_.find(id);
  if (it == lanes_.end()) return false;
  total_held_ -= std::min(total_held_, it->second.held);
  auto per = lanes_per_stream_.find(it->second.stream);
  if (--per->second == 0) lanes_per_stream_.erase(per);
  lanes_.erase(it);
  return true;
}

std::vector<ReadAheadLanes::LaneId> ReadAheadLanes::LanesOf(
    StreamId stream) const {
  std::vector<LaneId> out;
  for (const auto& [id, lane] : lanes_) {
    if (lane.stream == stream) out.push_back(id);
  }
  return out;
}

bool ReadAheadLanes::HasLanes(StreamId stream) const {
  return lanes_per_stream_.count(stream) != 0;
}

ReadAheadLanes::StreamId ReadAheadLanes::StreamOf(LaneId id) const {
  auto it = lanes_.find(id);
  return it == lanes_.end() ? nullptr : it->second.stream;
}

bool ReadAheadLanes::Decoding(LaneId id, uint64_t step) {
  auto it = lanes_.find(id);
  if (it == lanes_.end()) return false;
  Lane& lane = it->second;
  if (!lane.any_decoding || step > lane.decoding) lane.decoding = step;
  lane.any_decoding = true;
  // A step the order did not know may be known now (a packed stream's
  // epoch counted since).
  lane.at_end = false;
  return true;
}

uint64_t ReadAheadLanes::ShareOf(const Lane& lane) const {
  // Evenly between the streams that have lanes, then between a stream's
  // lanes.
  auto per = lanes_per_stream_.find(lane.stream);
  const uint64_t lanes = per == lanes_per_stream_.end() ? 1 : per->second;
  return budget_bytes_ / std::max<size_t>(1, lanes_per_stream_.size()) /
         std::max<uint64_t>(1, lanes);
}

uint64_t ReadAheadLanes::Share(LaneId id) const {
  auto it = lanes_.find(id);
  return it == lanes_.end() ? 0 : ShareOf(it->second);
}

uint64_t ReadAheadLanes::StreamShare(StreamId stream) const {
  auto per = lanes_per_stream_.find(stream);
  if (per == lanes_per_stream_.end()) return 0;
  return budget_bytes_ / lanes_per_stream_.size() / per->second * per->second;
}

uint64_t ReadAheadLanes::Charge(LaneId id, uint64_t bytes) {
  auto it = lanes_.find(id);
  if (it == lanes_.end()) return 0;
  it->second.held += bytes;
  total_held_ += bytes;
  max_total_held_ = std::max(max_total_held_, total_held_);
  return it->second.held;
}

void ReadAheadLanes::Uncharge(LaneId id, uint64_t bytes) {
  auto it = lanes_.find(id);
  if (it == lanes_.end()) return;
  const uint64_t freed = std::min(it->second.held, bytes);
  it->second.held -= freed;
  total_held_ -= freed;
}

bool ReadAheadLanes::NextKey(const Streams& streams, Lane& lane,
                             ReadAheadEntryKey* key) {
  for (int tries = 0; !lane.at_end && tries < kKeysPerPick; ++tries) {
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
        return false;
      }
      lane.have_keys = true;
      lane.next_index = 0;
    }
    if (lane.next_index >= lane.keys.size()) {
      ++lane.next_step;
      lane.have_keys = false;
      continue;
    }
    const ReadAheadEntryKey k = EntryKeyOf(lane.keys[lane.next_index]);
    switch (streams.Check(lane.stream, k)) {
      case Streams::Seen::kHave:
        ++lane.next_index;  // already read (by an earlier lane, on demand)
        continue;
      case Streams::Seen::kTwin:
        // The same file is being read under another key (an epoch
        // earlier): the lane goes on once it lands, with a copy.
        return false;
      case Streams::Seen::kNew:
        *key = k;
        return true;
    }
  }
  return false;
}

bool ReadAheadLanes::Next(const Streams& streams, Pick* pick) {
  if (lanes_.empty()) return false;
  const uint64_t total = total_held_;
  auto start = lanes_.upper_bound(round_robin_);
  if (start == lanes_.end()) start = lanes_.begin();
  auto it = start;
  do {
    Lane& lane = it->second;
    const uint64_t share = ShareOf(lane);
    const uint64_t need = std::min(streams.MeanBytes(lane.stream), share);
    // Within the lane's share (one example always, so that a file larger
    // than the share still goes ahead) and, while shares change as ranks
    // come and go, within the whole budget.
    const bool room = (lane.held == 0 || lane.held + need <= share) &&
                      (total == 0 || total + need <= budget_bytes_);
    ReadAheadEntryKey key;
    if (room && !lane.at_end && streams.MayReadAhead(lane.stream) &&
        NextKey(streams, lane, &key)) {
      pick->stream = lane.stream;
      pick->key = key;
      pick->lane = it->first;
      pick->step = lane.next_step;
      pick->steps_ahead = lane.any_decoding
                              ? lane.next_step - lane.decoding
                              : lane.next_step + 1 - lane.first_step;
      round_robin_ = it->first;
      return true;
    }
    if (++it == lanes_.end()) it = lanes_.begin();
  } while (it != start);
  return false;
}

void ReadAheadLanes::Issued(const Pick& pick) {
  auto it = lanes_.find(pick.lane);
  if (it != lanes_.end()) ++it->second.next_index;
}

}  // namespace batchd

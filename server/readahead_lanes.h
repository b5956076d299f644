// The read-ahead's lanes and its byte budget (server/readahead.h): one lane
// per (stream, rank) producer, holding that rank's order of examples (step
// by step), the step its workers decode now and the next example to read
// ahead; which read ahead to issue next (the lanes in turn, only steps
// after the one decoded, each lane within its share of the budget); and the
// bytes each lane holds against that share.
//
// The budget is split evenly between the streams that have lanes and,
// within a stream, between its lanes; a lane may always hold one example
// while the whole budget has room, so that a file larger than its share
// still goes ahead.
//
// Thread safety: not thread-safe. The ReadAhead that owns it calls it under
// its lock (a member guarded by that lock).
#ifndef BATCHD_SERVER_READAHEAD_LANES_H_
#define BATCHD_SERVER_READAHEAD_LANES_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <vector>

#include "server/readahead_types.h"

namespace batchd {

class ReadAheadLanes {
 public:
  using LaneId = uint64_t;
  using StreamId = const ReadAheadStream*;

  // What the lanes ask of the streams while they pick a read (the
  // read-ahead's reader answers).
  class Streams {
   public:
    enum class Seen {
      kNew,   // neither read nor being read: issue it
      kHave,  // read, or being read, under this key: skip it
      kTwin,  // the same file is being read under another key: wait
    };
    // Whether reads ahead may be issued for `stream` now: it has I/O
    // threads to spare, and its reads do not return at once.
    virtual bool MayReadAhead(StreamId stream) const = 0;
    // What an example of `stream` is taken to hold before it lands.
    virtual uint64_t MeanBytes(StreamId stream) const = 0;
    virtual Seen Check(StreamId stream, const ReadAheadEntryKey& key) const = 0;

   protected:
    ~Streams() = default;
  };

  // A read ahead picked to issue.
  struct Pick {
    StreamId stream = nullptr;
    ReadAheadEntryKey key;
    LaneId lane = 0;
    uint64_t step = 0;
    uint64_t steps_ahead = 0;  // after the step decoded (or the first)
  };

  // `budget_bytes` over all lanes.
  explicit ReadAheadLanes(uint64_t budget_bytes)
      : budget_bytes_(budget_bytes) {}

  // A lane of `stream`; reads start at `first_step`.
  LaneId Add(StreamId stream, LaneOrderFn order, uint64_t first_step);
  // Drops the lane (its held bytes with it); false if it is not a lane.
  bool Remove(LaneId id);
  // Every lane of `stream`.
  std::vector<LaneId> LanesOf(StreamId stream) const;
  bool HasLanes(StreamId stream) const;
  bool Contains(LaneId id) const { return lanes_.count(id) != 0; }
  // The stream of lane `id`; null if it is not a lane.
  StreamId StreamOf(LaneId id) const;
  // The lane's workers decode `step` from now on: its reads ahead start
  // after it. False if it is not a lane.
  bool Decoding(LaneId id, uint64_t step);

  // The next read ahead (round-robin over lanes), within the budget; false
  // when none may be issued now.
  bool Next(const Streams& streams, Pick* pick);
  // `pick` is issued: its lane moves past it.
  void Issued(const Pick& pick);

  // The lane holds `bytes` more (buffered, or estimated in flight), or
  // fewer; Charge returns what the lane holds then. Nothing for a lane
  // that went.
  uint64_t Charge(LaneId id, uint64_t bytes);
  void Uncharge(LaneId id, uint64_t bytes);

  // A lane's share of the budget, and the sum of the shares of `stream`'s
  // lanes.
  uint64_t Share(LaneId id) const;
  uint64_t StreamShare(StreamId stream) const;
  // The most bytes all lanes held at once (at most the budget).
  uint64_t max_total_held() const { return max_total_held_; }

 private:
  struct Lane {
    StreamId stream = nullptr;
    LaneOrderFn order;
    uint64_t decoding = 0;  // latest step handed to workers
    bool any_decoding = false;
    uint64_t first_step = 0;  // where the lane began
    uint64_t next_step = 0;   // the step being issued
    size_t next_index = 0;    // within keys
    std::vector<ReadAheadKey> keys;
    bool have_keys = false;
    bool at_end = false;  // order said false; cleared by Decoding
    uint64_t held = 0;    // bytes buffered + estimated in flight
  };

  uint64_t ShareOf(const Lane& lane) const;
  // The lane's next key to issue (moving past keys `streams` has, and over
  // empty steps, at most a few); false when the lane waits.
  bool NextKey(const Streams& streams, Lane& lane, ReadAheadEntryKey* key);

  const uint64_t budget_bytes_;
  std::map<LaneId, Lane> lanes_;
  std::map<StreamId, uint64_t> lanes_per_stream_;  // streams with lanes
  LaneId next_lane_ = 1;
  LaneId round_robin_ = 0;
  uint64_t total_held_ = 0;  // over all lanes
  uint64_t max_total_held_ = 0;
};

}  // namespace batchd

#endif  // BATCHD_SERVER_READAHEAD_LANES_H_

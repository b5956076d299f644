// Sharing fills across streams of the same content (docs/design.md,
// "Sharing fills across jobs"): streams whose global batches must be the
// same bytes (ShareKeyOf, server/share_key.h) form a group, and an item
// (an example, a packed row) filled for one of them is copied into the
// rings of the others, at each stream's own step, instead of being decoded
// again. The unit is the item, keyed by (epoch, position in the epoch's
// item order): the same for every world size (a rank's slice is a range of
// the global batch's items), start step, resume and cursor.
//
// No lockstep. Fills are kept in a window bounded in bytes (the daemon's
// --share-window-bytes, shared evenly between the groups that share), and
// no stream ever waits for another stream:
//   - a worker that finds the item in the window copies it (kCopied);
//   - one that finds another worker filling it right now puts its chunk
//     back and serves other work until that fill lands or is given up
//     (kWait): it waits for a worker of the daemon, never for a job, and
//     a worker always finishes what it started;
//   - otherwise it fills the item itself (kFill), and keeps the fill in the
//     window (a claim) only when another stream of the group may still
//     want it: one whose oldest unpublished step is at or before the
//     item's. A stream alone in its group never touches the window.
// A fill is dropped once every stream that may want it took it; when the
// window is full the oldest fill goes first, so the window follows the
// streams that lead, and a stream further behind than the window (paused,
// slow, started later) fills for itself, as it would alone. A stream whose
// ranks are all gone (closed, killed) wants nothing: what only it would
// have taken is dropped at once.
//
// Bytes are exact: a fill is the workload's FillItem of the same ItemRef
// (the key covers every input of it), written into a buffer of the window
// that no client can reach and then copied into the filler's own ring, and
// it carries the decode errors and skips it counted, which a stream that
// copies it counts as its own. Padding items are never shared.
//
// Thread safety: thread-safe. One lock (the window's) over every group;
// it is a leaf (nothing is called under it) and is never held while
// bytes are copied or filled.
#ifndef BATCHD_SERVER_FILL_SHARE_H_
#define BATCHD_SERVER_FILL_SHARE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "workloads/schedule.h"
#include "workloads/workload_counters.h"

namespace batchd {

class RankProducer;  // server/engine.h

namespace fill_share_internal {
struct Window;
struct Group;
struct Entry;
}  // namespace fill_share_internal

// What one worker holds of the window for the item it is at: the claim to
// fill it (others wait for it), or the fill of another worker that it
// waits for. Move-only; a claim dropped unfinished (its chunk's rank went
// or failed) gives the item up, and those waiting for it fill it
// themselves.
class ShareTicket {
 public:
  ShareTicket() = default;
  ShareTicket(ShareTicket&& other) noexcept;
  ShareTicket& operator=(ShareTicket&& other) noexcept;
  ShareTicket(const ShareTicket&) = delete;
  ShareTicket& operator=(const ShareTicket&) = delete;
  ~ShareTicket() { Reset(); }

  // This worker fills the item, into targets(), for the window.
  bool claimed() const { return kind_ == Kind::kClaim; }
  // Another worker fills the item; run again once settled().
  bool waiting() const { return kind_ == Kind::kWait; }
  // The fill waited for landed or was given up (true when not waiting).
  // Cheap (one atomic load): the engine asks under its lock.
  bool settled() const;
  // Where a claimed item's tensors are filled (one pointer a tensor).
  uint8_t* const* targets() const { return targets_.data(); }
  // Gives a claim up; forgets a wait.
  void Reset();

 private:
  friend class ShareMember;
  enum class Kind : uint8_t { kNone, kClaim, kWait };
  std::shared_ptr<fill_share_internal::Group> group_;
  std::shared_ptr<fill_share_internal::Entry> entry_;
  Kind kind_ = Kind::kNone;
  absl::InlinedVector<uint8_t*, 4> targets_;
};

// One stream's place in its group. Made by FillShare::Join before the
// stream's first rank is added to the engine; the stream's ranks are
// added and removed by the engine (AddRank, RemoveRank); leaves the group
// when destroyed.
class ShareMember {
 public:
  ~ShareMember();
  ShareMember(const ShareMember&) = delete;
  ShareMember& operator=(const ShareMember&) = delete;

  // A rank of the stream is produced from now on / no more. `p` must stay
  // alive until RemoveRank(p) (the engine retires a producer before it can
  // go). Its oldest unpublished step (start_step + published_steps) says
  // which fills the stream may still want.
  void AddRank(const RankProducer* p);
  void RemoveRank(const RankProducer* p);

  enum class Begin {
    kCopied,  // the item's bytes are in `out` and its counts in `counters`
    kWait,    // another worker fills it: park until ticket->settled()
    kFill,    // fill it: into ticket->targets() when ticket->claimed(),
              // else into `out`, then call EndItem
  };
  // Before filling `item` of `step` into `out` (one pointer a tensor, into
  // a rank's slot), counting into `counters` (the stream's). `ticket` is
  // the chunk's: a claim it holds for this very item (after a read that
  // was pending) is kept, anything else is let go first.
  Begin BeginItem(uint64_t step, const ItemRef& item, uint8_t* const* out,
                  WorkloadCounters* counters, ShareTicket* ticket);
  // After the item's FillItem returned `status`: for a claim, copies the
  // fill into `out` and keeps it in the window with `counted`, its counts
  // (status OK), or gives the claim up (any error). Nothing otherwise.
  void EndItem(ShareTicket* ticket, const absl::Status& status,
               uint8_t* const* out, const WorkloadCounters& counted);

  // Figures, since the stream began: items its workers filled themselves,
  // and items taken over from the fill another stream made.
  uint64_t fills_made() const { return made_.load(std::memory_order_relaxed); }
  uint64_t fills_shared() const {
    return shared_.load(std::memory_order_relaxed);
  }
  // The group's number (one per key while any of its streams lives) and
  // its streams with a rank produced now.
  uint64_t group_id() const;
  uint32_t group_streams() const;

 private:
  friend class FillShare;
  ShareMember(std::shared_ptr<fill_share_internal::Group> group, int slot);

  const std::shared_ptr<fill_share_internal::Group> group_;
  const int slot_;  // the member's bit in the group's entries
  std::atomic<uint64_t> made_{0};
  std::atomic<uint64_t> shared_{0};
};

// The daemon's window of fills, over every group.
class FillShare {
 public:
  // A group of more streams than this shares among its first ones; later
  // ones fill for themselves (each stream is one bit of an entry).
  static constexpr int kMaxStreamsPerGroup = 64;
  // What a fill's entry (its key, state and the window's indexes of it)
  // counts against the window besides its bytes, so that the bound holds
  // for items of a few bytes too (a criteo line).
  static constexpr uint64_t kEntryOverheadBytes = 256;
  // The default of --share-window-bytes.
  static constexpr uint64_t kDefaultBudgetBytes = uint64_t(512) << 20;

  // `budget_bytes`: fills kept at most, over all groups (0: no sharing).
  explicit FillShare(uint64_t budget_bytes);
  ~FillShare();
  FillShare(const FillShare&) = delete;
  FillShare& operator=(const FillShare&) = delete;

  // The stream's member of the group of `key` (ShareKeyOf), whose items are
  // `tensor_bytes[k]` bytes of tensor k; null when sharing is off or the
  // group is full (the stream then fills everything itself).
  std::shared_ptr<ShareMember> Join(const std::string& key,
                                    const std::vector<uint64_t>& tensor_bytes);

  struct Stats {
    uint64_t budget_bytes = 0;
    uint64_t held_bytes = 0;      // fills kept (with their entries), and
                                  // buffers for the next ones
    uint64_t max_held_bytes = 0;  // the most held at once (<= budget)
    uint32_t groups_sharing = 0;  // groups of two streams or more now
  };
  Stats stats() const;

 private:
  const std::shared_ptr<fill_share_internal::Window> window_;
};

}  // namespace batchd

#endif  // BATCHD_SERVER_FILL_SHARE_H_

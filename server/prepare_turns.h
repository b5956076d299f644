// Turns at making streams, per owner. Making a stream (the preparation of
// a stream that does not exist yet, server/stream_preparations.h; a Plan)
// reads and indexes its data on a thread of its own, which no pool bounds:
// without turns, one uid's concurrent requests over giant files would each
// take a core. Each owner makes at most `per_owner` streams at once; a Plan
// past that waits for a turn (Take), and stops waiting when it is
// cancelled (its caller gone); a preparation past it waits in its owner's
// queue without a thread (TryTake, and the callback of a turn given back).
// Joining a stream that exists, or one being prepared, takes no turn.
//
// Thread safety: thread-safe.
#ifndef BATCHD_SERVER_PREPARE_TURNS_H_
#define BATCHD_SERVER_PREPARE_TURNS_H_

#include <cstdint>
#include <functional>
#include <map>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "base/work_context.h"

namespace batchd {

class PrepareTurns {
 public:
  // Streams one owner makes at once, by default.
  static constexpr int kDefaultPerOwner = 2;

  explicit PrepareTurns(int per_owner = kDefaultPerOwner)
      : per_owner_(per_owner) {}
  PrepareTurns(const PrepareTurns&) = delete;
  PrepareTurns& operator=(const PrepareTurns&) = delete;

  // A turn of one owner, given back when it goes. Move-only; the
  // PrepareTurns must outlive it.
  class Turn {
   public:
    Turn() = default;
    Turn(Turn&& other) noexcept : turns_(other.turns_), owner_(other.owner_) {
      other.turns_ = nullptr;
    }
    Turn& operator=(Turn&& other) noexcept;
    Turn(const Turn&) = delete;
    Turn& operator=(const Turn&) = delete;
    ~Turn();

    // Whether this holds a turn (a default or moved-from Turn does not).
    bool held() const { return turns_ != nullptr; }

   private:
    friend class PrepareTurns;
    Turn(PrepareTurns* turns, uint64_t owner) : turns_(turns), owner_(owner) {}
    PrepareTurns* turns_ = nullptr;
    uint64_t owner_ = 0;
  };

  // Waits for a turn of `owner`; CANCELLED once `cancel` (may be null) is
  // cancelled first.
  absl::StatusOr<Turn> Take(uint64_t owner, const Cancellation* cancel);
  // A turn of `owner` now, or a Turn that holds none (held() false) when
  // all of the owner's are taken.
  Turn TryTake(uint64_t owner);
  // Called with the owner after each turn is given back, without the lock,
  // on the thread that gave it back (it may take a turn). Set before any
  // turn is taken.
  void SetOnGiven(std::function<void(uint64_t owner)> on_given);
  // Turns of `owner` taken now (tests, status).
  int taken(uint64_t owner) const;

 private:
  void Give(uint64_t owner);

  const int per_owner_;
  std::function<void(uint64_t)> on_given_;  // set before turns are taken
  mutable absl::Mutex mu_;
  absl::CondVar given_;  // a turn was given back
  std::map<uint64_t, int> taken_ ABSL_GUARDED_BY(mu_);
};

}  // namespace batchd

#endif  // BATCHD_SERVER_PREPARE_TURNS_H_

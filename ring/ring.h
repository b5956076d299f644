// RingWriter (server side) and RingReader (client side) of one rank's
// shared-memory ring; see shm_layout.h for the layout and the protocol.
//
// Thread safety: a RingWriter is used by the server under its own locking
// (claims and publishes must be serialised by the caller). RingReader: see
// its class comment.
#ifndef BATCHD_RING_RING_H_
#define BATCHD_RING_RING_H_

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "ring/shm_layout.h"

namespace batchd {

struct RingGeometry {
  uint32_t slot_count = 4;
  uint64_t payload_bytes = 0;  // largest payload of one slot
  uint32_t rank = 0;
  uint32_t world_size = 1;
  std::string stream_name;

  // Stride of one slot: header plus payload, page aligned. Both saturate at
  // UINT64_MAX instead of wrapping; Check() refuses such a geometry.
  uint64_t SlotBytes() const;
  uint64_t SegmentBytes() const;
  // OK when the slot and the segment are within shm::kMaxSlotBytes and
  // shm::kMaxSegmentBytes (products checked, never wrapped), else
  // InvalidArgument naming the sizes.
  absl::Status Check() const;
};

// Owns the mapping of a segment (either side); defined in ring.cc.
class Mapping;

// Free bytes of the file system that holds POSIX shared memory (/dev/shm).
uint64_t ShmFreeBytes();

class RingWriter {
 public:
  // Creates segment `name` (e.g. "/batchd.1000.job.0.<random>"): an unnamed
  // file in /dev/shm that gets its mode, ACL, creator and all its bytes (so
  // that a full /dev/shm fails here, not with SIGBUS later) before it is
  // linked under `name` (AlreadyExists if the name is taken; never through a
  // link), so that a creator killed midway leaves no segment; then writes
  // the header and publishes its version. The segment is mode 0600;
  // `client_uid` >= 0 (and not this process's uid) may also read and write
  // it, through a POSIX ACL entry of that uid alone (no group, no one
  // else). Fails with ResourceExhausted naming the bytes needed and free,
  // FailedPrecondition when the ACL cannot be set (never falling back to
  // wider access).
  static absl::StatusOr<std::unique_ptr<RingWriter>> Create(
      const std::string& name, const RingGeometry& geometry,
      int64_t client_uid = -1);
  // Unmaps and unlinks the segment.
  ~RingWriter();
  // Removes the name now (the mapping stays until destruction); marks the
  // ring closed (or leaves it kStateExiting) so that an attached client
  // stops waiting. Idempotent.
  void Unlink();

  const std::string& name() const { return name_; }
  const RingGeometry& geometry() const { return geometry_; }
  shm::RingHeader* header() const { return header_; }

  // Claims the next position if some slot is free (released by the client,
  // in any order, or never used); returns false when the ring is full (every
  // slot is being filled, published or held by the client). Positions are
  // claimed in order.
  bool TryClaim(uint64_t* pos);
  // Positions claimed so far (next position TryClaim returns).
  uint64_t claimed() const { return claimed_; }
  // Start of the slot claimed for `pos` (claimed, not yet published) and
  // its header.
  uint8_t* SlotBase(uint64_t pos) const;
  shm::SlotHeader* Slot(uint64_t pos) const {
    return reinterpret_cast<shm::SlotHeader*>(SlotBase(pos));
  }
  // Makes [0, pos + 1) visible; pos must be the oldest unpublished position.
  void Publish(uint64_t pos);
  // Sets the ring's state (kStateEnded: no more batches; kStateExiting: the
  // daemon exits and the client may reopen the stream on the next one) and
  // wakes the client.
  void SetState(uint32_t state);
  // Closes the ring for a reason the client reports (e.g. why a batch could
  // not be made); the reason is written before the state.
  void Close(const std::string& reason);
  void Heartbeat(uint64_t now_ns);
  // Sets the header's wait reason (shm_layout.h), cut to 255 bytes; ""
  // clears it. Writes only when it differs from what was set last. Called
  // from one thread at a time.
  void SetWaitReason(const std::string& reason);

  // Positions published so far, and released by the client so far (in any
  // order: published() - released() slots hold batches the client has not
  // given back).
  uint64_t published() const;
  uint64_t released() const;

  // The client's liveness as stamped in the header.
  struct ClientInfo {
    uint32_t pid = 0;
    uint64_t heartbeat_ns = 0;
    uint64_t wait_ns = 0;
  };
  ClientInfo client() const;
  // True when a client attached and has let go or died: it marked the ring
  // detached, or the process that asked for the ring (`holder_pid`, in this
  // process's pid namespace, with its start time, as the kernel named it;
  // 0: none visible) is gone. Without a holder, when its heartbeat is
  // older than stale_ns or ahead of now_ns by more than kMaxClockSkewNs
  // (forged), or the process it stamped is gone. What the client wrote
  // never keeps a ring alive once its holder died.
  bool ClientGone(uint64_t now_ns, uint64_t stale_ns, uint32_t holder_pid = 0,
                  uint64_t holder_start = 0) const;

 private:
  RingWriter(std::string name, RingGeometry geometry,
             std::unique_ptr<Mapping> mapping);
  shm::SlotTable* table() const;

  const std::string name_;
  const RingGeometry geometry_;
  const std::unique_ptr<Mapping> mapping_;
  shm::RingHeader* const header_;
  uint64_t claimed_ = 0;
  // The slot of each claimed, unpublished position, at pos % slot_count.
  std::vector<uint32_t> claimed_slot_;
  uint32_t next_free_hint_ = 0;  // where TryClaim starts looking
  bool unlinked_ = false;
  std::string wait_reason_;  // as last set; SetWaitReason's thread only
};

// One tensor of a slot, as the client sees it.
struct SlotTensor {
  std::string name;
  uint32_t dtype = 0;
  std::vector<int64_t> shape;
  uint8_t* data = nullptr;
  uint64_t nbytes = 0;
};

// The client's side of one ring. Batches are acquired in order and released
// in any order; each acquired, unreleased position holds its slot.
//
// Fork: a RingReader belongs to the process that attached it. In a forked
// child it touches nothing of the ring: Release and Heartbeat do nothing,
// Acquire fails, and the destructor neither marks the ring detached nor
// gives back a slot, so a child (using its inherited reader or not) never
// disturbs its parent's stream.
//
// Thread safety: Acquire may be called from one thread at a time; Release,
// Held and the accessors from any thread (tensors die wherever their owners
// drop them).
class RingReader {
 public:
  struct Options {
    // A server whose heartbeat is older than this is taken as stopped.
    double server_stale_seconds = 3.0;
    // The uid the segment must belong to (the daemon's, as the kernel
    // reports it). -1: one of owner_uids, or any uid when that is empty.
    int64_t owner_uid = -1;
    // With owner_uid -1: the uids the segment may belong to (over TCP:
    // root, this process's uid, server_uid).
    std::vector<uint32_t> owner_uids;
  };
  // Opens `name`, checks its owner (Options), that nobody but its owner and
  // this process's uid may write it (mode and POSIX ACL: no group, no
  // other user), its magic, version and geometry, and stamps this
  // process's pid in the header. PermissionDenied names what was found
  // and what was wanted; such a ring is never mapped.
  static absl::StatusOr<std::unique_ptr<RingReader>> Attach(
      const std::string& name, const Options& options);
  static absl::StatusOr<std::unique_ptr<RingReader>> Attach(
      const std::string& name) {
    return Attach(name, Options());
  }
  ~RingReader();

  shm::RingHeader* header() const { return header_; }
  // The whole mapping (e.g. to register it with CUDA as pinned memory).
  uint8_t* base() const;
  size_t size() const;
  uint32_t slot_count() const { return slot_count_; }
  // True in the process that attached (not in a forked child).
  bool InOwnerProcess() const;
  pid_t owner_pid() const { return owner_pid_; }
  // The uid the segment belongs to (checked by Attach).
  uid_t segment_uid() const { return segment_uid_; }

  // Waits up to timeout_seconds (< 0: for ever) for the next published
  // position and returns it. Fails with Unavailable when the server stopped
  // ("batchd (pid N) stopped: ...") or is exiting (kStateExiting: the
  // stream may be reopened on the daemon that follows), OutOfRange when the
  // ring ended, Cancelled when the stream was closed (with the server's
  // reason when it gave one), DeadlineExceeded on timeout (naming what the
  // server says it is doing, if anything), DataLoss for a forged slot
  // table, FailedPrecondition in a forked child.
  absl::StatusOr<uint64_t> Acquire(double timeout_seconds);
  // The slot of an acquired, unreleased position; nullptr otherwise.
  const shm::SlotHeader* Slot(uint64_t pos) const;
  uint8_t* SlotBase(uint64_t pos) const;
  // The tensors of an acquired slot, checked against the slot bounds.
  absl::StatusOr<std::vector<SlotTensor>> Tensors(uint64_t pos) const;
  // Gives an acquired position's slot back, in any order; a position not
  // held (released already, never acquired) is ignored.
  void Release(uint64_t pos);
  // The steps of the batches acquired and not yet released, oldest first.
  std::vector<uint64_t> HeldSteps() const;
  // Refreshes the client heartbeat (the Loader calls it ~10x/s).
  void Heartbeat();
  // What the server says it is doing while no batch comes ("" if nothing).
  std::string WaitReason() const;

  // Why the server is taken as stopped, or OK.
  absl::Status CheckServer() const;

 private:
  RingReader(std::string name, Options options,
             std::unique_ptr<Mapping> mapping, uid_t segment_uid);
  uint8_t* SlotAt(uint32_t slot) const;
  absl::Status ClosedStatus(uint32_t state) const;

  const std::string name_;
  const Options options_;
  const std::unique_ptr<Mapping> mapping_;
  shm::RingHeader* const header_;
  shm::SlotTable* const table_;
  const uint32_t slot_count_;
  const uint64_t slot_bytes_;
  const pid_t owner_pid_;
  const uid_t segment_uid_;

  struct Held {
    uint32_t slot;
    uint64_t step;
  };
  mutable absl::Mutex mu_;
  uint64_t next_acquire_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<uint64_t, Held> held_ ABSL_GUARDED_BY(mu_);  // by position
};

// Removes segments under /dev/shm whose names start with `prefix` (e.g.
// "batchd.1000.") and whose recorded server is dead, or that were never
// finished by a creator that has since died (Create records its creator
// before it reserves the pages; one without even that is removed once a
// minute old). Returns the names removed.
// Entries that are not regular files of this process's uid (FIFOs, links,
// another user's files) are never opened blocking, followed, trusted or
// removed; each is added to `skipped` (when given) with the reason.
std::vector<std::string> RemoveStaleSegments(
    const std::string& prefix, std::vector<std::string>* skipped = nullptr);

// Removes the segments named `prefix`* whose recorded server is this
// process (regular files of its uid only, opened as above): the rings a
// daemon leaves when its stop cannot finish. Returns the names removed.
std::vector<std::string> RemoveOwnSegments(const std::string& prefix);

}  // namespace batchd

#endif  // BATCHD_RING_RING_H_

// The shared-memory layout of one ring: one POSIX segment per (stream, rank).
//
// This header is the whole protocol between the batchd server (the only
// writer of batches) and a client (the only reader of one rank's ring). Every
// offset is pinned by a static_assert below and by tests/ring_test.cc; change
// one and kLayoutVersion must change with it.
//
// Segment:
//
//   0      +--------------------------- RingHeader (4096 B) ------------------+
//          |  0 magic            u64  "BATCHDR1"                              |
//          |  8 layout_version   u32  written last (release): 0 = not ready   |
//          | 12 header_bytes     u32  12288: RingHeader and the slot table    |
//          | 16 slot_count       u32  1 .. kMaxSlots                          |
//          | 20 world_size       u32                                          |
//          | 24 slot_bytes       u64  stride of one slot, header included     |
//          | 32 segment_bytes    u64                                          |
//          | 40 rank             u32                                          |
//          | 44 server_pid       u32                                          |
//          | 48 server_start     u64  /proc/<pid>/stat starttime (ticks)      |
//          | 56 server_pid_ns    u64  inode of the server's pid namespace     |
//   64     +-- producer line -------------------------------------------------+
//          | 64 write_pos        u64  atomic: positions [0, write_pos) public |
//          | 72 data_futex       u32  atomic: bumped after each publish       |
//          | 76 state            u32  atomic: kStateOpen / Ended / Closed /   |
//          |                          Exiting                                 |
//          | 80 data_waiters     u32  atomic: clients asleep on data_futex    |
//   128    +-- server liveness line -------------------------------------------+
//          |128 server_heartbeat u64  atomic: CLOCK_MONOTONIC ns, ~10 Hz      |
//   192    +-- consumer line -------------------------------------------------+
//          |192 released         u64  atomic: positions released so far      |
//          |                          (a count: releases come in any order)   |
//          |200 reserved         u32[2]  (zero; no one waits for space)       |
//   256    +-- client liveness line -------------------------------------------+
//          |256 client_pid       u32  0 = no client attached yet              |
//          |264 client_start     u64                                          |
//          |272 client_heartbeat u64  atomic: CLOCK_MONOTONIC ns              |
//          |280 client_pid_ns    u64                                          |
//          |288 client_wait_ns   u64  atomic: total time Next() waited        |
//          |296 client_detached  u32  atomic: 1 once the client let go        |
//   320    +-- stream name, char[64], NUL-terminated ----------------------------+
//   384..512 reserved (zero)
//   512    +-- close reason, char[256], NUL-terminated: why the server closed  +
//          |   the ring (a failed batch, ...); written before state = Closed |
//   768    +-- wait reason, atomic char[256], NUL-terminated: what the      +
//          |   server is doing while the stream's first steps are not ready |
//          |   ("indexing wmt lengths 1200/5900 pairs ..."); "" otherwise   |
//   1024..4096 reserved (zero)
//   4096   +-- slot table (SlotTable, 8192 B) --------------------------------+
//          |   slot_state[kMaxSlots] u32 atomic: kSlotFree (0) = the server   |
//          |        may fill slot i; kSlotServer (1) = the server's: being   |
//          |        filled, or published and not yet released               |
//          |   slot_of[kMaxSlots]    u32 atomic at 8192: slot_of[p %         |
//          |        slot_count] = the slot that holds position p, written   |
//          |        before p is published                                   |
//   12288  +-- slot 0: SlotHeader (4096 B), then tensors at offsets ≥ 4096 ---+
//          +-- slot 1 ... slot_count-1, each slot_bytes apart (4096-aligned) --+
//
// Slot i: header_bytes + i * slot_bytes. Position p lives in slot
// slot_of[p % slot_count] from its publication to its release.
//
// SlotHeader (at the start of a slot):
//     0 sequence u64 (= p)   8 step u64      16 epoch u64   24 position u64
//    32 cursor_epoch u64    40 cursor_window u64   48 cursor_row u64
//    56 valid_count u32     60 num_tensors u32     64 payload_bytes u64
//    72 batch_cursor_epoch u64  80 batch_cursor_window u64
//    88 batch_cursor_row u64    96 epoch_first_step u64
//   104 epoch_steps u64    112..128 reserved (zero)
//   128 tensors[16] of TensorDesc (128 B each): name char[48], dtype u32,
//       ndim u32, shape i64[6], offset u64 (from the slot start), nbytes u64
// The cursor is where this rank's first item sits (packed rows: epoch,
// window, row in the window); the batch cursor is where the global batch's
// first item sits (rank 0's cursor), the same in every rank's slot, so that
// every rank's checkpoint (Loader::State) is the same and resumes the job.
// The epoch fields say where the batch's epoch lies in global steps, so
// that a client ends an epoch's loop at its last batch without waiting for
// the next; epoch_steps is 0 where that is not known yet (a packed epoch
// still being counted, or a server from before the fields).
//
// Protocol. Positions are published in order, slots are given back in any
// order. The server claims position p only when some slot i is free (an
// acquire load of slot_state[i] == kSlotFree, pairing with the client's
// release store); it marks it kSlotServer, writes it, records slot_of[p %
// slot_count] = i, then publishes with a store of write_pos = p + 1 and
// bumps data_futex; it makes the futex wake call (tens of µs) only when
// data_waiters says a client sleeps. A client about to sleep raises
// data_waiters, then re-reads write_pos; both sides use seq_cst for that
// store/load pair, so one of them always sees the other. The client
// acquires write_pos, reads slot_of[p % slot_count] (written before that
// release) and the slot, and on release stores slot_state[i] = kSlotFree
// (release: its reads of the slot happen before the server reuses it) and
// counts the release in `released`. Only the server writes kSlotServer and
// only the client writes kSlotFree, each for a slot the other side has let
// go. slot_of[p % slot_count] is not overwritten before p is released:
// positions p .. p + slot_count published at once would need slot_count + 1
// slots. So a client may keep any k < slot_count batches for as long as it
// likes and the stream flows through the other slots; a client holding
// every slot stalls it (its wait names the held steps). The server polls
// full rings (the client has no doorbell to ring, so a release costs two
// stores). No lock lives in this memory: a process killed at any
// instruction leaves the other side able to go on or to notice.
#ifndef BATCHD_RING_SHM_LAYOUT_H_
#define BATCHD_RING_SHM_LAYOUT_H_

#include <atomic>
#include <cstddef>
#include <cstdint>

// By its path from the source root: this header is included by targets
// that do not have the public include directory.
#include "client/include/batchd/dtype.h"

namespace batchd {
namespace shm {

inline constexpr uint64_t kMagic = 0x3152444843544142ULL;  // "BATCHDR1"
inline constexpr uint32_t kLayoutVersion = 2;
// The RingHeader's page and the slot table's two pages.
inline constexpr uint32_t kHeaderBytes = 3 * 4096;
inline constexpr uint32_t kSlotTableOffset = 4096;
inline constexpr uint32_t kMaxSlots = 1024;
inline constexpr uint32_t kSlotHeaderBytes = 4096;
inline constexpr uint32_t kMaxTensors = 16;
inline constexpr uint32_t kMaxDims = 6;
inline constexpr uint32_t kTensorAlign = 256;
inline constexpr uint32_t kNameBytes = 48;
inline constexpr uint32_t kCloseReasonBytes = 256;
// Bounds of a ring, so that no size computed from a request can come near
// 2^64: a slot (header and payload) and a whole segment. They only bound
// the arithmetic; /dev/shm's free space and --max-ring-bytes are the
// practical limits.
inline constexpr uint64_t kMaxSlotBytes = uint64_t(1) << 44;     // 16 TiB
inline constexpr uint64_t kMaxSegmentBytes = uint64_t(1) << 54;  // 16 PiB

// The most a client's heartbeat (CLOCK_MONOTONIC, one clock for every
// process of the machine) may lie ahead of the server's reading of it: a
// heartbeat further in the future is forged, and counts as stale.
inline constexpr uint64_t kMaxClockSkewNs = 2'000'000'000;

// RingHeader::state.
inline constexpr uint32_t kStateOpen = 0;
inline constexpr uint32_t kStateEnded = 1;   // all batches published (eval)
inline constexpr uint32_t kStateClosed = 2;  // stream closed (close_reason)
// The daemon is exiting (shutdown, restart): the stream itself goes on, and
// a client may reopen it at its own next step on the daemon that follows.
inline constexpr uint32_t kStateExiting = 3;

// SlotTable::slot_state.
inline constexpr uint32_t kSlotFree = 0;    // the server may fill it
inline constexpr uint32_t kSlotServer = 1;  // being filled, or not released


struct RingHeader {
  uint64_t magic;
  std::atomic<uint32_t> layout_version;
  uint32_t header_bytes;
  uint32_t slot_count;
  uint32_t world_size;
  uint64_t slot_bytes;
  uint64_t segment_bytes;
  uint32_t rank;
  uint32_t server_pid;
  uint64_t server_start;
  uint64_t server_pid_ns;

  alignas(64) std::atomic<uint64_t> write_pos;
  std::atomic<uint32_t> data_futex;
  std::atomic<uint32_t> state;
  std::atomic<uint32_t> data_waiters;

  alignas(64) std::atomic<uint64_t> server_heartbeat_ns;

  // Positions the client has released (a count, not a prefix).
  alignas(64) std::atomic<uint64_t> released;
  uint32_t reserved_consumer[2];  // zero

  alignas(64) std::atomic<uint32_t> client_pid;
  std::atomic<uint64_t> client_start;
  std::atomic<uint64_t> client_heartbeat_ns;
  std::atomic<uint64_t> client_pid_ns;
  std::atomic<uint64_t> client_wait_ns;
  std::atomic<uint32_t> client_detached;

  alignas(64) char stream_name[64];
  char reserved_384[128];
  // Written before state is set to kStateClosed (release), read after the
  // client acquires that state; "" when the stream was closed normally.
  char close_reason[256];
  // Written by the server while the stream prepares, cleared ("") once
  // batches flow; read by a client whose wait times out, to say why. Byte
  // by byte (relaxed): a reader racing a rewrite may see a mixed text,
  // never an unterminated one (the last byte is always NUL). Readers that
  // ignore it (zero in older servers) are unaffected.
  std::atomic<char> wait_reason[256];
};

// At kSlotTableOffset: which slots are free, and where each published
// position lives.
struct SlotTable {
  std::atomic<uint32_t> slot_state[kMaxSlots];
  std::atomic<uint32_t> slot_of[kMaxSlots];
};

struct TensorDesc {
  char name[kNameBytes];
  uint32_t dtype;  // a DType (client/include/batchd/dtype.h)
  uint32_t ndim;
  int64_t shape[kMaxDims];
  uint64_t offset;  // from the start of the slot
  uint64_t nbytes;
  uint64_t reserved;
};

struct SlotHeader {
  uint64_t sequence;
  uint64_t step;
  uint64_t epoch;
  uint64_t position;
  uint64_t cursor_epoch;
  uint64_t cursor_window;
  uint64_t cursor_row;
  uint32_t valid_count;
  uint32_t num_tensors;
  uint64_t payload_bytes;
  uint64_t batch_cursor_epoch;
  uint64_t batch_cursor_window;
  uint64_t batch_cursor_row;
  // The batch's epoch: its first global step and how many steps it holds
  // (0: not known when the batch was written, a packed epoch still being
  // counted). Zero from servers before the fields: readers take them as
  // not known.
  uint64_t epoch_first_step;
  uint64_t epoch_steps;
  uint64_t reserved[2];
  TensorDesc tensors[kMaxTensors];
};

static_assert(std::atomic<uint64_t>::is_always_lock_free);
static_assert(std::atomic<uint32_t>::is_always_lock_free);
static_assert(std::atomic<char>::is_always_lock_free);
static_assert(sizeof(std::atomic<char>) == 1);
static_assert(sizeof(std::atomic<uint64_t>) == 8);
static_assert(sizeof(std::atomic<uint32_t>) == 4);

static_assert(offsetof(RingHeader, magic) == 0);
static_assert(offsetof(RingHeader, layout_version) == 8);
static_assert(offsetof(RingHeader, header_bytes) == 12);
static_assert(offsetof(RingHeader, slot_count) == 16);
static_assert(offsetof(RingHeader, world_size) == 20);
static_assert(offsetof(RingHeader, slot_bytes) == 24);
static_assert(offsetof(RingHeader, segment_bytes) == 32);
static_assert(offsetof(RingHeader, rank) == 40);
static_assert(offsetof(RingHeader, server_pid) == 44);
static_assert(offsetof(RingHeader, server_start) == 48);
static_assert(offsetof(RingHeader, server_pid_ns) == 56);
static_assert(offsetof(RingHeader, write_pos) == 64);
static_assert(offsetof(RingHeader, data_futex) == 72);
static_assert(offsetof(RingHeader, state) == 76);
static_assert(offsetof(RingHeader, data_waiters) == 80);
static_assert(offsetof(RingHeader, server_heartbeat_ns) == 128);
static_assert(offsetof(RingHeader, released) == 192);
static_assert(offsetof(RingHeader, reserved_consumer) == 200);
static_assert(offsetof(RingHeader, client_pid) == 256);
static_assert(offsetof(RingHeader, client_start) == 264);
static_assert(offsetof(RingHeader, client_heartbeat_ns) == 272);
static_assert(offsetof(RingHeader, client_pid_ns) == 280);
static_assert(offsetof(RingHeader, client_wait_ns) == 288);
static_assert(offsetof(RingHeader, client_detached) == 296);
static_assert(offsetof(RingHeader, stream_name) == 320);
static_assert(offsetof(RingHeader, close_reason) == 512);
static_assert(offsetof(RingHeader, wait_reason) == 768);
static_assert(sizeof(RingHeader) == 1024);
static_assert(sizeof(RingHeader) <= kSlotTableOffset);
static_assert(offsetof(SlotTable, slot_state) == 0);
static_assert(offsetof(SlotTable, slot_of) == 4 * kMaxSlots);
static_assert(sizeof(SlotTable) == 8192);
static_assert(kSlotTableOffset + sizeof(SlotTable) == kHeaderBytes);

static_assert(offsetof(TensorDesc, dtype) == 48);
static_assert(offsetof(TensorDesc, ndim) == 52);
static_assert(offsetof(TensorDesc, shape) == 56);
static_assert(offsetof(TensorDesc, offset) == 104);
static_assert(offsetof(TensorDesc, nbytes) == 112);
static_assert(sizeof(TensorDesc) == 128);

static_assert(offsetof(SlotHeader, sequence) == 0);
static_assert(offsetof(SlotHeader, step) == 8);
static_assert(offsetof(SlotHeader, epoch) == 16);
static_assert(offsetof(SlotHeader, position) == 24);
static_assert(offsetof(SlotHeader, cursor_epoch) == 32);
static_assert(offsetof(SlotHeader, cursor_window) == 40);
static_assert(offsetof(SlotHeader, cursor_row) == 48);
static_assert(offsetof(SlotHeader, valid_count) == 56);
static_assert(offsetof(SlotHeader, num_tensors) == 60);
static_assert(offsetof(SlotHeader, payload_bytes) == 64);
static_assert(offsetof(SlotHeader, batch_cursor_epoch) == 72);
static_assert(offsetof(SlotHeader, batch_cursor_window) == 80);
static_assert(offsetof(SlotHeader, batch_cursor_row) == 88);
static_assert(offsetof(SlotHeader, epoch_first_step) == 96);
static_assert(offsetof(SlotHeader, epoch_steps) == 104);
static_assert(offsetof(SlotHeader, tensors) == 128);
static_assert(sizeof(SlotHeader) <= kSlotHeaderBytes);

// Bytes of one element of the DType with protocol code `code`; 0 for an
// unknown code.
inline size_t DTypeSize(uint32_t code) {
  const DTypeInfo* d = FindDType(code);
  return d == nullptr ? 0 : d->size;
}

inline uint64_t AlignUp(uint64_t n, uint64_t a) { return (n + a - 1) / a * a; }

// AlignUp that reports overflow instead of wrapping: false when n rounded
// up to a multiple of a does not fit in 64 bits.
inline bool CheckedAlignUp(uint64_t n, uint64_t a, uint64_t* out) {
  uint64_t sum;
  if (__builtin_add_overflow(n, a - 1, &sum)) return false;
  *out = sum / a * a;
  return true;
}

}  // namespace shm
}  // namespace batchd

#endif  // BATCHD_RING_SHM_LAYOUT_H_

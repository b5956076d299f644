// batchd client: a Loader opens one rank's view of a stream on a batchd
// server and hands out batches that live in shared memory, without copying.
//
//   batchd::LoaderOptions opts;            // rank/world from RANK, WORLD_SIZE
//   opts.stream = "job42-train";
//   opts.workload = "synthetic";
//   opts.global_batch_size = 256;
//   auto loader = batchd::Loader::Open(opts);
//   for (int epoch = 0; epoch < 10; ++epoch) {
//     for (bool more = true; more;) {                  // one epoch
//       absl::StatusOr<batchd::Batch> batch = (*loader)->NextInEpoch();
//       if (absl::IsOutOfRange(batch.status())) break; // it has ended
//       more = !batch->last_in_epoch();
//       ...batch->tensor("inputs")...
//     }                                                // slot freed here
//   }
//
// Next() runs on across epochs (a train stream never ends), for trainers
// that count steps; NextInEpoch() stays in the epoch in progress, as
// torch's DataLoader iterates one epoch per loop. A train epoch drops the
// examples that do not fill a global batch; an evaluation split is one
// epoch, its last batch padded. EpochSteps() is an epoch's length (torch's
// len(loader)).
//
// Thread safety: Next() must be called from one thread at a time; Batch
// objects (and tensors made from them) may be released from any thread.
#ifndef BATCHD_LOADER_H_
#define BATCHD_LOADER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "batchd/dtype.h"

namespace batchd {


// Where a stream resumes: what Loader::State() returns after a batch and
// LoaderOptions::state takes, so that a trainer's checkpoint holds it (its
// JSON form, ToJson, is what the Python Loader's state_dict() returns). It
// names the spec fields that decide the batches' contents, checked against
// the spec it is given to, and the position: the next global step and, for
// row-packing streams, the cursor of a batch at or before it (any rank's:
// every rank's state resumes the job). World size and rank are not part of
// it: a state saved at world size W resumes at any W' that divides the
// global batch.
struct LoaderState {
  static constexpr int kVersion = 1;
  std::string workload;
  std::string data;
  std::string split;
  uint64_t global_batch_size = 0;
  uint64_t seed = 0;
  std::map<std::string, std::string> options;
  uint64_t next_step = 0;
  // Row-packing streams (wmt train): (epoch, window, row) and the step of
  // the batch that cursor belongs to (<= next_step).
  bool has_cursor = false;
  uint64_t cursor[3] = {0, 0, 0};
  uint64_t cursor_step = 0;
  // Informational: the world size it was saved at.
  uint32_t world_size = 0;

  // A small JSON object: {"format": "batchd.loader_state", "version": 1,
  // "workload": ..., "next_step": ..., "cursor": [e, w, r, step] or null}.
  std::string ToJson() const;
  // InvalidArgument naming what is wrong (not a batchd state, another
  // version, a field of the wrong type).
  static absl::StatusOr<LoaderState> FromJson(const std::string& json);
};

struct LoaderOptions {
  // Address of the daemon: "unix:///path/to/socket" or "tcp://host:port"
  // (gRPC's "unix:" and "host:port" forms work too).
  // Default: $BATCHD_SERVER, else unix:///run/batchd/batchd.sock.
  std::string server;
  // The uid the daemon must run as, checked against the kernel's word for
  // the process behind the unix socket (SO_PEERCRED) before anything is
  // sent, and against the owner of every ring mapped. Default (-1):
  // $BATCHD_SERVER_UID, else root, this process's uid, or the owner of the
  // socket's directory when only that owner may write it (a socket in a
  // world-writable directory such as /tmp could be anyone's). TCP
  // addresses have no peer to check; rings are still checked.
  int64_t server_uid = -1;

  // The stream spec; every rank of a job must pass the same values.
  std::string stream;        // required; [A-Za-z0-9_-]{1,64}, not -first
  std::string workload = "synthetic";
  std::string data;          // relative to the server's --data-root
  std::string split = "train";
  uint64_t global_batch_size = 0;  // required
  int world_size = -1;       // Default: $WORLD_SIZE, else 1
  int rank = -1;             // Default: $RANK, else $LOCAL_RANK, else 0
  uint64_t seed = 0;
  uint64_t start_step = 0;
  // Row-packing streams (wmt train) may resume from a batch's cursor
  // (Batch::cursor_*, any rank's): the stream finds that batch's rows
  // without replaying earlier epochs and begins at start_step, which must
  // not precede the cursor's step. Without has_start_cursor_step the
  // cursor is taken as rank 0's of batch start_step. Default: unset.
  bool has_start_cursor = false;
  uint64_t start_cursor[3] = {0, 0, 0};  // epoch, window, row
  bool has_start_cursor_step = false;
  uint64_t start_cursor_step = 0;
  // Resume from a checkpoint (Loader::State): the position comes from the
  // state, and the spec fields it names must equal these (the stream name
  // and world size may differ). Exclusive with start_step/start_cursor.
  std::optional<LoaderState> state;
  uint32_t slots = 0;        // ring slots per rank; 0 = server default
  std::map<std::string, std::string> options;  // workload options
  // Whose stream to join: -1, the caller's own stream named `stream`
  // (created when missing); another uid joins that uid's existing stream,
  // which the server allows administrators only. Default: -1.
  int64_t owner_uid = -1;

  // Longest wait of Next() for one batch while the server is alive;
  // < 0: no such bound. Default: -1.
  double timeout_seconds = -1;
  // Next() fails when no batch came for this long and the server reported
  // no progress meanwhile (its wait reason, e.g. "indexing wmt lengths
  // 1200/5900 pairs", did not change): a stream being indexed is waited
  // for as long as indexing goes on. < 0: for ever. Default: 300 s.
  double stall_timeout_seconds = 300;
  // When the daemon stops or restarts (a crash, an OOM kill, a restart for
  // an upgrade), Next() keeps trying to reopen the stream on the same
  // address for this long and resumes at this rank's next step: the
  // trainer gets exactly the batches it would have had. 0: fail at once.
  // Default: 60 s.
  double reconnect_seconds = 60;
  // A server whose heartbeat is older than this is taken as stopped.
  // Default: 3 s.
  double server_stale_seconds = 3.0;
  // How long Open() tries to open the stream: a daemon that is not there
  // yet, is exiting, or stops during the call (a restart) is tried again
  // until then. A stream the daemon is still preparing (a first open that
  // lists, indexes or counts its data) is waited for beyond it, while the
  // preparation progresses within stall_timeout_seconds; what is being
  // prepared is written to stderr. Default: 30 s.
  double connect_timeout_seconds = 30.0;
};

// A tensor of a batch: a view into shared memory, valid while its Batch (or
// a copy of its lease) lives.
struct Tensor {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  void* data;
  size_t nbytes;
};

class SlotLease;  // owns one ring slot; released when the last owner drops it
class RingReader;  // ring/ring.h

// One rank's slice of one global batch. Move-only; its destructor gives the
// slot back to the server. lease() lets tensor deleters share ownership.
class Batch {
 public:
  Batch(Batch&&) noexcept;
  Batch& operator=(Batch&&) noexcept;
  Batch(const Batch&) = delete;
  Batch& operator=(const Batch&) = delete;
  ~Batch();

  uint64_t step() const { return step_; }
  uint64_t epoch() const { return epoch_; }
  // Position in its epoch of this rank's first example.
  uint64_t position() const { return position_; }
  // Examples (rows) that are real; the rest is padding (eval streams).
  uint32_t valid_count() const { return valid_count_; }
  // WMT packing cursor: (epoch, window, row) of this rank's first row; with
  // step() it names the batch (LoaderOptions::start_cursor).
  uint64_t cursor_epoch() const { return cursor_[0]; }
  uint64_t cursor_window() const { return cursor_[1]; }
  uint64_t cursor_row() const { return cursor_[2]; }
  // The global batch's cursor (rank 0's), the same for every rank.
  uint64_t batch_cursor_epoch() const { return batch_cursor_[0]; }
  uint64_t batch_cursor_window() const { return batch_cursor_[1]; }
  uint64_t batch_cursor_row() const { return batch_cursor_[2]; }
  // The batch's epoch in global steps, as the daemon says: its first step
  // and how many it holds. epoch_steps() is 0 where the daemon did not
  // know it when it wrote the batch (an epoch of packed rows it was still
  // counting: wmt train while its lengths are learnt).
  uint64_t epoch_first_step() const { return epoch_first_step_; }
  uint64_t epoch_steps() const { return epoch_steps_; }
  // Whether the batch is known to be its epoch's last (false where
  // epoch_steps() is 0: Loader::NextInEpoch tells the end then).
  bool last_in_epoch() const {
    return epoch_steps_ != 0 && step_ + 1 == epoch_first_step_ + epoch_steps_;
  }

  const std::vector<Tensor>& tensors() const { return tensors_; }
  // The tensor named `name`, or nullptr.
  const Tensor* tensor(const std::string& name) const;
  // Shared ownership of the slot, for zero-copy tensor adapters.
  std::shared_ptr<SlotLease> lease() const { return lease_; }
  // Gives the slot back now (as the destructor would).
  void Release();

 private:
  friend class Loader;
  Batch() = default;

  uint64_t step_ = 0, epoch_ = 0, position_ = 0;
  uint64_t cursor_[3] = {0, 0, 0};
  uint64_t batch_cursor_[3] = {0, 0, 0};
  uint64_t epoch_first_step_ = 0, epoch_steps_ = 0;
  uint32_t valid_count_ = 0;
  std::vector<Tensor> tensors_;
  std::shared_ptr<SlotLease> lease_;
};

struct StreamInfo {
  std::string segment;
  uint32_t server_pid = 0;
  uint32_t rank = 0;
  uint32_t world_size = 0;
  uint64_t examples_per_epoch = 0;
  // Global batches per epoch; 0 where epochs differ in length (packed rows,
  // as wmt's train split packs pairs: its epochs hold as many batches as
  // their rows allow; each batch says its epoch's, Batch::epoch_steps).
  uint64_t steps_per_epoch = 0;
  // The step this rank's ring began at.
  uint64_t start_step = 0;
  uint32_t slots = 0;
  uint64_t slot_bytes = 0;
  // Batches carry packing cursors, and a resume names one (wmt train).
  bool cursor_resume = false;
};

// One rank's stream of batches. Every wait is bounded: a stopped server is
// noticed within server_stale_seconds (and the stream reopened on the daemon
// that follows, within reconnect_seconds), a stalled one after
// stall_timeout_seconds, and a ring whose every slot this process holds
// after at most kHeldSeconds.
//
// Fork: a Loader belongs to the process that opened it. In a forked child
// it never touches the parent's ring (its batches are not given back, the
// ring is not detached), Next() fails with FailedPrecondition, and its
// destructor returns at once (the child leaks its copy rather than join a
// thread that only the parent has).
class Loader {
 public:
  // A wait on a ring whose every slot holds a batch of this process that
  // is still alive fails after this long (or timeout_seconds, if shorter).
  static constexpr double kHeldSeconds = 10.0;

  // Opens (or joins) the stream on the server and maps this rank's ring.
  static absl::StatusOr<std::unique_ptr<Loader>> Open(
      const LoaderOptions& options);
  ~Loader();

  // The next batch of this rank. Errors: OutOfRange at the end of an eval
  // stream; Unavailable when the server stopped and did not come back
  // within reconnect_seconds (naming its address, pid and the time tried);
  // Cancelled when the stream was closed; DeadlineExceeded after
  // timeout_seconds or stall_timeout_seconds (naming what the server says
  // it is doing); ResourceExhausted when every slot is held (naming the
  // held steps); Aborted when the interrupt check said stop;
  // FailedPrecondition in a forked child.
  absl::StatusOr<Batch> Next();
  // The next batch of the epoch in progress: that of the last batch
  // returned, unless that batch was its epoch's last (then the next
  // epoch begins here, as after a resume at an epoch's edge). OutOfRange
  // ("epoch N has ended") where the next batch is of a later epoch: the
  // end of an epoch whose last batch did not know it was the last
  // (Batch::last_in_epoch false, epoch_steps 0); that batch is kept for
  // the next call of Next() or NextInEpoch(), which begins its epoch, and
  // State() stays after the last batch returned. Other errors as Next()'s.
  absl::StatusOr<Batch> NextInEpoch();
  // Global steps in an epoch of the stream (torch's len(loader)): train,
  // the examples over the global batch, rounded down (the remainder is
  // dropped); an evaluation split, its one pass, rounded up (the last
  // batch is padded). A stream of packed rows (the train split of a
  // workload that packs examples into rows, as wmt does) has epochs of
  // different lengths, which the daemon counts as it goes: the length of
  // the epoch in progress (that of the last batch returned unless it ended
  // its epoch, else that of a batch NextInEpoch kept) where the daemon has
  // said it; FailedPrecondition, saying why, where it has not (before the
  // epoch's first batch).
  absl::StatusOr<uint64_t> EpochSteps() const;

  // Where this rank resumes: after the last batch Next() returned (or the
  // stream's start, before the first). Any rank's state resumes the job.
  LoaderState State() const;
  // Moves this rank to `state` before its first batch: the ring is
  // reopened there (the other ranks do the same with the same state).
  // FailedPrecondition after a batch was returned; InvalidArgument naming
  // the field when the state does not match the spec.
  absl::Status LoadState(const LoaderState& state);

  // Called about every 100 ms while Next() waits, on the waiting thread;
  // returning false makes Next() return Aborted at once (the Python client
  // checks for Ctrl-C here). Set before the first Next().
  void SetInterruptCheck(std::function<bool()> check);

  const StreamInfo& info() const { return info_; }
  const LoaderOptions& options() const { return options_; }
  // Seconds Next() has spent waiting for data.
  double wait_seconds() const;
  // Times the stream was reopened on a restarted daemon, and the seconds
  // Next() spent on those reopenings (from noticing the stop to the ring).
  uint32_t reconnects() const;
  double reconnect_seconds() const;
  // The ring's mapping, every slot included: register it once as pinned
  // memory (cudaHostRegister) to copy batches to a GPU asynchronously. A
  // reopened stream has a new ring (mapped_address() changes).
  void* mapped_address() const;
  size_t mapped_bytes() const;
  // Registers that mapping with the CUDA runtime the process has loaded
  // (cudaHostRegister through dlopen: the client never links CUDA; the
  // Python module calls this too). FailedPrecondition where there is no
  // CUDA runtime, driver or device. Next()'s thread, as UnregisterPinned.
  absl::Status RegisterPinned();
  // Undoes RegisterPinned (cudaHostUnregister of the mapping it registered)
  // while that mapping is still there: before the Loader closes, or a later
  // mapping at the same address could not be registered. Ok when nothing is
  // registered.
  absl::Status UnregisterPinned();

 private:
  class Impl;
  explicit Loader(std::unique_ptr<Impl> impl);
  absl::StatusOr<Batch> MakeBatch(std::shared_ptr<RingReader> reader,
                                  uint64_t pos);
  // The next batch of the ring (or the one NextInEpoch kept), not yet
  // counted as returned (Returned does that).
  absl::StatusOr<Batch> Take();
  void Returned(const Batch& b);
  // Reopens this rank's ring at its next step (impl's position).
  absl::Status Reopen(double deadline_seconds);
  // Waits for the daemon to come back (reconnect_seconds) and reopens.
  absl::Status Reconnect(const absl::Status& why);
  std::unique_ptr<Impl> impl_;
  LoaderOptions options_;
  StreamInfo info_;
};

// Fills rank and world size from the environment as torchrun sets them.
void ApplyEnvironmentDefaults(LoaderOptions* options);

}  // namespace batchd

#endif  // BATCHD_LOADER_H_

// batchd client: a Loader opens one rank's view of a stream on a batchd
// server and hands out batches that live in shared memory, without copying.
//
//   batchd::LoaderOptions opts;            // rank/world from RANK, WORLD_SIZE
//   opts.stream = "job42-train";
//   opts.workload = "synthetic";
//   opts.global_batch_size = 256;
//   auto loader = batchd::Loader::Open(opts);
//   for (;;) {
//     absl::StatusOr<batchd::Batch> batch = (*loader)->Next();
//     if (absl::IsOutOfRange(batch.status())) break;   // eval stream ended
//     ...batch->tensor("inputs")...
//   }                                                  // slot freed here
//
// Thread safety: Next() must be called from one thread at a time; Batch
// objects (and tensors made from them) may be released from any thread.
#ifndef BATCHD_LOADER_H_
#define BATCHD_LOADER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "batchd/dtype.h"

namespace batchd {


struct LoaderOptions {
  // Address of the daemon: "unix:///path/to/socket" or "tcp://host:port"
  // (gRPC's "unix:" and "host:port" forms work too).
  // Default: $BATCHD_SERVER, else unix:///run/batchd/batchd.sock.
  std::string server;

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
  // Row-packing streams (wmt train) may resume from the cursor of rank 0's
  // batch of the checkpointed step: batch start_step then begins there,
  // without replaying earlier epochs. Default: unset.
  bool has_start_cursor = false;
  uint64_t start_cursor[3] = {0, 0, 0};  // epoch, window, row
  uint32_t slots = 0;        // ring slots per rank; 0 = server default
  std::map<std::string, std::string> options;  // workload options
  // Whose stream to join: -1, the caller's own stream named `stream`
  // (created when missing); another uid joins that uid's existing stream,
  // which the server allows administrators only. Default: -1.
  int64_t owner_uid = -1;

  // Longest wait of Next() for one batch while the server is alive;
  // < 0 waits for ever. Default: -1 (a dead server is noticed regardless).
  double timeout_seconds = -1;
  // A server whose heartbeat is older than this is taken as stopped.
  // Default: 3 s.
  double server_stale_seconds = 3.0;
  // Deadline for the OpenStream call. Default: 30 s.
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
  // WMT packing cursor: (epoch, window, row) of this batch's first row.
  uint64_t cursor_epoch() const { return cursor_[0]; }
  uint64_t cursor_window() const { return cursor_[1]; }
  uint64_t cursor_row() const { return cursor_[2]; }

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
  uint64_t steps_per_epoch = 0;
  uint64_t start_step = 0;
  uint32_t slots = 0;
  uint64_t slot_bytes = 0;
};

class Loader {
 public:
  // Opens (or joins) the stream on the server and maps this rank's ring.
  static absl::StatusOr<std::unique_ptr<Loader>> Open(
      const LoaderOptions& options);
  ~Loader();

  // The next batch of this rank. Errors: OutOfRange at the end of an eval
  // stream; Unavailable when the server stopped (naming its pid);
  // Cancelled when the stream was closed; DeadlineExceeded after
  // timeout_seconds.
  absl::StatusOr<Batch> Next();

  const StreamInfo& info() const { return info_; }
  const LoaderOptions& options() const { return options_; }
  // Seconds Next() has spent waiting for data.
  double wait_seconds() const;
  // The ring's mapping, every slot included: register it once as pinned
  // memory (cudaHostRegister) to copy batches to a GPU asynchronously.
  void* mapped_address() const;
  size_t mapped_bytes() const;
  // Registers that mapping with the CUDA runtime the process has loaded
  // (cudaHostRegister through dlopen: the client never links CUDA).
  // FailedPrecondition where there is no CUDA runtime, driver or device.
  absl::Status RegisterPinned();

 private:
  class Impl;
  explicit Loader(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
  LoaderOptions options_;
  StreamInfo info_;
};

// Fills rank and world size from the environment as torchrun sets them.
void ApplyEnvironmentDefaults(LoaderOptions* options);

}  // namespace batchd

#endif  // BATCHD_LOADER_H_

// What the example DDP trainers share: their common flags, ranks from
// torchrun-style variables (or a built-in launcher that starts W local
// ranks), a c10d process group (Gloo on CPU; NCCL when built with CUDA),
// gradient averaging, and the check that every step's ranks held disjoint,
// complete slices.
#ifndef BATCHD_EXAMPLES_DDP_H_
#define BATCHD_EXAMPLES_DDP_H_

#include <torch/torch.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/version.h>
#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/distributed/c10d/Backend.hpp>
#endif

#include "batchd/loader.h"

namespace batchd {
namespace examples {

// What the trainers run collectives on. Since torch 2.0, Gloo and NCCL are
// c10d::Backends (a c10d::ProcessGroup dispatches to one per device type);
// in torch 1.x (Debian 12's 1.13) they are ProcessGroups themselves. Both
// have the same allreduce, broadcast and allgather.
#if TORCH_VERSION_MAJOR >= 2
using ProcessGroup = c10d::Backend;
#else
using ProcessGroup = c10d::ProcessGroup;
#endif

// The flags every trainer takes; the defaults given to AddTrainerFlags are
// the trainer's own.
struct TrainerFlags {
  std::string server;  // --server; empty: $BATCHD_SERVER, else the default
  std::string data;    // --data: under the server's --data-root
  std::string stream;  // --stream; empty: "<prefix>-<data>"
  int64_t global_batch = 16;  // --global-batch-size, > 0
  int64_t steps = 20;         // --steps, > 0
  double lr = 0.1;            // --lr, > 0
  int64_t seed = 0;           // --seed, >= 0
  int64_t nproc = 2;          // --nproc: local ranks when RANK is unset, > 0
  int64_t log_every = 5;      // --log-every, > 0
  bool check = true;          // off with --no-check
};

// Binds the flags of `flags` on `app`, whose current values are the
// defaults --help shows. Numbers are checked as they are parsed: a value
// that is not a number, or out of its range, is an error naming the flag.
// `flags` must outlive the parse.
void AddTrainerFlags(CLI::App& app, TrainerFlags* flags);

// Binds --`name` to *value, a whole number > 0 whose current value is the
// default --help shows (the trainers' sizes and counts).
void AddCountFlag(CLI::App& app, const std::string& name, int64_t* value,
                  const std::string& help);

// Parses the command line with `app` (AddTrainerFlags and the trainer's own
// flags bound on it). Returns the exit code for main to return now: 0 after
// --help (printed on stdout), 2 after a bad flag (the error on stderr);
// or -1 to train. An empty --stream becomes "<stream_prefix>-<data>" with
// every character other than [A-Za-z0-9_-] replaced by '-'.
int ParseTrainerFlags(CLI::App& app, int argc, char** argv,
                      const std::string& stream_prefix, TrainerFlags* flags);

struct DistEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
};

// The environment torchrun sets (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR,
// MASTER_PORT); false when RANK is not set.
bool DistEnvFromEnvironment(DistEnv* env);

// Without RANK in the environment, starts `nproc` copies of this program
// as local ranks (with the variables set and a free port) and returns the
// exit code for main to return (the first failing rank's, others stopped);
// with RANK set returns -1: this process is a rank.
int LaunchLocalRanks(int argc, char** argv, int nproc);

// A process group over TCPStore rendezvous: Gloo, or NCCL for CUDA devices
// when built with BATCHD_WITH_NCCL.
c10::intrusive_ptr<ProcessGroup> MakeProcessGroup(
    const DistEnv& env, const torch::Device& device);

// This process as one rank of the job: its environment (torchrun's
// variables), one torch thread and seed 0 (every rank starts alike), the
// CUDA device of its local rank when CUDA is there (else the CPU), and the
// process group.
struct Rank {
  DistEnv env;
  torch::Device device = torch::Device(torch::kCPU);
  c10::intrusive_ptr<ProcessGroup> pg;
};
Rank JoinJob();

// A trainer's start: ParseTrainerFlags, then, without RANK in the
// environment, LaunchLocalRanks (this process waits for its --nproc
// ranks), else JoinJob. Returns the exit code for main to return now, or
// -1 with *rank set: this process is a rank and trains.
int StartTrainer(CLI::App& app, int argc, char** argv,
                 const std::string& stream_prefix, TrainerFlags* flags,
                 Rank* rank);

// The loader options the common flags set (server, stream, data, global
// batch size, seed) for `workload`'s train split.
LoaderOptions TrainLoaderOptions(const TrainerFlags& flags,
                                 const std::string& workload);

// DDP's two duties, done by hand (libtorch has no DDP module): start from
// rank 0's parameters, and average gradients after backward.
void BroadcastParameters(ProcessGroup& pg, torch::nn::Module& model);
void AverageGradients(ProcessGroup& pg, torch::nn::Module& model,
                      int world_size);

// Gathers each rank's `keys` (int64 [B] example ids, or [B, 3] cursors) and
// first position; true when the keys are pairwise distinct and rank r's
// first position is rank 0's + r * B (so the slices tile the global batch).
bool DisjointAndComplete(ProcessGroup& pg, const torch::Tensor& keys,
                         int64_t first_position, int64_t per_rank,
                         int world_size, std::string* why);

// Sum of a scalar across ranks.
double AllReduceSum(ProcessGroup& pg, double value);

// A trainer's running figures: the time since it started, the time spent
// waiting for batches, and the mean loss of each window of `log_every`
// steps (single steps are noisy; the last window may be shorter), of which
// it keeps the first and the latest. Not thread-safe: one per rank.
class TrainingProgress {
 public:
  TrainingProgress(int64_t steps, int64_t log_every);
  // The next batch from `loader`, the time it took counted as data wait.
  absl::StatusOr<Batch> Next(Loader& loader);
  // Adds step's loss (the mean across ranks). True when `step` ends a
  // window; then *window_mean is that window's mean loss.
  bool AddLoss(int64_t step, double loss, double* window_mean);
  double seconds() const;       // since construction
  double wait_seconds() const { return wait_; }
  double first_loss() const { return first_loss_; }  // NaN before a window
  double last_loss() const { return last_loss_; }

 private:
  using Clock = std::chrono::steady_clock;
  const int64_t steps_, log_every_;
  const Clock::time_point start_ = Clock::now();
  double wait_ = 0;
  double window_loss_ = 0;
  int64_t window_steps_ = 0;
  double first_loss_ = NAN, last_loss_ = NAN;
};

}  // namespace examples
}  // namespace batchd

#endif  // BATCHD_EXAMPLES_DDP_H_

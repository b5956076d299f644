// What the example DDP trainers share: ranks from torchrun-style variables
// (or a built-in launcher that starts W local ranks), a c10d process group
// (Gloo on CPU; NCCL when built with CUDA), gradient averaging, and the
// check that every step's ranks held disjoint, complete slices.
#ifndef BATCHD_WORKLOADS_EXAMPLES_DDP_H_
#define BATCHD_WORKLOADS_EXAMPLES_DDP_H_

#include <torch/torch.h>

#include <string>
#include <vector>

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

namespace batchd {
namespace examples {

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
c10::intrusive_ptr<c10d::ProcessGroup> MakeProcessGroup(
    const DistEnv& env, const torch::Device& device);

// DDP's two duties, done by hand (libtorch has no DDP module): start from
// rank 0's parameters, and average gradients after backward.
void BroadcastParameters(c10d::ProcessGroup& pg, torch::nn::Module& model);
void AverageGradients(c10d::ProcessGroup& pg, torch::nn::Module& model,
                      int world_size);

// Gathers each rank's `keys` (int64 [B] example ids, or [B, 3] cursors) and
// first position; true when the keys are pairwise distinct and rank r's
// first position is rank 0's + r * B (so the slices tile the global batch).
bool DisjointAndComplete(c10d::ProcessGroup& pg, const torch::Tensor& keys,
                         int64_t first_position, int64_t per_rank,
                         int world_size, std::string* why);

// Sum of a scalar across ranks.
double AllReduceSum(c10d::ProcessGroup& pg, double value);

}  // namespace examples
}  // namespace batchd

#endif  // BATCHD_WORKLOADS_EXAMPLES_DDP_H_

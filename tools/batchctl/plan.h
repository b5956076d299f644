// batchctl plan: the /dev/shm a stream needs, from the daemon's Plan call,
// and the sizes to give a container. The arithmetic is here for the tests.
#ifndef BATCHD_TOOLS_BATCHCTL_PLAN_H_
#define BATCHD_TOOLS_BATCHCTL_PLAN_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "batchd/v1/batchd.pb.h"
#include "tools/batchctl/cli.h"
#include "tools/batchctl/output.h"

namespace batchd::batchctl {

constexpr uint64_t kMiB = uint64_t(1) << 20;

// What a container's /dev/shm should hold for rings of `total` bytes: the
// total plus 10% plus 64 MiB (other users of /dev/shm: NCCL, the trainer's
// DataLoader, Python's multiprocessing), rounded up to a MiB.
uint64_t ShmSizeFor(uint64_t total);

struct PlanArgs {
  Connection connection;
  v1::StreamSpec spec;
  uint64_t local_ranks = 0;  // 0: every rank of the spec (one node)
  bool json = false;
};
// argv[0] is "plan". Checks what the daemon would check too, so that a
// usage error needs no daemon: G divisible by W, ranges.
absl::StatusOr<PlanArgs> ParsePlanArgs(int argc, char** argv);

// The node's figures from the daemon's answer.
struct PlanFigures {
  uint64_t ranks = 0;           // whose rings this node holds
  uint64_t total_bytes = 0;     // ranks x one rank's segment
  uint64_t shm_size_bytes = 0;  // ShmSizeFor(total_bytes)
  uint64_t shm_size_mib = 0;
  bool fits = false;  // the daemon's /dev/shm has total_bytes free now
};
PlanFigures ComputePlan(const PlanArgs& args, const v1::PlanResponse& plan);

// The --json object and the text report.
Json PlanToJson(const PlanArgs& args, const v1::PlanResponse& plan,
                const PlanFigures& f);
std::string FormatPlan(const PlanArgs& args, const v1::PlanResponse& plan,
                       const PlanFigures& f);

}  // namespace batchd::batchctl

#endif  // BATCHD_TOOLS_BATCHCTL_PLAN_H_

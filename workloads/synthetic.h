// The synthetic workload: N examples that carry who they are. Each example
// writes its global id, epoch and position, plus payload_bytes bytes derived
// from the seed, the id and its per-example random stream. Tests use it to
// check which examples each rank got; benchmarks to measure the data plane.
//
// Options: examples (N) and payload_bytes, with their defaults and bounds
// in the entry (batchd --help). Tensors: ids, epochs, positions (uint64
// [B]), payload (uint8 [B, bytes]), and on evaluation splits weights
// (float32 [B], 0 on padding).
#ifndef BATCHD_WORKLOADS_SYNTHETIC_H_
#define BATCHD_WORKLOADS_SYNTHETIC_H_

#include <memory>

#include "workloads/workload_entry.h"

namespace batchd {

extern const WorkloadEntry kSyntheticWorkload;

// The payload the synthetic workload writes for one example; tests recompute
// it to check bytes end to end.
void SyntheticPayload(const ItemRef& ex, uint8_t* out, uint64_t bytes);

}  // namespace batchd

#endif  // BATCHD_WORKLOADS_SYNTHETIC_H_

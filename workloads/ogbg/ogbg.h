// The ogbg workload: AlgoPerf's ogbg-molpcba (TFDS ogbg_molpcba 0.1.3
// shards read as they lie) batched as AlgoPerf's jraph dynamic batching
// does, in rows of a fixed graph budget that does not depend on the world
// size (docs/ogbg.md).
//
// An item is a row: up to r graphs (option graphs_per_row) packed in order
// while the row keeps at most r graphs, 26 r nodes and 56 r directed edges,
// padded to 26 r + 1 nodes, 56 r edges and r + 1 graphs (workloads/ogbg/
// graph.h). A global batch is G rows; a rank's slice G / W consecutive rows.
//
// Splits: "train" (the graphs of the train shards in batchd's seeded
// shuffle, packed per epoch: PackedSchedule), "eval_train" (the first
// eval_train_examples graphs of the train shards, file order), "validation"
// and "test" (file order). Evaluation splits are packed once, in order, and
// their last global batch padded with all-padding rows.
//
// A graph that cannot be read or parsed, or names a node out of range, is
// counted as a decode error and left out; one over a row's budget on its
// own is counted as skipped. Neither stops the stream.
#ifndef BATCHD_WORKLOADS_OGBG_OGBG_H_
#define BATCHD_WORKLOADS_OGBG_OGBG_H_

#include <memory>

#include "absl/status/statusor.h"
#include "workloads/workload_entry.h"

namespace batchd {

extern const WorkloadEntry kOgbgWorkload;

}  // namespace batchd

#endif  // BATCHD_WORKLOADS_OGBG_OGBG_H_

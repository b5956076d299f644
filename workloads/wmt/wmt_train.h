// The wmt workload's train split: rows packed as AlgoPerf's pack_dataset
// packs them, window by window of the epoch's shuffled order (wmt.h tells
// the whole story). Its schedule is a PackedSchedule whose RowPacking is
// this workload; the rows come from the stream's LengthIndex (the lengths
// and stored token ids, shared by the daemon's streams of the same data)
// and its EpochTableCache.
//
// Thread safety: as Workload; the epoch tables are built under the cache's
// lock, the lengths under the index's.
#ifndef BATCHD_WORKLOADS_WMT_WMT_TRAIN_H_
#define BATCHD_WORKLOADS_WMT_WMT_TRAIN_H_

#include <memory>

#include "absl/status/statusor.h"
#include "workloads/wmt/pair_reader.h"
#include "workloads/workload.h"

namespace batchd {
namespace wmt {

// The train workload of `reader`'s pairs; its LengthIndex is the one the
// daemon's other streams of the same data use (config.shared), else new.
absl::StatusOr<std::unique_ptr<Workload>> CreateWmtTrainWorkload(
    std::shared_ptr<const PairReader> reader, const WorkloadConfig& config);

}  // namespace wmt
}  // namespace batchd

#endif  // BATCHD_WORKLOADS_WMT_WMT_TRAIN_H_

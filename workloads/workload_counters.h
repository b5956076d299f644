// What a workload counts while it fills items (decode errors, skipped
// examples, reads made back into the read-ahead): written by the workload
// through FillContext::counters(), read by the engine for the stream's
// status. Below fill_context.h, so that the server's parts that only count
// (fill_share) need not include the workload interface.
//
// Thread safety: atomic counters, any thread.
#ifndef BATCHD_WORKLOADS_WORKLOAD_COUNTERS_H_
#define BATCHD_WORKLOADS_WORKLOAD_COUNTERS_H_

#include <atomic>
#include <cstdint>

namespace batchd {

// Counters a workload keeps while filling (decode errors, skips).
struct WorkloadCounters {
  std::atomic<uint64_t> decode_errors{0};
  std::atomic<uint64_t> skipped_examples{0};
  // Reads a FillItem made back into the server's read-ahead (the engine's,
  // FillContext::reader_reads): 0 while the engine hands each item's
  // examples in its context.
  std::atomic<uint64_t> reader_reads{0};
};

}  // namespace batchd

#endif  // BATCHD_WORKLOADS_WORKLOAD_COUNTERS_H_

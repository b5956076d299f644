// The clocks, in nanoseconds. Thread-safe.
#ifndef BATCHD_BASE_CLOCK_H_
#define BATCHD_BASE_CLOCK_H_

#include <cstdint>

namespace batchd {

// CLOCK_MONOTONIC: shared by every process of the machine (the rings'
// heartbeats, deadlines, rates); never steps back.
uint64_t MonotonicNanos();

// CLOCK_REALTIME since the epoch: comparable with file times (st_mtim,
// st_ctim) and the log's timestamps; may step.
int64_t RealtimeNanos();

}  // namespace batchd

#endif  // BATCHD_BASE_CLOCK_H_

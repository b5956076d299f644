// GetStatus: the daemon's figures (pid, threads, memory, rings, read-ahead,
// quotas) and every stream's (spec, owner, throughput, indexing,
// read-ahead, ranks), as the v1::GetStatusResponse the service returns.
//
// Thread safety: constant after construction; Status() is thread-safe.
#ifndef BATCHD_SERVER_STATUS_H_
#define BATCHD_SERVER_STATUS_H_

#include <atomic>
#include <cstdint>
#include <vector>

#include "batchd/v1/batchd.pb.h"
#include "server/engine.h"
#include "server/readahead.h"
#include "server/stream_registry.h"

namespace batchd {

struct CoreOptions;

// Rank rows of one stream in a status (StreamStatus.ranks): attached ranks
// first; the stream's totals count the others (ranks_not_listed).
inline constexpr uint32_t kRankRowsPerStream = 64;

class StatusReporter {
 public:
  // Everything given must outlive the reporter; `start_ns` is when the
  // daemon started (MonotonicNanos).
  StatusReporter(const CoreOptions& options, const StreamRegistry& registry,
                 const Engine& engine, const ReadAhead& readahead,
                 uint64_t start_ns)
      : options_(options),
        registry_(registry),
        engine_(engine),
        readahead_(readahead),
        start_ns_(start_ns) {}

  // `readahead` (may be null) receives each stream's read-ahead figures in
  // the order of the response's streams (zeros when not read ahead).
  v1::GetStatusResponse Status(
      std::vector<ReadAheadStats>* readahead = nullptr) const;

 private:
  const CoreOptions& options_;
  const StreamRegistry& registry_;
  const Engine& engine_;
  const ReadAhead& readahead_;
  const uint64_t start_ns_;
  // Rings found with an impossible client-written counter.
  mutable std::atomic<uint64_t> invalid_counters_{0};
};

}  // namespace batchd

#endif  // BATCHD_SERVER_STATUS_H_

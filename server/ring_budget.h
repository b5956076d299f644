// The limits a stream and its rings must fit: streams at once, ring bytes
// of a stream and of all streams, and the quotas per owner uid (streams,
// ring bytes, resident model bytes), so that no one client or user can
// exhaust /dev/shm or starve another. The registry reports what is held;
// the budget says whether one more fits, and if not, which flag binds.
//
// Thread safety: constant after construction; every method is
// thread-safe.
#ifndef BATCHD_SERVER_RING_BUDGET_H_
#define BATCHD_SERVER_RING_BUDGET_H_

#include <cstdint>

#include "absl/status/status.h"
#include "batchd/v1/batchd.pb.h"
#include "server/access.h"

namespace batchd {

struct CoreOptions;

class RingBudget {
 public:
  // `options` (resolved by Core::Create) must outlive the budget.
  explicit RingBudget(const CoreOptions& options) : options_(options) {}

  // ResourceExhausted when a new stream would exceed --max-streams, the
  // daemon serving `streams` now.
  absl::Status CheckStreamCount(size_t streams) const;
  // ResourceExhausted naming the quota, the owner's use and the flag when
  // one more stream of `owner` (CheckStreamQuota), or one keeping
  // `model_bytes` resident (CheckModelQuota), would exceed its quota; OK
  // for exempt owners.
  absl::Status CheckStreamQuota(const v1::UidUsage& owner, bool exempt) const;
  absl::Status CheckModelQuota(const v1::UidUsage& owner, bool exempt,
                               uint64_t model_bytes) const;
  // What one more ring of `bytes` for the stream `key` may not exceed:
  // --max-stream-bytes (the stream holds `stream_bytes`), the owner's
  // quota unless `exempt` (it holds `owner_bytes`), and --max-ring-bytes
  // (all rings hold `total_bytes`).
  absl::Status CheckRing(const StreamKey& key, bool exempt,
                         uint64_t stream_bytes, uint64_t owner_bytes,
                         uint64_t total_bytes, uint64_t bytes) const;

 private:
  const CoreOptions& options_;
};

}  // namespace batchd

#endif  // BATCHD_SERVER_RING_BUDGET_H_

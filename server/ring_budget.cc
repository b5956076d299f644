// Limits and quotas; see ring_budget.h.
#include "server/ring_budget.h"

#include "absl/strings/str_cat.h"
#include "ring/ring.h"
#include "server/core_options.h"

namespace batchd {

absl::Status RingBudget::CheckStreamCount(size_t streams) const {
  if (streams < options_.max_streams) return absl::OkStatus();
  return absl::ResourceExhaustedError(
      absl::StrCat("batchd serves ", streams,
                   " streams, its limit (--max-streams ", options_.max_streams,
                   "); close one first"));
}

absl::Status RingBudget::CheckStreamQuota(const v1::UidUsage& owner,
                                          bool exempt) const {
  const uint32_t quota = options_.max_streams_per_uid;
  if (exempt || quota == 0) return absl::OkStatus();
  if (owner.streams() < quota) return absl::OkStatus();
  return absl::ResourceExhaustedError(
      absl::StrCat(DescribeOwner(owner.uid()), " owns ", owner.streams(),
                   " streams, its quota (--max-streams-per-uid ", quota,
                   "); close one first (batchctl close NAME)"));
}

absl::Status RingBudget::CheckModelQuota(const v1::UidUsage& owner,
                                         bool exempt,
                                         uint64_t model_bytes) const {
  const uint64_t quota = options_.max_model_bytes_per_uid;
  if (exempt || quota == 0) return absl::OkStatus();
  const uint64_t held = owner.model_bytes();
  if (held + model_bytes <= quota) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat(
      DescribeOwner(owner.uid()), " holds ", held,
      " resident model bytes; this stream's ", model_bytes,
      " would take it over its quota (--max-model-bytes-per-uid ", quota,
      "); close a stream of ", DescribeOwner(owner.uid()), " first"));
}

absl::Status RingBudget::CheckRing(const StreamKey& key, bool exempt,
                                   uint64_t stream_bytes, uint64_t owner_bytes,
                                   uint64_t total_bytes, uint64_t bytes) const {
  // A ring /dev/shm cannot hold at all is reported as that (by
  // RingWriter::Create, with the sizes), whatever the limits say.
  if (bytes > ShmFreeBytes()) return absl::OkStatus();
  const CoreOptions& o = options_;
  if (o.max_stream_bytes != 0 && stream_bytes + bytes > o.max_stream_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "stream '", key.second, "' would hold ", stream_bytes + bytes,
        " ring bytes on this node, over --max-stream-bytes ",
        o.max_stream_bytes));
  }
  if (!exempt && o.max_ring_bytes_per_uid != 0 &&
      owner_bytes + bytes > o.max_ring_bytes_per_uid) {
    return absl::ResourceExhaustedError(absl::StrCat(
        DescribeOwner(key.first), " holds ", owner_bytes,
        " ring bytes; this ring of ", bytes, " bytes (stream '", key.second,
        "') would take it over its quota (--max-ring-bytes-per-uid ",
        o.max_ring_bytes_per_uid, "); close a stream of ",
        DescribeOwner(key.first), " or ask for fewer slots"));
  }
  if (o.max_total_bytes != 0 && total_bytes + bytes > o.max_total_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("rings would take ", total_bytes + bytes,
                     " bytes, over --max-ring-bytes ", o.max_total_bytes));
  }
  return absl::OkStatus();
}

}  // namespace batchd

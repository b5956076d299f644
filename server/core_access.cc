// Core's rules of access and share (see core.h): who is an administrator,
// whose stream a request names and who may close it, and the limits and
// quotas per owner uid that a stream and its rings must fit.
#include <unistd.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "client/ring.h"
#include "server/core.h"

namespace batchd {

std::string DescribeOwner(uint32_t owner_uid) {
  return owner_uid == kAnonymousUid ? std::string("anonymous TCP callers")
                                    : absl::StrCat("uid ", owner_uid);
}

uint64_t Core::RingBytesInUse() const {
  uint64_t total = 0;
  for (const auto& [key, stream] : streams_) {
    for (const RankSeat& rs : stream->ranks) {
      if (rs.producer != nullptr) {
        total += rs.producer->ring().geometry().SegmentBytes();
      }
    }
  }
  return total;
}

bool Core::IsAdmin(const Caller& caller) const {
  if (!caller.known) return options_.anonymous_admin;
  if (caller.uid == 0 || caller.uid == geteuid()) return true;
  if (options_.admin_gid == gid_t(-1)) return false;
  if (caller.gid == options_.admin_gid) return true;
  return std::find(caller.groups.begin(), caller.groups.end(),
                   uint32_t(options_.admin_gid)) != caller.groups.end();
}

absl::Status Core::CheckAdmin(const Caller& caller,
                              const std::string& what) const {
  if (IsAdmin(caller)) return absl::OkStatus();
  return absl::PermissionDeniedError(absl::StrCat(
      what, " is for batchd's administrators (root, uid ", geteuid(),
      options_.admin_gid != gid_t(-1)
          ? absl::StrCat(", members of --admin-group ", options_.admin_gid)
          : std::string(),
      caller.known ? "" : "; TCP callers only with --tcp-admin", "), not ",
      caller.Describe()));
}

absl::StatusOr<Core::StreamKey> Core::AuthorizeOpen(
    const std::string& name, const Caller& caller,
    std::optional<uint32_t> owner_uid) const {
  const uint32_t own = OwnerOf(caller);
  if (!owner_uid.has_value() || *owner_uid == own) return StreamKey{own, name};
  // Another uid's stream is joined only when asked for by owner, and only
  // by an administrator: its data and its ranks are that uid's.
  if (!IsAdmin(caller)) {
    return absl::PermissionDeniedError(absl::StrCat(
        "stream '", name, "' of ", DescribeOwner(*owner_uid),
        " is not to be joined by ", caller.Describe(),
        ": joining another uid's stream (owner_uid ", *owner_uid,
        ") is for batchd's administrators (root, uid ", geteuid(),
        options_.admin_gid != gid_t(-1)
            ? absl::StrCat(", members of --admin-group ", options_.admin_gid)
            : std::string(),
        caller.known ? "" : "; TCP callers only with --tcp-admin",
        "); without owner_uid you open a stream of your own"));
  }
  return StreamKey{*owner_uid, name};
}

absl::Status Core::CheckRingLimits(const StreamKey& key, const Stream& stream,
                                   uint64_t bytes) const {
  // A ring /dev/shm cannot hold at all is reported as that (by Create, with
  // the sizes), whatever the limits say.
  if (bytes > ShmFreeBytes()) return absl::OkStatus();
  const CoreOptions& o = options_;
  uint64_t stream_bytes = 0;
  for (const RankSeat& other : stream.ranks) {
    if (other.producer != nullptr) {
      stream_bytes += other.producer->ring().geometry().SegmentBytes();
    }
  }
  if (o.max_stream_bytes != 0 && stream_bytes + bytes > o.max_stream_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "stream '", key.second, "' would hold ", stream_bytes + bytes,
        " ring bytes on this node, over --max-stream-bytes ",
        o.max_stream_bytes));
  }
  const uint64_t owner_bytes = UsageOf(key.first).ring_bytes;
  if (!stream.exempt && o.max_ring_bytes_per_uid != 0 &&
      owner_bytes + bytes > o.max_ring_bytes_per_uid) {
    return absl::ResourceExhaustedError(absl::StrCat(
        DescribeOwner(key.first), " holds ", owner_bytes,
        " ring bytes; this ring of ", bytes, " bytes (stream '", key.second,
        "') would take it over its quota (--max-ring-bytes-per-uid ",
        o.max_ring_bytes_per_uid, "); close a stream of ",
        DescribeOwner(key.first), " or ask for fewer slots"));
  }
  if (o.max_total_bytes != 0 && RingBytesInUse() + bytes > o.max_total_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("rings would take ", RingBytesInUse() + bytes,
                     " bytes, over --max-ring-bytes ", o.max_total_bytes));
  }
  return absl::OkStatus();
}

UidUsageData Core::UsageOf(uint32_t owner) const {
  UidUsageData u;
  u.uid = owner;
  u.known = owner != kAnonymousUid;
  for (auto it = streams_.lower_bound(StreamKey{owner, ""});
       it != streams_.end() && it->first.first == owner; ++it) {
    const Stream& st = *it->second;
    u.exempt = u.exempt || st.exempt;
    ++u.streams;
    u.model_bytes += st.setup->workload->resident_bytes();
    for (const RankSeat& rs : st.ranks) {
      if (rs.producer != nullptr) {
        u.ring_bytes += rs.producer->ring().geometry().SegmentBytes();
      }
    }
  }
  return u;
}

absl::Status Core::CheckStreamQuota(uint32_t owner, bool exempt) const {
  const uint32_t quota = options_.max_streams_per_uid;
  if (exempt || quota == 0) return absl::OkStatus();
  const uint32_t streams = UsageOf(owner).streams;
  if (streams < quota) return absl::OkStatus();
  return absl::ResourceExhaustedError(
      absl::StrCat(DescribeOwner(owner), " owns ", streams,
                   " streams, its quota (--max-streams-per-uid ", quota,
                   "); close one first (batchctl close NAME)"));
}

absl::Status Core::CheckModelQuota(uint32_t owner, bool exempt,
                                   uint64_t model_bytes) const {
  const uint64_t quota = options_.max_model_bytes_per_uid;
  if (exempt || quota == 0) return absl::OkStatus();
  const uint64_t held = UsageOf(owner).model_bytes;
  if (held + model_bytes <= quota) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat(
      DescribeOwner(owner), " holds ", held,
      " resident model bytes; this stream's ", model_bytes,
      " would take it over its quota (--max-model-bytes-per-uid ", quota,
      "); close a stream of ", DescribeOwner(owner), " first"));
}

absl::Status Core::CloseStream(const std::string& name, const Caller& caller,
                               std::optional<uint32_t> owner_uid) {
  const uint32_t own = OwnerOf(caller);
  const uint32_t owner = owner_uid.value_or(own);
  // Anonymous TCP callers own nothing they could prove is theirs.
  const bool owns = owner == own && caller.known;
  if (!owns && !IsAdmin(caller)) {
    return absl::PermissionDeniedError(absl::StrCat(
        "stream '", name, "' of ", DescribeOwner(owner),
        ": only its owner or batchd's administrators may close it, not ",
        caller.Describe()));
  }
  if (owner_uid.has_value()) return CloseStream(owner, name);
  std::vector<uint32_t> others;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (streams_.count(StreamKey{owner, name}) == 0) {
      for (const auto& [key, stream] : streams_) {
        if (key.second == name) others.push_back(key.first);
      }
    }
  }
  if (others.empty()) return CloseStream(owner, name);
  // Only another uid has a stream of that name: say whose, and how an
  // administrator names it.
  const std::string whose = DescribeOwner(others.front());
  if (!IsAdmin(caller)) {
    return absl::PermissionDeniedError(
        absl::StrCat("stream '", name, "' belongs to ", whose, ", not to ",
                     caller.Describe(),
                     " (who has no stream of that name); only its "
                     "owner or batchd's administrators may close it"));
  }
  return absl::NotFoundError(absl::StrCat(
      DescribeOwner(owner), " has no stream '", name, "'; ", whose,
      " has: name its owner to close it (owner_uid ", others.front(),
      "; batchctl close ", name, " --owner ", others.front(), ")"));
}

}  // namespace batchd

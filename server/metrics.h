// Prometheus text exposition of the server's status, served over HTTP by
// civetweb (Debian's libcivetweb) at /metrics when --metrics-listen is set.
//
// Thread safety: MetricsServer calls ControlPlane::GetStatus from
// civetweb's threads (the core is thread-safe); Start/destruction from one
// thread.
#ifndef BATCHD_SERVER_METRICS_H_
#define BATCHD_SERVER_METRICS_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "batchd/v1/batchd.pb.h"
#include "server/control_plane.h"

struct mg_context;
struct mg_connection;

namespace batchd {

// The exposition text (version 0.0.4) of one status snapshot.
// `readahead`: each stream's read-ahead figures, in the order of
// status.streams() (ControlPlane::GetStatus gives them).
// Rank samples come for at most kMaxRankRows ranks (status order), so the
// text stays bounded (about 1.5 MB of rank samples at most) whatever world
// sizes callers asked for; batchd_ranks_not_exported counts the others.
inline constexpr uint64_t kMaxRankRows = 1024;
std::string PrometheusText(const v1::GetStatusResponse& status,
                           const std::vector<ReadAheadStats>& readahead);

class MetricsServer {
 public:
  // civetweb's worker threads: connections served at once.
  static constexpr int kThreads = 16;
  // A request not read and answered within this is dropped.
  static constexpr int kRequestTimeoutMs = 3000;
  // Scrapes answered at once; more get 503 with Retry-After.
  static constexpr int kMaxScrapes = 2;

  // Listens on "HOST:PORT" (PORT 0 is not supported by civetweb: pick one).
  // `core` must outlive the server.
  static absl::StatusOr<std::unique_ptr<MetricsServer>> Start(
      const std::string& listen, const ControlPlane& core);
  ~MetricsServer();

 private:
  explicit MetricsServer(const ControlPlane& core) : core_(core) {}
  static int Handle(::mg_connection* conn, void* self);

  const ControlPlane& core_;
  mg_context* ctx_ = nullptr;
  std::atomic<int> scrapes_{0};  // being answered now
};

}  // namespace batchd

#endif  // BATCHD_SERVER_METRICS_H_

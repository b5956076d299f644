// What the daemon's faces ask of the core: the gRPC service
// (grpc_service.h) and the metrics endpoint (metrics.h) take a
// ControlPlane, and Core (core.h) is one. So neither face includes the core
// and its parts, and a test may stand a fake in for the core.
//
// Each call takes the protocol's request message (batchd/v1/batchd.proto)
// and the caller the kernel names, and returns the response message and an
// absl::Status; the faces only pass them through. The calls that prepare
// data (OpenStream, Plan) also take the call's Cancellation
// (base/work_context.h), which the face polls for its caller's going and
// deadline until the call returns: their work stops when it is
// cancelled.
//
// Thread safety: implementations are thread-safe.
#ifndef BATCHD_SERVER_CONTROL_PLANE_H_
#define BATCHD_SERVER_CONTROL_PLANE_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/work_context.h"
#include "batchd/v1/batchd.pb.h"
#include "server/caller.h"

namespace batchd {

struct ReadAheadStats;  // server/readahead.h

class ControlPlane {
 public:
  virtual ~ControlPlane() = default;

  // The rank req.rank() of req.spec(), for `caller` (Core::OpenStream).
  virtual absl::StatusOr<v1::OpenStreamResponse> OpenStream(
      const v1::OpenStreamRequest& req, const Caller& caller,
      const std::shared_ptr<Cancellation>& cancel) = 0;
  virtual absl::Status CloseStream(const v1::CloseStreamRequest& req,
                                   const Caller& caller) = 0;
  // OK when `caller` may drain or shut down the daemon; PermissionDenied
  // naming `what` otherwise.
  virtual absl::Status CheckAdmin(const Caller& caller,
                                  const std::string& what) const = 0;
  // What req.spec() would need, without creating anything; its data read
  // with `caller`'s permissions.
  virtual absl::StatusOr<v1::PlanResponse> Plan(
      const v1::PlanRequest& req, const Caller& caller,
      const std::shared_ptr<Cancellation>& cancel) const = 0;
  // Refuses new streams from now on; for administrators only.
  virtual absl::StatusOr<v1::DrainResponse> Drain(const v1::DrainRequest& req,
                                                  const Caller& caller) = 0;
  // The status; `readahead` (may be null) receives each stream's
  // read-ahead figures in the order of the response's streams.
  virtual v1::GetStatusResponse GetStatus(
      std::vector<ReadAheadStats>* readahead) const = 0;
};

}  // namespace batchd

#endif  // BATCHD_SERVER_CONTROL_PLANE_H_

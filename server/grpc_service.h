// The gRPC face of the core: each handler is one line. Every handler that
// needs its caller's identity takes it from `identify` (the kernel's word,
// see peer.h), never from a request field; the core decides what the
// caller may do.
#ifndef BATCHD_SERVER_GRPC_SERVICE_H_
#define BATCHD_SERVER_GRPC_SERVICE_H_

#include <functional>

#include "batchd/v1/batchd.grpc.pb.h"
#include "server/caller.h"
#include "server/control_plane.h"

namespace batchd {

class BatchdService final : public v1::Batchd::Service {
 public:
  using Identify = std::function<Caller(const grpc::ServerContext&)>;
  // `core` (the daemon's Core) must outlive the service; `on_shutdown` is
  // called by Shutdown (for administrators only); `identify` names a
  // call's caller (default: everyone is anonymous).
  BatchdService(ControlPlane& core, std::function<void()> on_shutdown,
                Identify identify = nullptr)
      : core_(core),
        on_shutdown_(std::move(on_shutdown)),
        identify_(std::move(identify)) {}

  grpc::Status OpenStream(grpc::ServerContext*,
                          const v1::OpenStreamRequest* req,
                          v1::OpenStreamResponse* resp) override;
  grpc::Status CloseStream(grpc::ServerContext*,
                           const v1::CloseStreamRequest* req,
                           v1::CloseStreamResponse*) override;
  grpc::Status GetStatus(grpc::ServerContext*, const v1::GetStatusRequest*,
                         v1::GetStatusResponse* resp) override;
  grpc::Status Shutdown(grpc::ServerContext*, const v1::ShutdownRequest*,
                        v1::ShutdownResponse*) override;
  grpc::Status Drain(grpc::ServerContext*, const v1::DrainRequest* req,
                     v1::DrainResponse* resp) override;
  grpc::Status Plan(grpc::ServerContext*, const v1::PlanRequest* req,
                    v1::PlanResponse* resp) override;

 private:
  Caller CallerOf(const grpc::ServerContext* ctx) const {
    return identify_ ? identify_(*ctx) : Caller();
  }

  ControlPlane& core_;
  std::function<void()> on_shutdown_;
  Identify identify_;
};

}  // namespace batchd

#endif  // BATCHD_SERVER_GRPC_SERVICE_H_

// The gRPC face of the core: each handler is one line.
#ifndef BATCHD_SERVER_GRPC_SERVICE_H_
#define BATCHD_SERVER_GRPC_SERVICE_H_

#include <functional>

#include "batchd/v1/batchd.grpc.pb.h"
#include "server/core.h"

namespace batchd {

class BatchdService final : public v1::Batchd::Service {
 public:
  // `core` must outlive the service; `on_shutdown` is called by Shutdown.
  BatchdService(Core& core, std::function<void()> on_shutdown)
      : core_(core), on_shutdown_(std::move(on_shutdown)) {}

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
  grpc::Status Drain(grpc::ServerContext*, const v1::DrainRequest*,
                     v1::DrainResponse* resp) override;
  grpc::Status Plan(grpc::ServerContext*, const v1::PlanRequest* req,
                    v1::PlanResponse* resp) override;

 private:
  Core& core_;
  std::function<void()> on_shutdown_;
};

}  // namespace batchd

#endif  // BATCHD_SERVER_GRPC_SERVICE_H_

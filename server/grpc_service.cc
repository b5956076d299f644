// gRPC handlers: one line each, into the core, which takes and returns the
// messages; only the status is converted, here.
#include "server/grpc_service.h"

namespace batchd {

namespace {

grpc::Status ToGrpc(const absl::Status& s) {
  if (s.ok()) return grpc::Status::OK;
  // absl and gRPC share the canonical code numbers.
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()),
                      std::string(s.message()));
}

template <typename T>
grpc::Status Reply(absl::StatusOr<T> result, T* proto) {
  if (result.ok()) *proto = *std::move(result);
  return ToGrpc(result.status());
}

}  // namespace

grpc::Status BatchdService::OpenStream(grpc::ServerContext* ctx,
                                       const v1::OpenStreamRequest* req,
                                       v1::OpenStreamResponse* resp) {
  return Reply(core_.OpenStream(*req, CallerOf(ctx)), resp);
}

grpc::Status BatchdService::CloseStream(grpc::ServerContext* ctx,
                                        const v1::CloseStreamRequest* req,
                                        v1::CloseStreamResponse*) {
  return ToGrpc(core_.CloseStream(*req, CallerOf(ctx)));
}

grpc::Status BatchdService::GetStatus(grpc::ServerContext*,
                                      const v1::GetStatusRequest*,
                                      v1::GetStatusResponse* resp) {
  *resp = core_.GetStatus(nullptr);
  return grpc::Status::OK;
}

grpc::Status BatchdService::Shutdown(grpc::ServerContext* ctx,
                                     const v1::ShutdownRequest*,
                                     v1::ShutdownResponse*) {
  absl::Status allowed = core_.CheckAdmin(CallerOf(ctx), "Shutdown");
  return allowed.ok() ? (on_shutdown_(), grpc::Status::OK) : ToGrpc(allowed);
}

grpc::Status BatchdService::Drain(grpc::ServerContext* ctx,
                                  const v1::DrainRequest* req,
                                  v1::DrainResponse* resp) {
  return Reply(core_.Drain(*req, CallerOf(ctx)), resp);
}

grpc::Status BatchdService::Plan(grpc::ServerContext* ctx,
                                 const v1::PlanRequest* req,
                                 v1::PlanResponse* resp) {
  return Reply(core_.Plan(*req, CallerOf(ctx)), resp);
}

}  // namespace batchd

// gRPC handlers: one line each, into the core; convert.cc does the rest.
#include "server/grpc_service.h"

#include "server/convert.h"

namespace batchd {

namespace {

template <typename T, typename P>
grpc::Status Reply(const absl::StatusOr<T>& result, P* proto) {
  if (result.ok()) ToProto(*result, proto);
  return ToGrpc(result.status());
}

}  // namespace

grpc::Status BatchdService::OpenStream(grpc::ServerContext*,
                                       const v1::OpenStreamRequest* req,
                                       v1::OpenStreamResponse* resp) {
  if (absl::Status s = CheckClientProtocol(*req); !s.ok()) return ToGrpc(s);
  return Reply(core_.OpenStream(FromProto(req->spec()), req->rank(),
                                req->client_pid()),
               resp);
}

grpc::Status BatchdService::CloseStream(grpc::ServerContext*,
                                        const v1::CloseStreamRequest* req,
                                        v1::CloseStreamResponse*) {
  return ToGrpc(core_.CloseStream(req->name()));
}

grpc::Status BatchdService::GetStatus(grpc::ServerContext*,
                                      const v1::GetStatusRequest*,
                                      v1::GetStatusResponse* resp) {
  return Reply(absl::StatusOr<ServerStatusData>(core_.GetStatus()), resp);
}

grpc::Status BatchdService::Shutdown(grpc::ServerContext*,
                                     const v1::ShutdownRequest*,
                                     v1::ShutdownResponse*) {
  return on_shutdown_(), grpc::Status::OK;
}

grpc::Status BatchdService::Drain(grpc::ServerContext*,
                                  const v1::DrainRequest*,
                                  v1::DrainResponse* resp) {
  return resp->set_attached_ranks(core_.Drain()), grpc::Status::OK;
}

grpc::Status BatchdService::Plan(grpc::ServerContext*,
                                 const v1::PlanRequest* req,
                                 v1::PlanResponse* resp) {
  return Reply(core_.Plan(FromProto(req->spec())), resp);
}

}  // namespace batchd

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

// req->client_pid() is not read: anyone could name another job's pid.
grpc::Status BatchdService::OpenStream(grpc::ServerContext* ctx,
                                       const v1::OpenStreamRequest* req,
                                       v1::OpenStreamResponse* resp) {
  if (absl::Status s = CheckClientProtocol(*req); !s.ok()) return ToGrpc(s);
  const std::optional<RankResume> resume = FromProto(*req);
  return Reply(core_.OpenStream(FromProto(req->spec()), req->rank(),
                                CallerOf(ctx), OwnerOf(*req),
                                resume ? &*resume : nullptr),
               resp);
}

grpc::Status BatchdService::CloseStream(grpc::ServerContext* ctx,
                                        const v1::CloseStreamRequest* req,
                                        v1::CloseStreamResponse*) {
  return ToGrpc(core_.CloseStream(req->name(), CallerOf(ctx), OwnerOf(*req)));
}

grpc::Status BatchdService::GetStatus(grpc::ServerContext*,
                                      const v1::GetStatusRequest*,
                                      v1::GetStatusResponse* resp) {
  return Reply(absl::StatusOr<ServerStatusData>(core_.GetStatus()), resp);
}

grpc::Status BatchdService::Shutdown(grpc::ServerContext* ctx,
                                     const v1::ShutdownRequest*,
                                     v1::ShutdownResponse*) {
  absl::Status allowed = core_.CheckAdmin(CallerOf(ctx), "Shutdown");
  return allowed.ok() ? (on_shutdown_(), grpc::Status::OK) : ToGrpc(allowed);
}

grpc::Status BatchdService::Drain(grpc::ServerContext* ctx,
                                  const v1::DrainRequest*,
                                  v1::DrainResponse* resp) {
  absl::StatusOr<uint32_t> attached = core_.Drain(CallerOf(ctx));
  if (attached.ok()) resp->set_attached_ranks(*attached);
  return ToGrpc(attached.status());
}

grpc::Status BatchdService::Plan(grpc::ServerContext*,
                                 const v1::PlanRequest* req,
                                 v1::PlanResponse* resp) {
  return Reply(core_.Plan(FromProto(req->spec())), resp);
}

}  // namespace batchd

// gRPC handlers: one line each, into the core, which takes and returns the
// messages; only the status is converted, here (with the "still preparing"
// answer's message, client/preparing.h), and a call's cancellation made
// from its context.
#include "server/grpc_service.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "absl/strings/cord.h"
#include "base/clock.h"
#include "base/work_context.h"
#include "client/preparing.h"

namespace batchd {

namespace {

// The Cancellation of one call, for as long as its handler runs: its client
// gone (ServerContext::IsCancelled, which gRPC keeps thread-safe for the
// sync API) or its deadline passed. Finished when the handler returns, so
// that nothing asks the context after gRPC has destroyed it.
class CallCancellation {
 public:
  explicit CallCancellation(grpc::ServerContext* ctx)
      : cancel_(std::make_shared<Cancellation>(
            [ctx] { return ctx->IsCancelled(); }, DeadlineOf(*ctx))) {}
  ~CallCancellation() { cancel_->Finish(); }
  CallCancellation(const CallCancellation&) = delete;
  CallCancellation& operator=(const CallCancellation&) = delete;

  const std::shared_ptr<Cancellation>& get() const { return cancel_; }

 private:
  // The call's deadline on the monotonic clock; 0 when it has none.
  static uint64_t DeadlineOf(const grpc::ServerContext& ctx) {
    const auto deadline = ctx.deadline();
    if (deadline == std::chrono::system_clock::time_point::max()) return 0;
    const int64_t left_ns =
        std::chrono::duration_cast<std::chrono::nanoseconds>(
            deadline - std::chrono::system_clock::now())
            .count();
    // Years ahead is none; one already past is due now.
    if (left_ns > int64_t(1e18)) return 0;
    return MonotonicNanos() + uint64_t(std::max<int64_t>(left_ns, 0)) + 1;
  }

  const std::shared_ptr<Cancellation> cancel_;
};

grpc::Status ToGrpc(const absl::Status& s) {
  if (s.ok()) return grpc::Status::OK;
  // absl and gRPC share the canonical code numbers.
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()),
                      std::string(s.message()));
}

// The same; a "still preparing" answer's v1::Preparing goes into the
// call's trailing metadata (client/preparing.h).
grpc::Status ToGrpc(const absl::Status& s, grpc::ServerContext* ctx) {
  if (const auto preparing = s.GetPayload(kPreparingPayload)) {
    ctx->AddTrailingMetadata(kPreparingMetadata, std::string(*preparing));
  }
  return ToGrpc(s);
}

template <typename T>
grpc::Status Reply(absl::StatusOr<T> result, T* proto,
                   grpc::ServerContext* ctx) {
  if (result.ok()) *proto = *std::move(result);
  return ToGrpc(result.status(), ctx);
}

}  // namespace

grpc::Status BatchdService::OpenStream(grpc::ServerContext* ctx,
                                       const v1::OpenStreamRequest* req,
                                       v1::OpenStreamResponse* resp) {
  return Reply(
      core_.OpenStream(*req, CallerOf(ctx), CallCancellation(ctx).get()), resp,
      ctx);
}

grpc::Status BatchdService::CloseStream(grpc::ServerContext* ctx,
                                        const v1::CloseStreamRequest* req,
                                        v1::CloseStreamResponse*) {
  return ToGrpc(core_.CloseStream(*req, CallerOf(ctx)));
}

grpc::Status BatchdService::GetStatus(grpc::ServerContext* ctx,
                                      const v1::GetStatusRequest*,
                                      v1::GetStatusResponse* resp) {
  *resp = core_.GetStatus(nullptr);
  // What another owner's preparation lists or counts (class folders of a
  // directory the caller may not read) is its owner's and the
  // administrators' to see: others get the stream, owner and time only.
  const Caller caller = CallerOf(ctx);
  if (!core_.CheckAdmin(caller, "GetStatus").ok()) {
    for (v1::Preparing& p : *resp->mutable_preparations()) {
      if (p.owner_uid() == OwnerOf(caller)) continue;
      p.clear_what();
      p.clear_unit();
      p.clear_done();
      p.clear_total();
    }
  }
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
  return Reply(core_.Drain(*req, CallerOf(ctx)), resp, ctx);
}

grpc::Status BatchdService::Plan(grpc::ServerContext* ctx,
                                 const v1::PlanRequest* req,
                                 v1::PlanResponse* resp) {
  return Reply(core_.Plan(*req, CallerOf(ctx), CallCancellation(ctx).get()),
               resp, ctx);
}

}  // namespace batchd

// batchctl's gRPC wrapper; see control.h.
#include "tools/batchctl/control.h"

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/process.h"

namespace batchd::batchctl {
namespace {

// A status lists at most 64 rank rows a stream, but up to --max-streams
// specs of up to ~280 KB each (64 options of 4 KB): more than gRPC's
// default 4 MB, which must not keep an operator from seeing the daemon.
constexpr int kMaxReceiveBytes = 256 << 20;

std::shared_ptr<grpc::Channel> MakeChannel(const Connection& c) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kMaxReceiveBytes);
  return grpc::CreateCustomChannel(c.target,
                                   c.credentials != nullptr
                                       ? c.credentials
                                       : grpc::InsecureChannelCredentials(),
                                   args);
}

}  // namespace

Control::Control(const Connection& c)
    : address_(c.address),
      timeout_seconds_(c.timeout),
      tls_(c.credentials != nullptr),
      stub_(v1::Batchd::NewStub(MakeChannel(c))) {}

template <typename Request, typename Response>
absl::StatusOr<Response> Control::Call(
    const std::string& call,
    grpc::Status (v1::Batchd::Stub::*method)(grpc::ClientContext*,
                                             const Request&, Response*),
    const Request& req) {
  Response resp;
  grpc::ClientContext ctx;
  SetDeadline(&ctx);
  absl::Status s = Check(call, (stub_.get()->*method)(&ctx, req, &resp));
  if (!s.ok()) return s;
  return resp;
}

absl::StatusOr<v1::GetStatusResponse> Control::GetStatus() {
  return Call("GetStatus", &v1::Batchd::Stub::GetStatus,
              v1::GetStatusRequest());
}

absl::Status Control::Shutdown() {
  return Call("Shutdown", &v1::Batchd::Stub::Shutdown, v1::ShutdownRequest())
      .status();
}

absl::Status Control::CloseStream(const std::string& name,
                                  std::optional<uint32_t> owner_uid) {
  v1::CloseStreamRequest req;
  req.set_name(name);
  if (owner_uid.has_value()) req.set_owner_uid(*owner_uid);
  return Call(absl::StrCat("CloseStream ", name),
              &v1::Batchd::Stub::CloseStream, req)
      .status();
}

absl::StatusOr<v1::DrainResponse> Control::Drain() {
  return Call("Drain", &v1::Batchd::Stub::Drain, v1::DrainRequest());
}

absl::StatusOr<v1::PlanResponse> Control::Plan(const v1::StreamSpec& spec) {
  v1::PlanRequest req;
  *req.mutable_spec() = spec;
  return Call("Plan", &v1::Batchd::Stub::Plan, req);
}

bool Control::Answers(double seconds) {
  v1::GetStatusResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() +
                   std::chrono::milliseconds(int64_t(seconds * 1000)));
  return stub_->GetStatus(&ctx, v1::GetStatusRequest(), &resp).ok();
}

void Control::SetDeadline(grpc::ClientContext* ctx) const {
  ctx->set_deadline(
      std::chrono::system_clock::now() +
      std::chrono::milliseconds(int64_t(timeout_seconds_ * 1000)));
}

absl::Status Control::Check(const std::string& call,
                            const grpc::Status& s) const {
  if (s.ok()) return absl::OkStatus();
  return absl::Status(
      static_cast<absl::StatusCode>(s.error_code()),
      absl::StrCat(call, " at ", address_, ": ", s.error_message(),
                   FailureHint(s.error_code(), address_, tls_)));
}

std::string FailureHint(grpc::StatusCode code, const std::string& address,
                        bool tls) {
  const bool unreachable = code == grpc::StatusCode::UNAVAILABLE ||
                           code == grpc::StatusCode::DEADLINE_EXCEEDED;
  if (unreachable && !tls && address.rfind("tcp://", 0) == 0) {
    return " (is batchd running there? does it serve TLS: --tls-ca?)";
  }
  if (unreachable) return " (is batchd running there?)";
  if (code == grpc::StatusCode::UNIMPLEMENTED) {
    return " (the daemon is older than this batchctl)";
  }
  return "";
}

bool DaemonProcessVisible(uint32_t pid) {
  if (pid == 0 || !ProcessAlive(pid, 0, 0)) return false;
  FILE* f = fopen(absl::StrCat("/proc/", pid, "/comm").c_str(), "re");
  if (f == nullptr) return false;
  char comm[64] = {0};
  const bool read = fgets(comm, sizeof(comm), f) != nullptr;
  fclose(f);
  return read && strncmp(comm, "batchd", 6) == 0;
}

}  // namespace batchd::batchctl

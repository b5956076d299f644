// The daemon's control plane as batchctl calls it: each gRPC failure becomes
// an absl::Status that names the call, the address and a hint.
#ifndef BATCHD_TOOLS_BATCHCTL_CONTROL_H_
#define BATCHD_TOOLS_BATCHCTL_CONTROL_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "batchd/v1/batchd.grpc.pb.h"
#include "tools/batchctl/cli.h"

namespace batchd::batchctl {

// One channel to one daemon. Not thread-safe; create it only after any
// fork(): gRPC's threads and locks do not survive one.
class Control {
 public:
  explicit Control(const Connection& c);

  absl::StatusOr<v1::GetStatusResponse> GetStatus();
  absl::Status Shutdown();
  // The caller's own stream `name`, or `owner_uid`'s (administrators).
  absl::Status CloseStream(const std::string& name,
                           std::optional<uint32_t> owner_uid = std::nullopt);
  absl::StatusOr<v1::DrainResponse> Drain();
  absl::StatusOr<v1::PlanResponse> Plan(const v1::StreamSpec& spec);

  // True while the daemon answers a GetStatus within `seconds`.
  bool Answers(double seconds);

 private:
  // One call of `method` with the deadline; a failure says `call`.
  template <typename Request, typename Response>
  absl::StatusOr<Response> Call(
      const std::string& call,
      grpc::Status (v1::Batchd::Stub::*method)(grpc::ClientContext*,
                                               const Request&, Response*),
      const Request& req);
  void SetDeadline(grpc::ClientContext* ctx) const;
  absl::Status Check(const std::string& call, const grpc::Status& s) const;

  const std::string address_;
  const double timeout_seconds_;
  const bool tls_;
  std::unique_ptr<v1::Batchd::Stub> stub_;
};

// The hint for a failed call to `address` (with or without TLS): "" or
// " (is batchd running there?)" and the like.
std::string FailureHint(grpc::StatusCode code, const std::string& address,
                        bool tls);

// True while a process `pid` that looks like a batchd daemon is visible
// here (a daemon in another pid namespace is not, and its pid may name some
// other process of ours: the command name tells).
bool DaemonProcessVisible(uint32_t pid);

}  // namespace batchd::batchctl

#endif  // BATCHD_TOOLS_BATCHCTL_CONTROL_H_

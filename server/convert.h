// The one place where core structs and absl::Status meet protos and
// grpc::Status.
#ifndef BATCHD_SERVER_CONVERT_H_
#define BATCHD_SERVER_CONVERT_H_

#include <grpcpp/grpcpp.h>

#include <optional>

#include "absl/status/status.h"
#include "batchd/v1/batchd.pb.h"
#include "server/core.h"

namespace batchd {

grpc::Status ToGrpc(const absl::Status& status);
StreamSpec FromProto(const v1::StreamSpec& p);
// The request's resume of its rank, if it names one.
std::optional<RankResume> FromProto(const v1::OpenStreamRequest& req);
void ToProto(const StreamSpec& s, v1::StreamSpec* p);
void ToProto(const OpenResult& r, v1::OpenStreamResponse* p);
void ToProto(const ServerStatusData& s, v1::GetStatusResponse* p);
void ToProto(const PlanResult& r, v1::PlanResponse* p);
// The request's owner_uid when set: whose stream it names.
std::optional<uint32_t> OwnerOf(const v1::OpenStreamRequest& req);
std::optional<uint32_t> OwnerOf(const v1::CloseStreamRequest& req);

// The protocol this daemon speaks: kProtocolVersion, or, with
// BATCHD_TEST_HOOKS=1, the number in BATCHD_TEST_PROTOCOL_VERSION, so that
// tests can play a daemon of another protocol.
uint32_t ServerProtocolVersion();
// FailedPrecondition naming both releases and protocols when the client of
// `req` speaks another protocol than this daemon.
absl::Status CheckClientProtocol(const v1::OpenStreamRequest& req);

}  // namespace batchd

#endif  // BATCHD_SERVER_CONVERT_H_

// The protocol this daemon speaks, and the check of a client's.
//
// Thread safety: thread-safe.
#ifndef BATCHD_SERVER_PROTOCOL_H_
#define BATCHD_SERVER_PROTOCOL_H_

#include <cstdint>

#include "absl/status/status.h"
#include "batchd/v1/batchd.pb.h"

namespace batchd {

// The protocol this daemon speaks: kProtocolVersion, or, with
// BATCHD_TEST_HOOKS=1, the number in BATCHD_TEST_PROTOCOL_VERSION, so that
// tests can play a daemon of another protocol.
uint32_t ServerProtocolVersion();
// FailedPrecondition naming both releases and protocols when the client of
// `req` speaks another protocol than this daemon.
absl::Status CheckClientProtocol(const v1::OpenStreamRequest& req);

}  // namespace batchd

#endif  // BATCHD_SERVER_PROTOCOL_H_

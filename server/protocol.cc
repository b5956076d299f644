// The daemon's protocol; see protocol.h.
#include "server/protocol.h"

#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/test_hooks.h"
#include "batchd/version.h"

namespace batchd {

uint32_t ServerProtocolVersion() {
  const char* claimed = TestHook("BATCHD_TEST_PROTOCOL_VERSION");
  uint32_t version;
  if (claimed != nullptr && absl::SimpleAtoi(claimed, &version)) {
    return version;
  }
  return kProtocolVersion;
}

absl::Status CheckClientProtocol(const v1::OpenStreamRequest& req) {
  // Clients from before the field send 0 and speak protocol 1.
  const uint32_t client =
      req.protocol_version() == 0 ? 1 : req.protocol_version();
  const uint32_t server = ServerProtocolVersion();
  if (client == server) return absl::OkStatus();
  const std::string client_release = req.client_version().empty()
                                         ? "an older release"
                                         : "batchd " + req.client_version();
  return absl::FailedPreconditionError(absl::StrCat(
      "incompatible batchd protocol: this client (", client_release,
      ") speaks protocol ", client, " but the server (batchd ", kBatchdVersion,
      ") speaks protocol ", server, "; install the client of release ",
      kBatchdVersion, " (pip install batchd==", kBatchdVersion, ")"));
}

}  // namespace batchd

// batchctl close STREAM: closes one stream and frees its rings.
#ifndef BATCHD_TOOLS_BATCHCTL_CLOSE_H_
#define BATCHD_TOOLS_BATCHCTL_CLOSE_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "tools/batchctl/cli.h"

namespace batchd::batchctl {

// The owner uid under which the daemon keys the streams of anonymous TCP
// callers (its kAnonymousUid).
constexpr uint32_t kAnonymousOwner = 0xFFFFFFFFu;

struct CloseArgs {
  Connection connection;
  std::string stream;
  // --owner: whose stream (a uid; "tcp": anonymous TCP callers'); unset:
  // the caller's own.
  std::optional<uint32_t> owner_uid;
  bool json = false;  // --json: {"closed", "owner_uid", "server"}
};
// argv[0] is "close". A stream name that starts with '-' comes after "--".
absl::StatusOr<CloseArgs> ParseCloseArgs(int argc, char** argv);

}  // namespace batchd::batchctl

#endif  // BATCHD_TOOLS_BATCHCTL_CLOSE_H_

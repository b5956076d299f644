// batchctl close STREAM: closes one stream and frees its rings.
#ifndef BATCHD_TOOLS_BATCHCTL_CLOSE_H_
#define BATCHD_TOOLS_BATCHCTL_CLOSE_H_

#include <string>

#include "absl/status/statusor.h"
#include "tools/batchctl/cli.h"

namespace batchd::batchctl {

struct CloseArgs {
  Connection connection;
  std::string stream;
};
// argv[0] is "close". A stream name that starts with '-' comes after "--".
absl::StatusOr<CloseArgs> ParseCloseArgs(int argc, char** argv);

}  // namespace batchd::batchctl

#endif  // BATCHD_TOOLS_BATCHCTL_CLOSE_H_

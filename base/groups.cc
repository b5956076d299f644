// Group names and gids; see groups.h.
#include "base/groups.h"

#include <grp.h>
#include <unistd.h>

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace batchd {

absl::StatusOr<gid_t> ResolveGroup(const std::string& flag,
                                   const std::string& group) {
  int64_t gid;
  if (absl::SimpleAtoi(group, &gid)) return gid_t(gid);
  long hint = sysconf(_SC_GETGR_R_SIZE_MAX);
  std::vector<char> buf(hint > 0 ? size_t(hint) : 16384);
  struct group entry;
  struct group* found = nullptr;
  int rc;
  while ((rc = getgrnam_r(group.c_str(), &entry, buf.data(), buf.size(),
                          &found)) == ERANGE) {
    buf.resize(buf.size() * 2);
  }
  if (rc != 0 || found == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, ": no group named '", group, "'"));
  }
  return found->gr_gid;
}

}  // namespace batchd

// Unix groups named in settings (--shm-group, --admin-group,
// --socket-group): a name or a numeric gid.
//
// Thread safety: thread-safe (getgrnam_r).
#ifndef BATCHD_BASE_GROUPS_H_
#define BATCHD_BASE_GROUPS_H_

#include <sys/types.h>

#include <string>

#include "absl/status/statusor.h"

namespace batchd {

// The gid of `group`: a decimal number is taken as a gid as it is, anything
// else is looked up as a group name. InvalidArgument
// "--<flag>: no group named '<group>'" when there is no such group.
absl::StatusOr<gid_t> ResolveGroup(const std::string& flag,
                                   const std::string& group);

}  // namespace batchd

#endif  // BATCHD_BASE_GROUPS_H_

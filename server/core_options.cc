// The core's options resolved; see core_options.h.
#include "server/core_options.h"

#include <limits.h>
#include <sched.h>
#include <stdlib.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "base/executor.h"
#include "storage/data_file.h"

namespace batchd {
namespace {

int DefaultThreads() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    return std::max(1, CPU_COUNT(&set));
  }
  return std::max(1L, sysconf(_SC_NPROCESSORS_ONLN));
}

}  // namespace

absl::StatusOr<CoreOptions> ResolveCoreOptions(const CoreOptions& options) {
  CoreOptions o = options;
  char resolved[PATH_MAX];
  if (realpath(o.data_root.c_str(), resolved) == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("--data-root ", o.data_root, " does not exist"));
  }
  if (o.data_root != resolved) {
    // Absolute links in the data tree may name the root as the operator
    // does (/data -> /mnt/nvme/data): the data root's walk accepts both.
    std::string given = o.data_root;
    char cwd[PATH_MAX];
    if (given[0] != '/' && getcwd(cwd, sizeof(cwd)) != nullptr) {
      given = absl::StrCat(cwd, "/", given);
    }
    if (given[0] == '/') DataRoot::AddOperatorName(resolved, given);
  }
  o.data_root = resolved;
  if (o.threads <= 0) o.threads = DefaultThreads();
  if (o.index_threads <= 0) {
    o.index_threads = std::min(DefaultThreads(), Executor::kMaxThreads);
  }
  struct statvfs shm;
  const uint64_t shm_bytes = statvfs("/dev/shm", &shm) == 0
                                 ? uint64_t(shm.f_blocks) * shm.f_frsize
                                 : 0;
  if (o.max_total_bytes == CoreOptions::kAutoRingBytes) {
    o.max_total_bytes = shm_bytes / 2;
  }
  if (o.max_ring_bytes_per_uid == CoreOptions::kAutoRingBytes) {
    // A quarter of what all rings may take: four users at their full quota.
    o.max_ring_bytes_per_uid =
        (o.max_total_bytes != 0 ? o.max_total_bytes : shm_bytes) / 4;
  }
  if (o.max_streams_per_uid == CoreOptions::kAutoStreams) {
    // A quarter of the streams: four users fit at their full quota.
    o.max_streams_per_uid = std::max<uint32_t>(1, o.max_streams / 4);
  }
  if (o.default_slots == 0) o.default_slots = 4;
  if (o.shm_prefix.empty() || o.shm_prefix.find('/') != std::string::npos ||
      o.shm_prefix.find('.') != std::string::npos) {
    return absl::InvalidArgumentError(
        "--shm-prefix must be a non-empty name without '/' or '.'");
  }
  return o;
}

}  // namespace batchd

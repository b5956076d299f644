// What a parsing helper process (hdf5_helper.h) gives up before it reads
// the first byte of a user's file: the daemon's identity, the right to
// open anything, and memory beyond a bound. A library that parses for us
// (libhdf5 here) may follow names a file holds (external storage, links)
// or be taken over by a crafted file; confined, it can reach nothing but
// the descriptors it was handed.
//
// ConfineHelper, in order:
//   - credentials: when asked (the daemon is root), the stream owner's
//     supplementary groups, gid and uid, real, effective and saved (the
//     uid last: it drops every capability); verified after;
//   - PR_SET_NO_NEW_PRIVS and PR_SET_DUMPABLE 0 (no other process of the
//     same uid may trace it or read its memory);
//   - RLIMIT_DATA (heap and private writable mappings; a read-only
//     mapping of a file is not counted), unless the build runs under a
//     sanitizer, whose shadow memory counts;
//   - a seccomp filter (libseccomp) under which every system call that
//     opens, names or changes a file by path, starts a program, makes a
//     socket, or reaches another process fails with EPERM (not a kill: a
//     library that tries reports an error the daemon can pass on, naming
//     the file). Signals, limits and scheduling apply to the helper itself
//     only; TIOCSTI (typing into a terminal) is refused. Calls of another
//     ABI (i386, x32) kill the process. The filter is inherited by every
//     thread started after it.
//
// Thread safety: ConfineHelper is for a single-threaded process, once.
#ifndef BATCHD_WORKLOADS_FASTMRI_HELPER_SANDBOX_H_
#define BATCHD_WORKLOADS_FASTMRI_HELPER_SANDBOX_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace batchd {

struct HelperCredentials {
  bool change = false;  // false: keep the daemon's
  uint32_t uid = 0;
  uint32_t gid = 0;
  std::vector<uint32_t> groups;
};

// The uid and gid a root daemon's helpers take when no user owns the
// stream (the daemon's own streams, TCP callers'): the kernel's overflow
// ids, "nobody", which own nothing.
inline constexpr uint32_t kNobody = 65534;

// "-" or "uid:gid:g1,g2,...": how credentials travel in the helper's
// environment.
std::string EncodeCredentials(const HelperCredentials& c);
absl::StatusOr<HelperCredentials> DecodeCredentials(const std::string& s);

// Whether this build runs under AddressSanitizer, ThreadSanitizer or
// MemorySanitizer (no RLIMIT_DATA then; a helper's stderr kept for their
// reports).
bool SanitizerBuild();

// Confines the calling process (above). `data_limit_bytes`: RLIMIT_DATA.
absl::Status ConfineHelper(const HelperCredentials& creds,
                           uint64_t data_limit_bytes);

}  // namespace batchd

#endif  // BATCHD_WORKLOADS_FASTMRI_HELPER_SANDBOX_H_

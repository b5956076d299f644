// Who makes a request, as the kernel tells the daemon, and whose streams
// that makes theirs.
//
// Thread safety: Caller is a value; the functions are thread-safe.
#ifndef BATCHD_SERVER_CALLER_H_
#define BATCHD_SERVER_CALLER_H_

#include <cstdint>
#include <string>
#include <vector>

namespace batchd {

// Who makes a request, as the kernel tells the daemon (SO_PEERCRED and
// SO_PEERGROUPS on the unix socket; /proc for the start time and the pid
// namespace), never as a request field says. TCP callers have no kernel
// identity: `known` is false and they are anonymous.
struct Caller {
  bool known = false;
  uint32_t pid = 0;  // in the daemon's pid namespace; 0: not visible from it
  uint32_t uid = uint32_t(-1);
  uint32_t gid = uint32_t(-1);
  std::vector<uint32_t> groups;  // supplementary groups
  uint64_t start_ticks = 0;      // /proc/<pid>/stat starttime
  uint64_t pid_ns = 0;           // inode of its pid namespace; 0: unknown

  // The same process: a pid the daemon can see, the same start time and
  // pid namespace. Two callers without a visible pid are never the same
  // (two containers' pid 1 are not one process).
  bool SameProcess(const Caller& other) const;
  // "pid 123 (uid 1000)" or "an anonymous TCP caller", for errors and logs.
  std::string Describe() const;
  // A local process of this machine as the kernel would describe it: its
  // uid and groups from /proc (tests, tools, in-process callers).
  static Caller Process(uint32_t pid);
};

// The owner uid of streams opened by anonymous TCP callers. (uid_t)-1 is
// never a process's uid (it means "unchanged" to setuid and chown), so it
// names no local user's streams.
constexpr uint32_t kAnonymousUid = 0xFFFFFFFFu;
// "uid 1000", or "anonymous TCP callers" for kAnonymousUid.
std::string DescribeOwner(uint32_t owner_uid);
// The uid whose streams `caller` opens: its own, or kAnonymousUid.
inline uint32_t OwnerOf(const Caller& caller) {
  return caller.known ? caller.uid : kAnonymousUid;
}

}  // namespace batchd

#endif  // BATCHD_SERVER_CALLER_H_

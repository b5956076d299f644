// Callers as the kernel names them; see caller.h.
#include "server/caller.h"

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "base/process.h"

namespace batchd {

namespace {

// Inode of /proc/<pid>/ns/pid; 0 when it cannot be read (another user's
// process and no CAP_SYS_PTRACE).
uint64_t PidNamespaceOf(uint32_t pid) {
  char link[64];
  const std::string path = absl::StrCat("/proc/", pid, "/ns/pid");
  const ssize_t n = readlink(path.c_str(), link, sizeof(link) - 1);
  if (n <= 0) return 0;
  link[n] = '\0';
  const char* open = strchr(link, '[');
  return open == nullptr ? 0 : strtoull(open + 1, nullptr, 10);
}

}  // namespace

std::string DescribeOwner(uint32_t owner_uid) {
  return owner_uid == kAnonymousUid ? std::string("anonymous TCP callers")
                                    : absl::StrCat("uid ", owner_uid);
}

bool Caller::SameProcess(const Caller& other) const {
  return known && other.known && pid != 0 && pid == other.pid &&
         start_ticks == other.start_ticks && pid_ns == other.pid_ns;
}

std::string Caller::Describe() const {
  if (!known) return "an anonymous TCP caller";
  return pid == 0 ? absl::StrCat("uid ", uid, " (pid not visible)")
                  : absl::StrCat("pid ", pid, " (uid ", uid, ")");
}

Caller Caller::Process(uint32_t pid) {
  Caller c;
  c.known = true;
  c.pid = pid;
  c.start_ticks = ProcessStartTicks(int(pid));
  c.pid_ns = PidNamespaceOf(pid);
  std::ifstream status(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(status, line)) {
    std::istringstream in(line.substr(line.find(':') + 1));
    if (line.rfind("Uid:", 0) == 0) {
      in >> c.uid;  // the real uid, as SO_PEERCRED gives the effective one
      in >> c.uid;
    } else if (line.rfind("Gid:", 0) == 0) {
      in >> c.gid;
      in >> c.gid;
    } else if (line.rfind("Groups:", 0) == 0) {
      uint32_t g;
      while (in >> g) c.groups.push_back(g);
    }
  }
  return c;
}

}  // namespace batchd

// A parsing helper's confinement; see helper_sandbox.h.
#include "workloads/fastmri/helper_sandbox.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <seccomp.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define BATCHD_SHADOW_MEMORY 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || \
    __has_feature(memory_sanitizer)
#define BATCHD_SHADOW_MEMORY 1
#endif
#endif

namespace batchd {
namespace {

// Fail with EPERM, whatever their arguments. Names, not numbers: libseccomp
// knows each architecture's, and a name an architecture lacks (open on
// arm64) is skipped there.
constexpr const char* kDenied[] = {
    // Opening a file, or reaching one, by name or handle.
    "open", "openat", "openat2", "creat", "open_by_handle_at",
    "name_to_handle_at", "uselib", "chdir", "fchdir", "chroot", "pivot_root",
    "mount", "umount2", "mount_setattr", "open_tree", "move_mount", "fsopen",
    "fsconfig", "fsmount", "fspick", "swapon", "swapoff", "acct", "quotactl",
    "quotactl_fd",
    // What a name holds or whether it exists (fstat on a descriptor stays).
    "stat", "lstat", "newfstatat", "statx", "access", "faccessat", "faccessat2",
    "readlink", "readlinkat", "statfs", "getxattr", "lgetxattr", "listxattr",
    "llistxattr", "inotify_add_watch", "fanotify_init", "fanotify_mark",
    // Changing files, by name or through the descriptors it holds.
    "mknod", "mknodat", "mkdir", "mkdirat", "rmdir", "unlink", "unlinkat",
    "link", "linkat", "symlink", "symlinkat", "rename", "renameat", "renameat2",
    "chmod", "fchmod", "fchmodat", "chown", "lchown", "fchown", "fchownat",
    "truncate", "ftruncate", "fallocate", "utime", "utimes", "utimensat",
    "futimesat", "setxattr", "lsetxattr", "fsetxattr", "removexattr",
    "lremovexattr", "fremovexattr",
    // Programs.
    "execve", "execveat",
    // Sockets: its one socket to the daemon is all it needs.
    "socket", "socketpair", "connect", "bind", "listen", "accept", "accept4",
    // Other processes.
    "ptrace", "process_vm_readv", "process_vm_writev", "process_madvise",
    "pidfd_open", "pidfd_getfd", "pidfd_send_signal", "kcmp", "tkill",
    // Kernel interfaces that act past this filter or beyond the process.
    "io_uring_setup", "io_uring_enter", "io_uring_register", "bpf",
    "perf_event_open", "userfaultfd", "keyctl", "add_key", "request_key",
    "unshare", "setns", "init_module", "finit_module", "delete_module",
    "kexec_load", "kexec_file_load", "reboot", "iopl", "ioperm", "syslog",
    "vhangup",
    // Identity: set once, before the filter.
    "setuid", "setgid", "setreuid", "setregid", "setresuid", "setresgid",
    "setgroups", "setfsuid", "setfsgid", "capset"};

// Calls refused for some arguments: those that act on another process
// (a helper running as the daemon's uid could otherwise lower the daemon's
// limits with prlimit, or pin or renice it) or that would undo the rest.
// Where every value but one is refused, the whole 64-bit argument is
// compared (high bits set make it another value, refused too); where one
// value is refused, its low 32 bits alone (the kernel reads an int).
struct ArgRule {
  const char* call;
  unsigned arg;
  scmp_compare op;
  scmp_datum_t a, b;  // b: the mask's value (SCMP_CMP_MASKED_EQ)
};

std::vector<ArgRule> ArgRules() {
  const scmp_datum_t self = scmp_datum_t(getpid());
  constexpr scmp_datum_t kInt = 0xffffffff;
  return {
      // Signals: to itself only.
      {"kill", 0, SCMP_CMP_NE, self, 0},
      {"tgkill", 0, SCMP_CMP_NE, self, 0},
      {"rt_sigqueueinfo", 0, SCMP_CMP_NE, self, 0},
      {"rt_tgsigqueueinfo", 0, SCMP_CMP_NE, self, 0},
      // Another process's limits, scheduling, memory: pid 0 (itself) only.
      {"prlimit64", 0, SCMP_CMP_NE, 0, 0},
      {"sched_setaffinity", 0, SCMP_CMP_NE, 0, 0},
      {"sched_setparam", 0, SCMP_CMP_NE, 0, 0},
      {"sched_setscheduler", 0, SCMP_CMP_NE, 0, 0},
      {"sched_setattr", 0, SCMP_CMP_NE, 0, 0},
      {"migrate_pages", 0, SCMP_CMP_NE, 0, 0},
      {"move_pages", 0, SCMP_CMP_NE, 0, 0},
      {"get_robust_list", 0, SCMP_CMP_NE, 0, 0},
      {"setpriority", 1, SCMP_CMP_NE, 0, 0},
      {"ioprio_set", 1, SCMP_CMP_NE, 0, 0},
      // Typing into a terminal the daemon's stderr may be.
      {"ioctl", 1, SCMP_CMP_MASKED_EQ, kInt, TIOCSTI},
      // PR_SET_DUMPABLE 1 would let another process of its uid trace it
      // and take the descriptors it holds.
      {"prctl", 0, SCMP_CMP_MASKED_EQ, kInt, PR_SET_DUMPABLE},
      {"prctl", 0, SCMP_CMP_MASKED_EQ, kInt, PR_SET_PTRACER},
  };
}

absl::Status Seccomp(int rc, const char* what, const char* call) {
  if (rc == 0) return absl::OkStatus();
  return absl::InternalError(
      absl::StrCat("seccomp: ", what, call, ": ", strerror(rc < 0 ? -rc : rc)));
}

absl::Status InstallFilter() {
  scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
  if (ctx == nullptr) return absl::InternalError("seccomp: seccomp_init");
  absl::Status st = Seccomp(
      seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS), "",
      "the other-ABI action");
  for (const char* name : kDenied) {
    if (!st.ok()) break;
    const int nr = seccomp_syscall_resolve_name(name);
    if (nr == __NR_SCMP_ERROR) continue;  // unknown to this libseccomp
    const int rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), nr, 0);
    // A negative number is a call this architecture lacks.
    if (nr >= 0) st = Seccomp(rc, "denying ", name);
  }
  for (const ArgRule& r : ArgRules()) {
    if (!st.ok()) break;
    const int nr = seccomp_syscall_resolve_name(r.call);
    if (nr == __NR_SCMP_ERROR) continue;
    const scmp_arg_cmp cmp = {r.arg, r.op, r.a, r.b};
    const int rc =
        seccomp_rule_add_array(ctx, SCMP_ACT_ERRNO(EPERM), nr, 1, &cmp);
    if (nr >= 0) st = Seccomp(rc, "limiting ", r.call);
  }
  // Loaded with prctl(PR_SET_SECCOMP), not seccomp(2): systemd's
  // SystemCallFilter=@system-service (docker/batchd.service) refuses
  // seccomp(2), and libseccomp's own load then fails. The program goes
  // through a pipe (seccomp_export_bpf writes to a descriptor).
  std::string program;
  int pipe_fds[2] = {-1, -1};
  if (st.ok() && pipe2(pipe_fds, O_CLOEXEC) != 0) {
    st = absl::InternalError(absl::StrCat("seccomp: pipe: ", strerror(errno)));
  }
  if (st.ok()) {
    st = Seccomp(seccomp_export_bpf(ctx, pipe_fds[1]), "", "exporting");
    close(pipe_fds[1]);
    char buf[4096];
    ssize_t n;
    while (st.ok() && (n = read(pipe_fds[0], buf, sizeof(buf))) != 0) {
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) st = Seccomp(errno, "", "reading the program");
      if (n > 0) program.append(buf, size_t(n));
    }
    close(pipe_fds[0]);
  }
  seccomp_release(ctx);
  if (!st.ok()) return st;
  if (program.empty() || program.size() % sizeof(sock_filter) != 0 ||
      program.size() / sizeof(sock_filter) > BPF_MAXINSNS) {
    return absl::InternalError("seccomp: a malformed filter program");
  }
  const sock_fprog prog = {
      static_cast<unsigned short>(program.size() / sizeof(sock_filter)),
      reinterpret_cast<sock_filter*>(program.data())};
  if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0) != 0) {
    return Seccomp(errno, "", "loading the filter");
  }
  return absl::OkStatus();
}

absl::Status TakeCredentials(const HelperCredentials& c) {
  const std::vector<gid_t> groups(c.groups.begin(), c.groups.end());
  // Groups first, then the gid, the uid last (it drops the capabilities
  // the others need).
  if (setgroups(groups.size(), groups.data()) != 0 ||
      setresgid(c.gid, c.gid, c.gid) != 0 ||
      setresuid(c.uid, c.uid, c.uid) != 0) {
    return absl::PermissionDeniedError(absl::StrCat(
        "cannot take uid ", c.uid, " gid ", c.gid, ": ", strerror(errno)));
  }
  uid_t r, e, s;
  gid_t gr, ge, gs;
  if (getresuid(&r, &e, &s) != 0 || getresgid(&gr, &ge, &gs) != 0 ||
      r != c.uid || e != c.uid || s != c.uid || gr != c.gid || ge != c.gid ||
      gs != c.gid) {
    return absl::PermissionDeniedError(
        absl::StrCat("did not become uid ", c.uid, " gid ", c.gid));
  }
  std::vector<gid_t> now(groups.size() + 1);
  const int n = getgroups(int(now.size()), now.data());
  now.resize(n < 0 ? 0 : size_t(n));
  std::vector<gid_t> want = groups;
  std::sort(now.begin(), now.end());
  std::sort(want.begin(), want.end());
  if (n < 0 || now != want) {
    return absl::PermissionDeniedError("did not take the owner's groups");
  }
  return absl::OkStatus();
}

}  // namespace

std::string EncodeCredentials(const HelperCredentials& c) {
  if (!c.change) return "-";
  return absl::StrCat(c.uid, ":", c.gid, ":", absl::StrJoin(c.groups, ","));
}

absl::StatusOr<HelperCredentials> DecodeCredentials(const std::string& s) {
  HelperCredentials c;
  if (s == "-") return c;
  const std::vector<std::string> parts = absl::StrSplit(s, ':');
  c.change = true;
  bool ok = parts.size() == 3 && absl::SimpleAtoi(parts[0], &c.uid) &&
            absl::SimpleAtoi(parts[1], &c.gid);
  if (ok && !parts[2].empty()) {
    for (absl::string_view g : absl::StrSplit(parts[2], ',')) {
      uint32_t id = 0;
      ok = ok && absl::SimpleAtoi(g, &id);
      c.groups.push_back(id);
    }
  }
  if (!ok || c.groups.size() > 65536) {
    return absl::InvalidArgumentError(
        absl::StrCat("malformed helper credentials: ", s));
  }
  return c;
}

bool SanitizerBuild() {
#ifdef BATCHD_SHADOW_MEMORY
  return true;
#else
  return false;
#endif
}

absl::Status ConfineHelper(const HelperCredentials& creds,
                           uint64_t data_limit_bytes) {
  if (creds.change) {
    absl::Status st = TakeCredentials(creds);
    if (!st.ok()) return st;
  }
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
      prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) {
    return absl::InternalError(absl::StrCat("prctl: ", strerror(errno)));
  }
#ifndef BATCHD_SHADOW_MEMORY
  const rlimit data = {rlim_t(data_limit_bytes), rlim_t(data_limit_bytes)};
  if (setrlimit(RLIMIT_DATA, &data) != 0) {
    return absl::InternalError(absl::StrCat("RLIMIT_DATA: ", strerror(errno)));
  }
#else
  (void)data_limit_bytes;
#endif
  return InstallFilter();
}

}  // namespace batchd

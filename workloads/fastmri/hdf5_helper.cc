// libhdf5 out of the daemon's process; see hdf5_helper.h.
#include "workloads/fastmri/hdf5_helper.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/clock.h"
#include "base/format.h"
#include "workloads/fastmri/hdf5_volume.h"
#include "workloads/fastmri/kspace.h"

extern char** environ;

namespace batchd {

constexpr size_t kMaxPath = 4000;
constexpr size_t kMaxMessage = 2000;

struct Hdf5Request {
  uint32_t op;  // kIndex or kRead
  uint32_t slice;
  uint32_t slices;
  uint32_t width;
  uint64_t size;
  uint32_t path_len;
  char path[kMaxPath];
};

struct Hdf5Reply {
  int32_t code;  // absl::StatusCode
  uint32_t slices;
  uint32_t width;
  float volume_max;
  uint32_t contiguous;
  uint64_t kspace_offset;
  uint64_t target_offset;
  uint32_t message_len;
  char message[kMaxMessage];
};

namespace {

constexpr uint32_t kIndex = 1, kRead = 2;
// The helper's descriptors: its socket and the shared slice buffer.
constexpr int kSocketFd = 3, kBufferFd = 4;
// Set (to the daemon's pid) in the helper's environment.
constexpr char kHelperEnv[] = "BATCHD_HDF5_HELPER";
constexpr uint64_t kMaxSliceBytes =
    uint64_t(kFastMriRows) * kFastMriMaxWidth * 8 +
    FastMriVolume::kTargetSliceBytes;

// Tests: with BATCHD_TEST_HOOKS=1, a file whose name holds one of these
// makes the helper die or hang, as a crafted file could.
void TestHooks(const std::string& path) {
  const char* hooks = getenv("BATCHD_TEST_HOOKS");
  if (hooks == nullptr || strcmp(hooks, "1") != 0) return;
  // abort(), not a SIGSEGV: sanitizers turn the latter into an exit.
  if (path.find("batchd-test-hdf5-crash") != std::string::npos) abort();
  if (path.find("batchd-test-hdf5-hang") != std::string::npos) {
    for (;;) pause();
  }
}

// The helper: answers requests until the daemon goes.
[[noreturn]] void RunHelper(pid_t daemon) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != daemon) _exit(0);  // the daemon went before the prctl
  prctl(PR_SET_NAME, "batchd-hdf5");
  void* mapped = mmap(nullptr, kMaxSliceBytes, PROT_READ | PROT_WRITE,
                      MAP_SHARED, kBufferFd, 0);
  if (mapped == MAP_FAILED) _exit(2);
  char* buffer = static_cast<char*>(mapped);
  for (;;) {
    Hdf5Request req;
    char control[CMSG_SPACE(sizeof(int))];
    iovec iov = {&req, sizeof(req)};
    msghdr msg = {};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    const ssize_t n = recvmsg(kSocketFd, &msg, MSG_CMSG_CLOEXEC);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) _exit(0);  // the daemon closed its end
    int fd = -1;
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr;
         c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
        memcpy(&fd, CMSG_DATA(c), sizeof(int));
      }
    }
    absl::Status st;
    Hdf5Reply reply = {};
    if (fd < 0 || size_t(n) < offsetof(Hdf5Request, path) ||
        req.path_len > kMaxPath ||
        size_t(n) < offsetof(Hdf5Request, path) + req.path_len) {
      st = absl::InternalError(
          "fastmri: a malformed request to the HDF5 helper");
    } else {
      const std::string path(req.path, req.path_len);
      TestHooks(path);
      FastMriVolume v;
      v.path = path;
      v.size = req.size;
      v.slices = req.slices;
      v.width = req.width;
      if (req.op == kIndex) {
        st = Hdf5IndexVolume(fd, path, &v);
        reply.slices = v.slices;
        reply.width = v.width;
        reply.volume_max = v.volume_max;
        reply.contiguous = v.contiguous;
        reply.kspace_offset = v.kspace_offset;
        reply.target_offset = v.target_offset;
      } else if (req.op == kRead && v.width >= uint32_t(kFastMriMinWidth) &&
                 v.width <= uint32_t(kFastMriMaxWidth) &&
                 req.slice < v.slices) {
        st = Hdf5ReadSlice(fd, v, req.slice, buffer);
      } else {
        st = absl::InternalError("fastmri: a bad request to the HDF5 helper");
      }
    }
    if (fd >= 0) close(fd);
    reply.code = int32_t(st.code());
    reply.message_len = uint32_t(std::min(st.message().size(), kMaxMessage));
    // (An OK status's message is empty, its data() may be null.)
    if (reply.message_len > 0) {
      memcpy(reply.message, st.message().data(), reply.message_len);
    }
    if (send(kSocketFd, &reply, sizeof(reply), MSG_NOSIGNAL) < 0) _exit(0);
  }
}

// A program started as the helper becomes it here, before main.
__attribute__((constructor)) void BecomeHelperIfAsked() {
  const char* daemon = getenv(kHelperEnv);
  int pid = 0;
  if (daemon != nullptr && absl::SimpleAtoi(daemon, &pid) && pid > 1 &&
      getppid() == pid) {
    RunHelper(pid);
  }
}

std::string HowItEnded(int status) {
  if (WIFSIGNALED(status)) {
    return absl::StrCat("signal ", WTERMSIG(status), ", ",
                        strsignal(WTERMSIG(status)));
  }
  if (WIFEXITED(status)) return absl::StrCat("exit ", WEXITSTATUS(status));
  return "ended";
}

}  // namespace

Hdf5Helper& Hdf5Helper::Get() {
  static Hdf5Helper* helper = new Hdf5Helper;
  return *helper;
}

absl::Status Hdf5Helper::Start() {
  if (shared_ == nullptr) {
    // One buffer for the helper's whole life (and its successors'): the
    // slice of the call running. Pages are touched only as slices use them.
    const int mfd = memfd_create("batchd-hdf5", MFD_CLOEXEC);
    if (mfd < 0 || ftruncate(mfd, off_t(kMaxSliceBytes)) != 0) {
      const int err = errno;
      if (mfd >= 0) close(mfd);
      return absl::ResourceExhaustedError(absl::StrCat(
          "fastmri: cannot make the HDF5 helper's buffer: ", strerror(err)));
    }
    void* p = mmap(nullptr, kMaxSliceBytes, PROT_READ | PROT_WRITE, MAP_SHARED,
                   mfd, 0);
    if (p == MAP_FAILED) {
      close(mfd);
      return absl::ResourceExhaustedError(
          "fastmri: cannot map the HDF5 helper's buffer");
    }
    shared_ = static_cast<char*>(p);
    buffer_fd_ = mfd;
  }
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "fastmri: cannot make the HDF5 helper's socket: ", strerror(errno)));
  }
  std::vector<std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    if (strncmp(*e, kHelperEnv, sizeof(kHelperEnv) - 1) != 0)
      env.emplace_back(*e);
  }
  env.push_back(absl::StrCat(kHelperEnv, "=", getpid()));
  std::vector<char*> envp;
  for (std::string& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  char name[] = "batchd-hdf5";
  char* argv[] = {name, nullptr};

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  // dup2 onto the helper's numbers clears close-on-exec there; a source
  // already at that number would keep it, so sources are moved above them.
  const int socket_src = fcntl(sv[1], F_DUPFD_CLOEXEC, 10);
  const int buffer_src = fcntl(buffer_fd_, F_DUPFD_CLOEXEC, 10);
  posix_spawn_file_actions_adddup2(&actions, socket_src, kSocketFd);
  posix_spawn_file_actions_adddup2(&actions, buffer_src, kBufferFd);
  posix_spawn_file_actions_addclosefrom_np(&actions, kBufferFd + 1);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &all);
  posix_spawnattr_setflags(&attr,
                           POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  pid_t pid = 0;
  const int err = socket_src < 0 || buffer_src < 0
                      ? errno
                      : posix_spawn(&pid, "/proc/self/exe", &actions, &attr,
                                    argv, envp.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  for (int fd : {sv[1], socket_src, buffer_src}) {
    if (fd >= 0) close(fd);
  }
  if (err != 0) {
    close(sv[0]);
    return absl::ResourceExhaustedError(
        absl::StrCat("fastmri: cannot start the HDF5 helper (/proc/self/exe): ",
                     strerror(err)));
  }
  pid_ = pid;
  socket_ = sv[0];
  return absl::OkStatus();
}

std::string Hdf5Helper::Stop(bool kill_it) {
  if (pid_ == 0) return "not running";
  if (kill_it) kill(pid_, SIGKILL);
  close(socket_);  // the helper's recvmsg ends: it exits
  socket_ = -1;
  int status = 0;
  while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  pid_ = 0;
  return HowItEnded(status);
}

// Sends the request and the descriptor; false when the helper is gone.
bool Hdf5Helper::Send(const Hdf5Request& req, int fd) {
  char control[CMSG_SPACE(sizeof(int))] = {};
  iovec iov = {const_cast<Hdf5Request*>(&req),
               offsetof(Hdf5Request, path) + req.path_len};
  msghdr msg = {};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  memcpy(CMSG_DATA(c), &fd, sizeof(int));
  return sendmsg(socket_, &msg, MSG_NOSIGNAL) >= 0;
}

absl::Status Hdf5Helper::Call(const Hdf5Request& req, int fd,
                              Hdf5Reply* reply) {
  const std::string path(req.path, req.path_len);
  // A helper that ended since the last call, or ends during this one, is
  // started again and asked again, once: a helper killed from outside
  // costs nothing; a file that crashes the library crashes it twice.
  std::string how;
  for (int attempt = 0; attempt < 2; ++attempt) {
    if (pid_ == 0) {
      absl::Status st = Start();
      if (!st.ok()) return st;
    }
    if (!Send(req, fd)) {
      how = Stop(true);
      continue;
    }
    pollfd p = {socket_, POLLIN, 0};
    int left = timeout_ms_;
    int ready = 0;
    while (true) {
      const uint64_t t0 = MonotonicNanos();
      ready = poll(&p, 1, left);
      if (ready >= 0 || errno != EINTR) break;
      left = std::max<int>(0, left - int((MonotonicNanos() - t0) / 1000000));
    }
    if (ready == 0) {
      Stop(true);
      return absl::DataLossError(absl::StrCat(
          "fastmri: libhdf5 did not answer within ", timeout_ms_ / 1000.0,
          " s on ", Printable(path),
          "; its helper process was killed (a volume that makes the library "
          "loop?)"));
    }
    const ssize_t n = recv(socket_, reply, sizeof(*reply), 0);
    if (n != ssize_t(sizeof(*reply))) {
      how = Stop(true);
      continue;
    }
    if (reply->code != int32_t(absl::StatusCode::kOk)) {
      return absl::Status(
          absl::StatusCode(reply->code),
          std::string(reply->message,
                      std::min<size_t>(reply->message_len, kMaxMessage)));
    }
    return absl::OkStatus();
  }
  return absl::DataLossError(absl::StrCat(
      "fastmri: libhdf5 ended (", how, ") while reading ", Printable(path),
      ", twice: not a volume batchd can serve. The library runs in a helper "
      "process, which starts again for the next file"));
}

absl::Status Hdf5Helper::Index(int fd, FastMriVolume* v) {
  Hdf5Request req = {};
  req.op = kIndex;
  req.size = v->size;
  req.path_len = uint32_t(std::min(v->path.size(), kMaxPath));
  memcpy(req.path, v->path.data(), req.path_len);
  Hdf5Reply reply;
  std::lock_guard<std::mutex> lock(mu_);
  absl::Status st = Call(req, fd, &reply);
  if (!st.ok()) return st;
  v->slices = reply.slices;
  v->width = reply.width;
  v->volume_max = reply.volume_max;
  v->contiguous = reply.contiguous != 0;
  v->kspace_offset = reply.kspace_offset;
  v->target_offset = reply.target_offset;
  return absl::OkStatus();
}

absl::Status Hdf5Helper::Read(int fd, const FastMriVolume& v, uint32_t slice,
                              char* buf) {
  Hdf5Request req = {};
  req.op = kRead;
  req.slice = slice;
  req.slices = v.slices;
  req.width = v.width;
  req.size = v.size;
  req.path_len = uint32_t(std::min(v.path.size(), kMaxPath));
  memcpy(req.path, v.path.data(), req.path_len);
  Hdf5Reply reply;
  std::lock_guard<std::mutex> lock(mu_);
  absl::Status st = Call(req, fd, &reply);
  if (!st.ok()) return st;
  memcpy(buf, shared_, v.KspaceSliceBytes() + FastMriVolume::kTargetSliceBytes);
  return absl::OkStatus();
}

pid_t Hdf5Helper::pid_for_testing() {
  std::lock_guard<std::mutex> lock(mu_);
  return pid_;
}

void Hdf5Helper::set_timeout_for_testing(int ms) {
  std::lock_guard<std::mutex> lock(mu_);
  timeout_ms_ = ms;
}

void Hdf5Helper::StopForTesting() {
  std::lock_guard<std::mutex> lock(mu_);
  Stop(true);
}

}  // namespace batchd

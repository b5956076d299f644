// The HDF5 helper process's side (hdf5_helper.h): confine itself, then
// answer the daemon's requests (hdf5_wire.h) until the daemon goes.
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "base/test_hooks.h"
#include "base/threads.h"
#include "workloads/fastmri/hdf5_volume.h"
#include "workloads/fastmri/hdf5_wire.h"
#include "workloads/fastmri/helper_sandbox.h"
#include "workloads/fastmri/kspace.h"

namespace batchd {
namespace {

// Tests: with BATCHD_TEST_HOOKS=1, a file whose name holds one of these
// makes the helper die or hang, as a crafted file could, or skips the
// checks of indirections (hdf5_volume.h), to show the filter alone.
void TestHooks(const std::string& path) {
  if (!TestHooksEnabled()) return;
  // abort(), not a SIGSEGV: sanitizers turn the latter into an exit.
  if (path.find("batchd-test-hdf5-crash") != std::string::npos) abort();
  if (path.find("batchd-test-hdf5-hang") != std::string::npos) {
    for (;;) pause();
  }
  SkipIndirectionChecksForTesting(path.find("batchd-test-hdf5-unchecked") !=
                                  std::string::npos);
}

void SendReply(const absl::Status& st, Hdf5Reply* reply) {
  reply->code = int32_t(st.code());
  reply->message_len = uint32_t(std::min(st.message().size(), kHdf5MaxMessage));
  // (An OK status's message is empty, its data() may be null.)
  if (reply->message_len > 0) {
    memcpy(reply->message, st.message().data(), reply->message_len);
  }
  if (send(kHdf5SocketFd, reply, sizeof(*reply), MSG_NOSIGNAL) < 0) _exit(0);
}

// The helper ends when the daemon does: its end of the socket closes (the
// kernel closes it even after kill -9), or it is no longer the parent.
// A thread, so that it ends also while the main thread is inside
// libhdf5; not PR_SET_PDEATHSIG, which follows the daemon's thread that
// started the helper, and a pool thread that ends would take it along.
void Watchdog(pid_t daemon) {
  for (;;) {
    pollfd p = {kHdf5SocketFd, 0, 0};  // hang-up and errors only
    const int ready = poll(&p, 1, 1000);
    if (ready > 0 || getppid() != daemon) _exit(0);
  }
}

absl::Status Answer(const Hdf5Request& req, ssize_t n, int fd, char* buffer,
                    Hdf5Reply* reply) {
  if (fd < 0 || size_t(n) < offsetof(Hdf5Request, path) ||
      req.path_len > kHdf5MaxPath ||
      size_t(n) != offsetof(Hdf5Request, path) + req.path_len) {
    return absl::InternalError(
        "fastmri: a malformed request to the HDF5 helper");
  }
  const std::string path(req.path, req.path_len);
  TestHooks(path);
  FastMriVolume v;
  v.path = path;
  v.size = req.size;
  v.slices = req.slices;
  v.width = req.width;
  if (req.op == kHdf5Index) {
    absl::Status st = Hdf5IndexVolume(fd, path, &v);
    reply->slices = v.slices;
    reply->width = v.width;
    reply->volume_max = v.volume_max;
    reply->contiguous = v.contiguous;
    reply->kspace_offset = v.kspace_offset;
    reply->target_offset = v.target_offset;
    return st;
  }
  if (req.op == kHdf5Read && v.width >= uint32_t(kFastMriMinWidth) &&
      v.width <= uint32_t(kFastMriMaxWidth) && req.slice < v.slices) {
    return Hdf5ReadSlice(fd, v, req.slice, buffer);
  }
  return absl::InternalError("fastmri: a bad request to the HDF5 helper");
}

}  // namespace

[[noreturn]] void RunHdf5Helper(pid_t daemon) {
  prctl(PR_SET_NAME, "batchd-hdf5");
  // A session of its own: no controlling terminal (nothing to type into),
  // and a terminal's signals for the daemon's group do not reach it (it
  // ends with the daemon all the same).
  setsid();
  Hdf5Reply hello = {};
  void* mapped = mmap(nullptr, kHdf5MaxSliceBytes, PROT_READ | PROT_WRITE,
                      MAP_SHARED, kHdf5BufferFd, 0);
  const char* creds_text = getenv(kHdf5CredentialsEnv);
  absl::StatusOr<HelperCredentials> creds =
      DecodeCredentials(creds_text == nullptr ? "" : creds_text);
  absl::Status st = creds.status();
  if (mapped == MAP_FAILED) {
    st = absl::ResourceExhaustedError(
        absl::StrCat("cannot map the slice buffer: ", strerror(errno)));
  }
  if (st.ok()) st = ConfineHelper(*creds, kHdf5DataLimitBytes);
  if (st.ok()) {
    absl::StatusOr<Thread> watchdog = StartThread(
        "the HDF5 helper's watchdog", "", [daemon] { Watchdog(daemon); },
        128 << 10);
    if (watchdog.ok()) {
      watchdog->Detach();
    } else {
      st = watchdog.status();
    }
  }
  if (!st.ok()) {
    st = absl::Status(
        st.code(),
        absl::StrCat("the HDF5 helper cannot confine itself: ", st.message()));
  }
  SendReply(st, &hello);
  if (!st.ok()) _exit(3);
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
    const ssize_t n = recvmsg(kHdf5SocketFd, &msg, MSG_CMSG_CLOEXEC);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) _exit(0);  // the daemon closed its end
    int fd = -1;
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr;
         c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS &&
          c->cmsg_len == CMSG_LEN(sizeof(int)) && fd < 0) {
        memcpy(&fd, CMSG_DATA(c), sizeof(int));
      }
    }
    Hdf5Reply reply = {};
    const absl::Status answer = Answer(req, n, fd, buffer, &reply);
    if (fd >= 0) close(fd);
    SendReply(answer, &reply);
  }
}

}  // namespace batchd

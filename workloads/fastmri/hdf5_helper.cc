// libhdf5 out of the daemon's process, one helper per owner; see
// hdf5_helper.h. The helper's own side is hdf5_helper_main.cc.
#include "workloads/fastmri/hdf5_helper.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/clock.h"
#include "base/format.h"
#include "base/test_hooks.h"
#include "workloads/fastmri/hdf5_wire.h"

extern char** environ;

namespace batchd {
namespace {

// How long a helper may take to start and confine itself.
constexpr int kStartTimeoutMs = 30000;
constexpr uint64_t kSecond = 1000000000;

// A program started as the helper becomes it here, before main.
__attribute__((constructor)) void BecomeHelperIfAsked() {
  const char* daemon = getenv(kHdf5HelperEnv);
  int pid = 0;
  if (daemon != nullptr && absl::SimpleAtoi(daemon, &pid) && pid > 1 &&
      getppid() == pid) {
    RunHdf5Helper(pid);
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

// kCallTimeoutMs, or the test hook's shorter one.
int CallTimeoutMs() {
  int ms = 0;
  const char* hook = TestHook("BATCHD_TEST_HDF5_TIMEOUT_MS");
  return hook != nullptr && absl::SimpleAtoi(hook, &ms) && ms > 0
             ? ms
             : Hdf5Helper::kCallTimeoutMs;
}

// The pool key and the credentials of the helper for `access`.
std::string KeyOf(const ReadAccess& access) {
  switch (access.kind()) {
    case ReadAccess::Kind::kUser:
      return absl::StrCat("uid ", access.uid());
    case ReadAccess::Kind::kWorld:
      return "world";
    case ReadAccess::Kind::kDaemon:
      break;
  }
  return "daemon";
}

HelperCredentials CredentialsOf(const ReadAccess& access) {
  HelperCredentials c;
  if (geteuid() != 0) return c;  // a service user cannot take another uid
  c.change = true;
  if (access.by_kernel()) {
    c.uid = access.uid();
    c.gid = access.gid();
    c.groups = access.groups();
  } else {
    c.uid = c.gid = kNobody;
  }
  return c;
}

}  // namespace

// The helpers, one per owner, and the slots of those running.
class Hdf5Helpers {
 public:
  static Hdf5Helpers& Get() {
    static Hdf5Helpers* pool = new Hdf5Helpers;
    return *pool;
  }

  std::shared_ptr<Hdf5Helper> For(const ReadAccess& access, bool pin) {
    Tidy();
    const std::string key = KeyOf(access);
    absl::MutexLock lock(&mu_);
    Entry& e = entries_[key];
    if (e.helper == nullptr) {
      e.helper.reset(
          new Hdf5Helper(key, access.Describe(), CredentialsOf(access)));
    }
    e.pinned = e.pinned || pin;
    return e.helper;
  }

  // A slot for h's process, made by stopping the least recently used idle
  // helper when every slot is taken.
  absl::Status Acquire(const Hdf5Helper& h) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    // (TryLock of other helpers' locks, taken here and released after
    // this lock: beyond what the analysis follows.)
    for (int attempt = 0; attempt < 4; ++attempt) {
      std::shared_ptr<Hdf5Helper> victim;
      {
        absl::MutexLock lock(&mu_);
        Entry& mine = entries_.at(h.key_);
        if (running_ < max_helpers_) {
          mine.running = true;
          ++running_;
          return absl::OkStatus();
        }
        std::vector<std::shared_ptr<Hdf5Helper>> idle;
        for (auto& [key, e] : entries_) {
          if (e.running && e.helper.get() != &h) idle.push_back(e.helper);
        }
        std::sort(idle.begin(), idle.end(), [](const auto& a, const auto& b) {
          return a->last_used_ns_.load() < b->last_used_ns_.load();
        });
        // Never waits: one in a call is not idle.
        for (auto& other : idle) {
          if (other->mu_.TryLock()) {
            victim = other;
            break;
          }
        }
      }
      if (victim == nullptr) break;
      victim->Stop(true);
      victim->mu_.Unlock();
    }
    absl::MutexLock lock(&mu_);
    return absl::ResourceExhaustedError(absl::StrCat(
        "fastmri: every one of the ", max_helpers_,
        " HDF5 helper processes is in a call for another owner; try again"));
  }

  void Release(const Hdf5Helper& h) {
    absl::MutexLock lock(&mu_);
    auto it = entries_.find(h.key_);
    if (it != entries_.end() && it->second.running) {
      it->second.running = false;
      --running_;
    }
  }

  int running() {
    absl::MutexLock lock(&mu_);
    return running_;
  }

  void set_max_helpers(int n) {
    absl::MutexLock lock(&mu_);
    max_helpers_ = n;
  }

 private:
  struct Entry {
    std::shared_ptr<Hdf5Helper> helper;
    bool running = false;  // holds a slot
    bool pinned = false;   // Hdf5Helper::Get()'s: never dropped
  };

  // At most once a second: reaps helpers that ended between calls, stops
  // those idle for kIdleSeconds, and drops entries nobody holds.
  void Tidy() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    const uint64_t now = MonotonicNanos();
    std::vector<std::shared_ptr<Hdf5Helper>> idle, dropped;
    {
      absl::MutexLock lock(&mu_);
      if (now - last_tidy_ns_ < kSecond) return;
      last_tidy_ns_ = now;
      for (auto it = entries_.begin(); it != entries_.end();) {
        Entry& e = it->second;
        if (!e.running && !e.pinned && e.helper.use_count() == 1) {
          dropped.push_back(std::move(e.helper));  // freed below, unlocked
          it = entries_.erase(it);
          continue;
        }
        if (e.running && e.helper->mu_.TryLock()) idle.push_back(e.helper);
        ++it;
      }
    }
    const uint64_t idle_ns = uint64_t(Hdf5Helper::kIdleSeconds) * kSecond;
    for (auto& h : idle) {
      h->Tidy(now > idle_ns ? now - idle_ns : 0);
      h->mu_.Unlock();
    }
  }

  absl::Mutex mu_;
  std::map<std::string, Entry> entries_ ABSL_GUARDED_BY(mu_);
  int running_ ABSL_GUARDED_BY(mu_) = 0;
  int max_helpers_ ABSL_GUARDED_BY(mu_) = Hdf5Helper::kMaxHelpers;
  uint64_t last_tidy_ns_ ABSL_GUARDED_BY(mu_) = 0;
};

Hdf5Helper::Hdf5Helper(std::string key, std::string owner,
                       HelperCredentials creds)
    : key_(std::move(key)),
      owner_(std::move(owner)),
      creds_(std::move(creds)),
      timeout_ms_(CallTimeoutMs()) {}

Hdf5Helper::~Hdf5Helper() ABSL_NO_THREAD_SAFETY_ANALYSIS {
  // Dropped only when no process runs and nobody holds it
  // (Hdf5Helpers::Tidy), unlocked: a lock here would order this one
  // after the pool's.
  if (shared_ != nullptr) munmap(shared_, kHdf5MaxSliceBytes);
  if (buffer_fd_ >= 0) close(buffer_fd_);
}

Hdf5Helper& Hdf5Helper::Get() {
  static Hdf5Helper* helper =
      Hdf5Helpers::Get().For(ReadAccess::Daemon(), /*pin=*/true).get();
  return *helper;
}

std::shared_ptr<Hdf5Helper> Hdf5Helper::For(const ReadAccess& access) {
  return Hdf5Helpers::Get().For(access, /*pin=*/false);
}

int Hdf5Helper::running_for_testing() { return Hdf5Helpers::Get().running(); }

void Hdf5Helper::set_max_helpers_for_testing(int n) {
  Hdf5Helpers::Get().set_max_helpers(n);
}

absl::Status Hdf5Helper::Start() {
  if (shared_ == nullptr) {
    // One buffer for the helper's whole life (and its successors', of the
    // same owner): the slice of the call running. Pages are touched only
    // as slices use them.
    const int mfd = memfd_create("batchd-hdf5", MFD_CLOEXEC);
    if (mfd < 0 || ftruncate(mfd, off_t(kHdf5MaxSliceBytes)) != 0) {
      const int err = errno;
      if (mfd >= 0) close(mfd);
      return absl::ResourceExhaustedError(absl::StrCat(
          "fastmri: cannot make the HDF5 helper's buffer: ", strerror(err)));
    }
    void* p = mmap(nullptr, kHdf5MaxSliceBytes, PROT_READ | PROT_WRITE,
                   MAP_SHARED, mfd, 0);
    if (p == MAP_FAILED) {
      close(mfd);
      return absl::ResourceExhaustedError(
          "fastmri: cannot map the HDF5 helper's buffer");
    }
    shared_ = static_cast<char*>(p);
    buffer_fd_ = mfd;
  }
  absl::Status slot = Hdf5Helpers::Get().Acquire(*this);
  if (!slot.ok()) return slot;
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) {
    Hdf5Helpers::Get().Release(*this);
    return absl::ResourceExhaustedError(absl::StrCat(
        "fastmri: cannot make the HDF5 helper's socket: ", strerror(errno)));
  }
  // The daemon's environment, without what would steer the helper or
  // libhdf5 (HDF5_PLUGIN_PATH, HDF5_EXTFILE_PREFIX, ...).
  std::vector<std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const absl::string_view var(*e);
    if (!absl::StartsWith(var, "BATCHD_HDF5_") &&
        !absl::StartsWith(var, "HDF5_")) {
      env.emplace_back(var);
    }
  }
  env.push_back(absl::StrCat(kHdf5HelperEnv, "=", getpid()));
  env.push_back(
      absl::StrCat(kHdf5CredentialsEnv, "=", EncodeCredentials(creds_)));
  std::vector<char*> envp;
  for (std::string& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  char name[] = "batchd-hdf5";
  char* argv[] = {name, nullptr};

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  // Nothing to read and nowhere to write: code a crafted file ran there
  // could forge lines of the daemon's log. Sanitizer builds and tests keep
  // stderr for the reports.
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
  if (!SanitizerBuild() && !TestHooksEnabled()) {
    posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
  }
  // dup2 onto the helper's numbers clears close-on-exec there; a source
  // already at that number would keep it, so sources are moved above them.
  const int socket_src = fcntl(sv[1], F_DUPFD_CLOEXEC, 10);
  const int buffer_src = fcntl(buffer_fd_, F_DUPFD_CLOEXEC, 10);
  posix_spawn_file_actions_adddup2(&actions, socket_src, kHdf5SocketFd);
  posix_spawn_file_actions_adddup2(&actions, buffer_src, kHdf5BufferFd);
  posix_spawn_file_actions_addclosefrom_np(&actions, kHdf5BufferFd + 1);
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
    Hdf5Helpers::Get().Release(*this);
    return absl::ResourceExhaustedError(
        absl::StrCat("fastmri: cannot start the HDF5 helper (/proc/self/exe): ",
                     strerror(err)));
  }
  pid_ = pid;
  socket_ = sv[0];
  last_used_ns_ = MonotonicNanos();
  // Its first word: confined and serving, or why not.
  char buf[sizeof(Hdf5Reply) + 1];
  const ssize_t n = Receive(kStartTimeoutMs, buf);
  Hdf5Reply hello;
  absl::Status st =
      n > 0 ? ParseHdf5Reply({reinterpret_cast<const uint8_t*>(buf), size_t(n)},
                             &hello)
            : absl::ResourceExhaustedError("no answer");
  if (!st.ok()) {
    const std::string how = Stop(true);
    return absl::Status(
        st.code(), absl::StrCat("fastmri: the HDF5 helper for ", owner_,
                                " did not start (", how, "): ", st.message()));
  }
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
  Hdf5Helpers::Get().Release(*this);
  return HowItEnded(status);
}

void Hdf5Helper::Tidy(uint64_t idle_before_ns) {
  if (pid_ == 0) return;
  int status = 0;
  if (waitpid(pid_, &status, WNOHANG) == pid_) {
    // Ended between calls (killed from outside): reaped now, not at the
    // owner's next call.
    close(socket_);
    socket_ = -1;
    pid_ = 0;
    Hdf5Helpers::Get().Release(*this);
  } else if (last_used_ns_.load() < idle_before_ns) {
    Stop(true);
  }
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

ssize_t Hdf5Helper::Receive(int timeout_ms, char* buf) {
  pollfd p = {socket_, POLLIN, 0};
  int left = timeout_ms;
  int ready = 0;
  while (true) {
    const uint64_t t0 = MonotonicNanos();
    ready = poll(&p, 1, left);
    if (ready >= 0 || errno != EINTR) break;
    left = std::max<int>(0, left - int((MonotonicNanos() - t0) / 1000000));
  }
  if (ready == 0) return -1;
  // One byte more than a reply: a longer packet arrives cut, and is
  // refused for its size.
  ssize_t n;
  do {
    n = recv(socket_, buf, sizeof(Hdf5Reply) + 1, 0);
  } while (n < 0 && errno == EINTR);
  return n < 0 ? 0 : n;
}

absl::Status Hdf5Helper::Call(const Hdf5Request& req, int fd, char* slice_out,
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
    char buf[sizeof(Hdf5Reply) + 1];
    const ssize_t n = Receive(timeout_ms_, buf);
    if (n < 0) {
      Stop(true);
      return absl::DataLossError(absl::StrCat(
          "fastmri: libhdf5 did not answer within ", timeout_ms_ / 1000.0,
          " s on ", Printable(path),
          "; its helper process was killed (a volume that makes the library "
          "loop?)"));
    }
    if (n == 0) {
      how = Stop(true);
      continue;
    }
    last_used_ns_ = MonotonicNanos();
    absl::Status st = ParseHdf5Reply(
        {reinterpret_cast<const uint8_t*>(buf), size_t(n)}, reply);
    // A reply that is not one is a helper no longer ours: it is not asked
    // again.
    if (absl::IsInternal(st)) Stop(true);
    if (!st.ok()) return st;
    if (slice_out != nullptr) {
      memcpy(slice_out, shared_,
             uint64_t(kFastMriRows) * req.width * 8 +
                 FastMriVolume::kTargetSliceBytes);
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
  req.op = kHdf5Index;
  req.size = v->size;
  req.path_len = uint32_t(std::min(v->path.size(), kHdf5MaxPath));
  memcpy(req.path, v->path.data(), req.path_len);
  Hdf5Reply reply;
  absl::MutexLock lock(&mu_);
  absl::Status st = Call(req, fd, nullptr, &reply);
  if (!st.ok()) return st;
  return ApplyIndexReply(reply, v);
}

absl::Status Hdf5Helper::Read(int fd, const FastMriVolume& v, uint32_t slice,
                              char* buf) {
  Hdf5Request req = {};
  req.op = kHdf5Read;
  req.slice = slice;
  req.slices = v.slices;
  req.width = v.width;
  req.size = v.size;
  req.path_len = uint32_t(std::min(v.path.size(), kHdf5MaxPath));
  memcpy(req.path, v.path.data(), req.path_len);
  Hdf5Reply reply;
  absl::MutexLock lock(&mu_);
  return Call(req, fd, buf, &reply);
}

pid_t Hdf5Helper::pid_for_testing() {
  absl::MutexLock lock(&mu_);
  return pid_;
}

void Hdf5Helper::set_timeout_for_testing(int ms) {
  absl::MutexLock lock(&mu_);
  timeout_ms_ = ms;
}

void Hdf5Helper::StopForTesting() {
  absl::MutexLock lock(&mu_);
  Stop(true);
}

}  // namespace batchd

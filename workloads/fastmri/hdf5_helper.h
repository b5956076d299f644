// libhdf5 out of the daemon's process, one helper process per stream
// owner. libhdf5 parses a file's metadata with the trust of a library for
// one's own files: crafted files have crashed it and made it loop (its CVE
// list), and it follows names a file holds (external storage, external
// links, virtual datasets) by opening them. One daemon serves every user of
// a node, so a volume one user writes must neither stop another user's
// training nor read what that user could not. Every libhdf5 call
// (hdf5_volume.h) therefore runs in a helper process: the running program
// (/proc/self/exe) started again with posix_spawn, which a constructor of
// this library turns into the helper before main runs (its own small
// address space; no copy of the daemon's memory).
//
// What a helper can reach: the daemon hands it each file as the descriptor
// the data root opened with the owner's rights (SCM_RIGHTS), and takes
// slices back through a buffer the two share. Before it serves, the
// helper takes the owner's uid, gid and groups when the daemon is root
// (kNobody's for the daemon's own and TCP callers' streams), and confines
// itself (helper_sandbox.h): it can open no file, start no program, make
// no socket. libhdf5 reads the descriptor as a file image (hdf5_volume.h).
//
// One helper per owner (a ReadAccess: a uid, "any local user", the
// daemon), so one user's volume holds only that user's calls: a helper
// serves its owner's calls one at a time, and no lock is held across a
// call but that helper's own. At most kMaxHelpers run; a helper idle for
// kIdleSeconds is stopped, and one more is made room for by stopping the
// least recently used idle one (ResourceExhausted when every one is in a
// call). Dead helpers are reaped at the next call of any owner.
//
// A helper that dies (a crash in libhdf5, kill -9) is started again and
// the call asked again, once; a file on which it dies twice fails its
// call with an error naming the file and the signal. One that does not
// answer in kCallTimeoutMs is killed, and the call fails naming the file:
// well before the engine's --read-stall-seconds (60 s by default) would
// close the stream for a stall, so the error says which file.
//
// A helper outlives the thread that started it, and ends when the daemon
// does (kill -9 included, and while it is inside libhdf5): a thread of
// its own watches its socket and the daemon's pid.
//
// Thread safety: any number of threads may call any method; one helper's
// calls are serialised (libhdf5 holds one global lock anyway).
#ifndef BATCHD_WORKLOADS_FASTMRI_HDF5_HELPER_H_
#define BATCHD_WORKLOADS_FASTMRI_HDF5_HELPER_H_

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "storage/read_access.h"
#include "workloads/fastmri/helper_sandbox.h"
#include "workloads/fastmri/volume.h"

namespace batchd {

struct Hdf5Request;  // hdf5_wire.h
struct Hdf5Reply;
class Hdf5Helpers;  // the pool, hdf5_helper.cc

class Hdf5Helper {
 public:
  // How long one call may run before the helper is killed: far above a
  // volume's metadata (milliseconds) or a compressed slice (tens of ms),
  // a third of the engine's default read stall.
  static constexpr int kCallTimeoutMs = 20000;
  // Helper processes running at once, and how long an idle one stays.
  static constexpr int kMaxHelpers = 32;
  static constexpr int kIdleSeconds = 60;

  // The helper of the daemon's own reads (ReadAccess::Daemon()).
  static Hdf5Helper& Get();
  // The helper of the owner whose rights `access` reads with.
  static std::shared_ptr<Hdf5Helper> For(const ReadAccess& access);

  // Hdf5IndexVolume in the helper: v->path and v->size are set. What the
  // helper says is checked again here (ApplyIndexReply).
  absl::Status Index(int fd, FastMriVolume* v);
  // Hdf5ReadSlice in the helper, into buf (KspaceSliceBytes() +
  // kTargetSliceBytes).
  absl::Status Read(int fd, const FastMriVolume& v, uint32_t slice, char* buf);

  // Tests: the helper's pid (0: none runs); a shorter timeout; stop it;
  // helper processes running; fewer of them.
  pid_t pid_for_testing();
  void set_timeout_for_testing(int ms);
  void StopForTesting();
  static int running_for_testing();
  static void set_max_helpers_for_testing(int n);

  ~Hdf5Helper();
  Hdf5Helper(const Hdf5Helper&) = delete;
  Hdf5Helper& operator=(const Hdf5Helper&) = delete;

 private:
  friend class Hdf5Helpers;
  Hdf5Helper(std::string key, std::string owner, HelperCredentials creds);

  absl::Status Call(const Hdf5Request& req, int fd, char* slice_out,
                    Hdf5Reply* reply) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool Send(const Hdf5Request& req, int fd) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Waits up to timeout_ms for one packet; -1: none in time; 0: the helper
  // closed its end; else its size (at most sizeof(Hdf5Reply) + 1).
  ssize_t Receive(int timeout_ms, char* buf) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status Start() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Ends the helper (SIGKILL when `kill`), reaps it and gives back its
  // slot; returns how it ended, for messages.
  std::string Stop(bool kill) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Reaps a helper that ended between calls; stops one idle since
  // `idle_before_ns`.
  void Tidy(uint64_t idle_before_ns) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string key_;    // the pool's
  const std::string owner_;  // "uid 1000", for messages
  const HelperCredentials creds_;
  // When its last call ended (MonotonicNanos), for the pool's choice of
  // whom to stop.
  std::atomic<uint64_t> last_used_ns_{0};

  // Held across a call: the owner's calls, one at a time.
  absl::Mutex mu_;
  pid_t pid_ ABSL_GUARDED_BY(mu_) = 0;
  int socket_ ABSL_GUARDED_BY(mu_) = -1;
  char* shared_ ABSL_GUARDED_BY(mu_) = nullptr;  // the slice buffer
  int buffer_fd_ ABSL_GUARDED_BY(mu_) = -1;      // its memfd
  int timeout_ms_ ABSL_GUARDED_BY(mu_);
};

}  // namespace batchd

#endif  // BATCHD_WORKLOADS_FASTMRI_HDF5_HELPER_H_

// libhdf5 out of the daemon's process. libhdf5 parses a file's metadata
// (superblock, object headers, B-trees) with the trust of a library for
// one's own files: crafted files have crashed it and made it loop (its CVE
// list), and one daemon serves every job of a node, so a volume one user
// writes must not stop every other user's training. Every libhdf5 call
// (hdf5_volume.h) therefore runs in a helper process: the running program
// (/proc/self/exe) started again with posix_spawn, which a constructor of
// this library turns into the helper before main runs (its own small
// address space; no copy of the daemon's memory). The daemon hands it each
// file as a descriptor (SCM_RIGHTS) that the data root opened, and takes
// slices back through a shared buffer.
//
// A helper that dies (a crash in libhdf5, kill -9) is started again and
// the call asked again, once; a file on which it dies twice fails its
// call with an error naming the file and the signal. One that does not
// answer in kCallTimeoutMs is
// killed, and the call fails naming the file. The helper exits when the
// daemon does (PR_SET_PDEATHSIG, and end of file on its socket).
//
// Thread safety: calls are serialised (libhdf5 holds one global lock
// anyway); any number of threads may call.
#ifndef BATCHD_WORKLOADS_FASTMRI_HDF5_HELPER_H_
#define BATCHD_WORKLOADS_FASTMRI_HDF5_HELPER_H_

#include <sys/types.h>

#include <cstdint>
#include <mutex>
#include <string>

#include "absl/status/status.h"
#include "workloads/fastmri/volume.h"

namespace batchd {

struct Hdf5Request;  // hdf5_helper.cc
struct Hdf5Reply;

class Hdf5Helper {
 public:
  // How long one call may run before the helper is killed: far above a
  // volume's metadata (milliseconds) or a compressed slice (tens of ms).
  static constexpr int kCallTimeoutMs = 120000;

  // The process-wide helper (started on first use).
  static Hdf5Helper& Get();

  // Hdf5IndexVolume in the helper: v->path and v->size are set.
  absl::Status Index(int fd, FastMriVolume* v);
  // Hdf5ReadSlice in the helper, into buf (KspaceSliceBytes() +
  // kTargetSliceBytes).
  absl::Status Read(int fd, const FastMriVolume& v, uint32_t slice, char* buf);

  // Tests: the helper's pid (0: none runs); a shorter timeout; stop it.
  pid_t pid_for_testing();
  void set_timeout_for_testing(int ms);
  void StopForTesting();

 private:
  Hdf5Helper() = default;
  absl::Status Call(const Hdf5Request& req, int fd, Hdf5Reply* reply);
  bool Send(const Hdf5Request& req, int fd);
  absl::Status Start();
  // Ends the helper (SIGKILL when `kill`) and reaps it; returns how it
  // ended, for messages.
  std::string Stop(bool kill);

  std::mutex mu_;
  pid_t pid_ = 0;
  int socket_ = -1;
  char* shared_ = nullptr;  // the slice buffer shared with the helper
  int buffer_fd_ = -1;      // its memfd, handed to each helper started
  int timeout_ms_ = kCallTimeoutMs;
};

}  // namespace batchd

#endif  // BATCHD_WORKLOADS_FASTMRI_HDF5_HELPER_H_

// The HDF5 helper's protocol (hdf5_helper.h): one request and one reply a
// call over a SOCK_SEQPACKET socketpair, each one packet. A request is
// Hdf5Request's fixed fields and then the file's name (path_len bytes,
// for messages only: the helper never opens a name), with the file's
// descriptor attached (SCM_RIGHTS). A reply is one whole Hdf5Reply; a
// slice read goes back through the buffer the two processes share.
//
// The daemon trusts nothing a reply says: a helper runs libhdf5 over a
// file its stream's owner wrote, and code a crafted file ran there may
// write any bytes. ParseHdf5Reply and ApplyIndexReply are the daemon's
// only readers of a reply (fuzz/hdf5_reply_fuzz.cc runs them on any
// bytes): a reply of another size, an unknown status, a message of any
// bytes, or an index that the file cannot hold are errors, never trusted.
//
// Thread safety: plain data and pure functions.
#ifndef BATCHD_WORKLOADS_FASTMRI_HDF5_WIRE_H_
#define BATCHD_WORKLOADS_FASTMRI_HDF5_WIRE_H_

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "workloads/fastmri/kspace.h"
#include "workloads/fastmri/volume.h"

namespace batchd {

// How a helper is started: the program again, with these descriptors and
// variables (the daemon's pid; its credentials, helper_sandbox.h's
// EncodeCredentials).
inline constexpr int kHdf5SocketFd = 3;  // the socketpair's helper end
inline constexpr int kHdf5BufferFd = 4;  // the shared slice buffer (memfd)
inline constexpr char kHdf5HelperEnv[] = "BATCHD_HDF5_HELPER";
inline constexpr char kHdf5CredentialsEnv[] = "BATCHD_HDF5_CREDENTIALS";
// The shared buffer: the largest slice (2048 columns) and its target.
inline constexpr uint64_t kHdf5MaxSliceBytes =
    uint64_t(kFastMriRows) * kFastMriMaxWidth * 8 +
    FastMriVolume::kTargetSliceBytes;
// A helper's RLIMIT_DATA: libhdf5's caches, a few chunks of at most
// kMaxChunkBytes (hdf5_volume.h) and their decompression.
inline constexpr uint64_t kHdf5DataLimitBytes = uint64_t(1) << 30;

// The helper's side (hdf5_helper_main.cc): serves requests on
// kHdf5SocketFd until the daemon `daemon` goes. Never returns.
[[noreturn]] void RunHdf5Helper(pid_t daemon);

inline constexpr size_t kHdf5MaxPath = 4000;
inline constexpr size_t kHdf5MaxMessage = 2000;

// op: what a request asks.
inline constexpr uint32_t kHdf5Index = 1;  // Hdf5IndexVolume
inline constexpr uint32_t kHdf5Read = 2;   // Hdf5ReadSlice into the buffer

struct Hdf5Request {
  uint32_t op;
  uint32_t slice;   // kHdf5Read: which slice
  uint32_t slices;  // kHdf5Read: the volume as indexed
  uint32_t width;
  uint64_t size;  // the file's size as the daemon's fstat saw it
  uint32_t path_len;
  char path[kHdf5MaxPath];
};

// Also the helper's first packet, once it is confined and ready (code 0),
// or why it cannot serve.
struct Hdf5Reply {
  int32_t code;  // absl::StatusCode
  uint32_t slices;
  uint32_t width;
  float volume_max;
  uint32_t contiguous;
  uint64_t kspace_offset;
  uint64_t target_offset;
  uint32_t message_len;
  char message[kHdf5MaxMessage];
};

// The layout fuzz/make_seeds.py writes seeds in.
static_assert(sizeof(Hdf5Reply) == 2048 &&
                  offsetof(Hdf5Reply, kspace_offset) == 24 &&
                  offsetof(Hdf5Reply, message) == 44,
              "Hdf5Reply's layout is fuzz/make_seeds.py's");

// The reply in `bytes` (exactly the packet received), into *reply. Not
// OK when the packet is not one whole reply, or says an error: then the
// helper's error, its code one of DataLoss, ResourceExhausted or Internal
// (any other code is DataLoss) and its message made printable.
absl::Status ParseHdf5Reply(absl::Span<const uint8_t> bytes, Hdf5Reply* reply);

// An index reply applied to v (whose path and size are the daemon's),
// checked against the file: widths in range, no more slices than the file
// has bytes, contiguous datasets inside the file. DataLoss naming the
// file otherwise; v is then unchanged.
absl::Status ApplyIndexReply(const Hdf5Reply& reply, FastMriVolume* v);

}  // namespace batchd

#endif  // BATCHD_WORKLOADS_FASTMRI_HDF5_WIRE_H_

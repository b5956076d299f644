// libhdf5's part of reading a fastMRI volume (volume.h): what only the HDF5
// library can answer about a file, on a descriptor of it. These run in the
// HDF5 helper process (hdf5_helper.h), never in the daemon's: libhdf5 is
// not hardened against crafted files, and a crash or hang there must not
// take the daemon with it.
//
// The library never opens a file by name. The descriptor is mapped
// read-only and handed to libhdf5 as a file image (its core driver, no
// copy), and every volume is refused, naming the file, before any of its
// data is read, where a dataset it reads is not stored in the file
// itself:
//   - `kspace` or `reconstruction_esc` not a hard link (a soft link, an
//     external link into another file, a user-defined link);
//   - a virtual dataset (its data mapped from other files' datasets);
//   - external storage (H5Pset_external: raw data in other files);
//   - an external link met while opening (a traversal callback that
//     fails);
//   - chunks larger than kMaxChunkBytes (libhdf5 allocates a whole chunk
//     to read any part of it).
// Filter plugins are never loaded. What the checks miss, the helper's
// seccomp filter (helper_sandbox.h) stops: an open fails with EPERM.
#ifndef BATCHD_WORKLOADS_FASTMRI_HDF5_VOLUME_H_
#define BATCHD_WORKLOADS_FASTMRI_HDF5_VOLUME_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "workloads/fastmri/volume.h"

namespace batchd {

// The largest chunk (its dimensions times its element's bytes) a volume
// may have: six of the largest k-space slices (2048 columns).
inline constexpr uint64_t kMaxChunkBytes = uint64_t(64) << 20;

// Checks the volume open as `fd` (named `path` in messages) and fills v's
// slices, width, volume_max, contiguous and offsets; v->size must be the
// file's size (the descriptor's must match; the offsets are checked
// against it). DataLoss naming the file and what is wrong.
absl::Status Hdf5IndexVolume(int fd, const std::string& path, FastMriVolume* v);

// Reads slice `slice` of the indexed volume v, open as `fd`, through the
// library: its k-space (v.KspaceSliceBytes()) then its target
// (kTargetSliceBytes) into buf. The volume is checked again as at index.
absl::Status Hdf5ReadSlice(int fd, const FastMriVolume& v, uint32_t slice,
                           char* buf);

// Tests: skip the checks of indirections (links, virtual datasets,
// external storage, the external-link callback), to show that the seccomp
// filter alone stops what they would have refused.
void SkipIndirectionChecksForTesting(bool skip);

}  // namespace batchd

#endif  // BATCHD_WORKLOADS_FASTMRI_HDF5_VOLUME_H_

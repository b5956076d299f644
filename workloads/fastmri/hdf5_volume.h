// libhdf5's part of reading a fastMRI volume (volume.h): what only the HDF5
// library can answer about a file, on a descriptor of it. These run in the
// HDF5 helper process (hdf5_helper.h), never in the daemon's: libhdf5 is
// not hardened against crafted files, and a crash or hang there must not
// take the daemon with it.
#ifndef BATCHD_WORKLOADS_FASTMRI_HDF5_VOLUME_H_
#define BATCHD_WORKLOADS_FASTMRI_HDF5_VOLUME_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "workloads/fastmri/volume.h"

namespace batchd {

// Checks the volume open as `fd` (named `path` in messages) and fills v's
// slices, width, volume_max, contiguous and offsets; v->size must be the
// file's size (the offsets are checked against it). DataLoss naming the
// file and what is wrong.
absl::Status Hdf5IndexVolume(int fd, const std::string& path, FastMriVolume* v);

// Reads slice `slice` of the indexed volume v, open as `fd`, through the
// library: its k-space (v.KspaceSliceBytes()) then its target
// (kTargetSliceBytes) into buf.
absl::Status Hdf5ReadSlice(int fd, const FastMriVolume& v, uint32_t slice,
                           char* buf);

}  // namespace batchd

#endif  // BATCHD_WORKLOADS_FASTMRI_HDF5_VOLUME_H_

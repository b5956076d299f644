// One fastMRI volume file (an HDF5 file as the fastMRI release writes it,
// read with Debian's libhdf5): the datasets `kspace` (complex64 [slices,
// 640, width], h5py's compound of two float32 members) and
// `reconstruction_esc` (float32 [slices, 320, 320]), and the file's
// attribute `max` (0 when absent, as AlgoPerf reads it).
//
// IndexVolume checks a file once, when a stream opens: the datasets, their
// types and shapes, the attribute, and whether both datasets lie in the
// file as contiguous little-endian arrays (h5py's default layout). Then a
// slice is two pread(2)s of the file, opened through the data root like
// every other file batchd reads; otherwise (chunked or compressed) the
// HDF5 library reads it. A file that changed since it was indexed
// (another inode, size or modification time) is refused.
//
// HDF5 calls run in a helper process of the stream's owner
// (hdf5_helper.h), on a descriptor the data root opened with the owner's
// rights: libhdf5 reads that very file as a file image and can open no
// other, and a volume whose datasets live elsewhere (external storage,
// external or soft links, virtual datasets) is refused naming the file
// (hdf5_volume.h). A crafted file that crashes or hangs libhdf5 fails the
// stream naming the file; the daemon and other owners' streams go on.
//
// Thread safety: both functions may be called from any number of threads.
#ifndef BATCHD_WORKLOADS_FASTMRI_VOLUME_H_
#define BATCHD_WORKLOADS_FASTMRI_VOLUME_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "storage/data_file.h"

namespace batchd {

struct FastMriVolume {
  std::string path;  // as given to IndexVolume
  uint32_t slices = 0;
  uint32_t width = 0;    // k-space columns
  float volume_max = 0;  // the attribute `max` as float32
  // Both datasets stored contiguously as little-endian float32: where each
  // begins in the file. Otherwise HDF5 reads the slices.
  bool contiguous = false;
  uint64_t kspace_offset = 0;
  uint64_t target_offset = 0;
  // The file as indexed.
  uint64_t inode = 0;
  uint64_t size = 0;
  int64_t mtime_ns = 0;

  uint64_t KspaceSliceBytes() const { return uint64_t(640) * width * 8; }
  static constexpr uint64_t kTargetSliceBytes = uint64_t(320) * 320 * 4;
};

// Checks and describes the volume at `path` (confined to `root`).
// DataLoss naming the file and what is wrong: not an HDF5 file, a dataset
// or the attribute missing or of another type or shape, a dataset that
// runs past the end of the file.
absl::StatusOr<FastMriVolume> IndexVolume(const DataRoot& root,
                                          const std::string& path);

// Slice `slice` of the volume: its k-space (KspaceSliceBytes(), complex64
// as interleaved float32 pairs) then its target (kTargetSliceBytes,
// float32), in *bytes (reused).
absl::Status ReadVolumeSlice(const DataRoot& root, const FastMriVolume& v,
                             uint32_t slice, std::string* bytes);

}  // namespace batchd

#endif  // BATCHD_WORKLOADS_FASTMRI_VOLUME_H_

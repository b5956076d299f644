// libFuzzer target for the HDF5 helper's replies as the daemon reads them
// (workloads/fastmri/hdf5_wire.h): a helper runs libhdf5 over a file a
// user wrote, and code a crafted file ran there may answer any bytes. The
// input is the file's size (8 bytes, little-endian) and then the packet.
// Any bytes must give an error or a volume the file can hold: widths in
// range, no more slices than bytes, contiguous datasets inside the file;
// an error's message is one printable line.
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "absl/types/span.h"
#include "fuzz/fuzz_util.h"
#include "workloads/fastmri/hdf5_wire.h"
#include "workloads/fastmri/kspace.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 8) return 0;
  batchd::FastMriVolume v;
  v.path = "knee_singlecoil_val/file1000000.h5";
  memcpy(&v.size, data, 8);
  // libFuzzer's own buffer of exactly the packet's bytes, so that
  // AddressSanitizer sees a read past them.
  const absl::Span<const uint8_t> packet(data + 8, size - 8);
  batchd::Hdf5Reply reply;
  absl::Status st = batchd::ParseHdf5Reply(packet, &reply);
  if (st.ok()) st = batchd::ApplyIndexReply(reply, &v);
  if (!st.ok()) {
    for (char c : st.message()) {
      if (c == '\n' || c == '\r' || c == '\x1b') {
        batchd::fuzz::Fail("an error message that is not one printable line");
      }
    }
    return 0;
  }
  if (v.width < uint32_t(batchd::kFastMriMinWidth) ||
      v.width > uint32_t(batchd::kFastMriMaxWidth) || v.slices > v.size) {
    batchd::fuzz::Fail("a volume whose shape the file cannot hold");
  }
  if (v.contiguous) {
    const uint64_t kbytes = uint64_t(v.slices) * v.KspaceSliceBytes();
    const uint64_t tbytes =
        uint64_t(v.slices) * batchd::FastMriVolume::kTargetSliceBytes;
    if (v.kspace_offset > v.size || kbytes > v.size - v.kspace_offset ||
        v.target_offset > v.size || tbytes > v.size - v.target_offset) {
      batchd::fuzz::Fail("contiguous datasets that end past the file");
    }
  }
  return 0;
}

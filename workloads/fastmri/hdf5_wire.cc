// The HDF5 helper's replies as the daemon reads them; see hdf5_wire.h.
#include "workloads/fastmri/hdf5_wire.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/format.h"
#include "workloads/fastmri/kspace.h"

namespace batchd {

absl::Status ParseHdf5Reply(absl::Span<const uint8_t> bytes, Hdf5Reply* reply) {
  if (bytes.size() != sizeof(Hdf5Reply)) {
    return absl::InternalError(
        absl::StrCat("fastmri: the HDF5 helper answered ", bytes.size(),
                     " bytes where a reply is ", sizeof(Hdf5Reply)));
  }
  memcpy(reply, bytes.data(), sizeof(Hdf5Reply));
  if (reply->code == int32_t(absl::StatusCode::kOk)) return absl::OkStatus();
  absl::StatusCode code = absl::StatusCode::kDataLoss;
  if (reply->code == int32_t(absl::StatusCode::kResourceExhausted) ||
      reply->code == int32_t(absl::StatusCode::kInternal)) {
    code = absl::StatusCode(reply->code);
  }
  const size_t n = std::min<size_t>(reply->message_len, kHdf5MaxMessage);
  const std::string message = Printable(absl::string_view(reply->message, n));
  return absl::Status(code, message.empty()
                                ? "fastmri: the HDF5 helper failed, saying "
                                  "nothing"
                                : message);
}

absl::Status ApplyIndexReply(const Hdf5Reply& reply, FastMriVolume* v) {
  FastMriVolume out = *v;
  out.slices = reply.slices;
  out.width = reply.width;
  out.volume_max = reply.volume_max;
  out.contiguous = reply.contiguous != 0;
  out.kspace_offset = out.contiguous ? reply.kspace_offset : 0;
  out.target_offset = out.contiguous ? reply.target_offset : 0;
  // Products of at most 2^32 slices and 10.5 MiB: no wrap in 64 bits.
  const uint64_t kbytes = uint64_t(out.slices) * out.KspaceSliceBytes();
  const uint64_t tbytes =
      uint64_t(out.slices) * FastMriVolume::kTargetSliceBytes;
  const bool sane =
      out.width >= uint32_t(kFastMriMinWidth) &&
      out.width <= uint32_t(kFastMriMaxWidth) && out.slices <= out.size &&
      (!out.contiguous || (out.kspace_offset <= out.size &&
                           kbytes <= out.size - out.kspace_offset &&
                           out.target_offset <= out.size &&
                           tbytes <= out.size - out.target_offset));
  if (!sane) {
    return absl::DataLossError(absl::StrCat(
        "fastmri: ", Printable(v->path), ": the HDF5 helper described it as ",
        out.slices, " slices of width ", out.width,
        ", which the file cannot hold"));
  }
  *v = out;
  return absl::OkStatus();
}

}  // namespace batchd

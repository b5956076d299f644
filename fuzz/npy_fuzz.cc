// libFuzzer target for the .npy reader (workloads/librispeech/npy.h), as
// LibriSpeech's audio and targets files are read: any bytes must give an
// array or a Status, never a crash or a read past the buffer. An accepted
// array must be exactly its header and its values.
#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"
#include "fuzz/fuzz_util.h"
#include "workloads/librispeech/npy.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // libFuzzer's own buffer of exactly `size` bytes, so that AddressSanitizer
  // sees a read past them (a std::string copy would hold a terminator, and
  // a short one lives in the string's inline buffer).
  const absl::string_view bytes(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<batchd::NpyArray> a =
      batchd::ParseNpy(bytes, "x_audio.npy", {"<i8", "<i4", "<i2"}, 320000);
  if (!a.ok()) return 0;
  if (a->length > 320000) batchd::fuzz::Fail("longer than the limit");
  if (a->data_offset + a->length * uint64_t(a->item_bytes) != size) {
    batchd::fuzz::Fail("header and values are not the whole file");
  }
  // Every value is read (within the bytes); unsigned, so that the sum may
  // wrap.
  uint64_t sum = 0;
  for (uint64_t i = 0; i < a->length; ++i) sum += uint64_t(a->at(i));
  (void)sum;
  return 0;
}

// libFuzzer target for the tf.train.Example wire format (ParseExample):
// any bytes give features or InvalidArgument, never a crash. What parses
// must survive a round trip through SerializeExample unchanged.
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "fuzz/fuzz_util.h"
#include "workloads/common/tf_example.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // libFuzzer's own buffer of exactly `size` bytes, so that AddressSanitizer
  // sees a read past them (a std::string copy would hold a terminator, and
  // a short one lives in the string's inline buffer).
  const absl::string_view bytes(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<batchd::ExampleFeatures> parsed = batchd::ParseExample(bytes);
  if (!parsed.ok()) return 0;
  absl::StatusOr<batchd::ExampleFeatures> again =
      batchd::ParseExample(batchd::SerializeExample(*parsed));
  if (!again.ok()) {
    batchd::fuzz::Fail("SerializeExample wrote what ParseExample refuses: " +
                       std::string(again.status().message()));
  }
  if (again->bytes != parsed->bytes || again->int64s != parsed->int64s ||
      again->floats.size() != parsed->floats.size()) {
    batchd::fuzz::Fail("features changed in a serialize/parse round trip");
  }
  return 0;
}

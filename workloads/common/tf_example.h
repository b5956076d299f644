// The tf.train.Example wire format, read directly (it is public and
// small), through the one protobuf wire reader (base/wire_reader.h):
//
//   Example    { Features features = 1; }
//   Features   { map<string, Feature> feature = 1; }
//                (each map entry: { string key = 1; Feature value = 2; })
//   Feature    { oneof kind { BytesList bytes_list = 1;
//                             FloatList float_list = 2;
//                             Int64List int64_list = 3; } }
//   BytesList  { repeated bytes value = 1; }
//   FloatList  { repeated float value = 1 [packed = true]; }
//   Int64List  { repeated int64 value = 1 [packed = true]; }
//
// Protobuf semantics kept here: unknown fields are skipped; a message field
// seen twice is merged; within a oneof, the last member seen wins; for a map
// key seen twice, the last entry wins.
//
// Thread safety: functions only.
#ifndef BATCHD_WORKLOADS_COMMON_TF_EXAMPLE_H_
#define BATCHD_WORKLOADS_COMMON_TF_EXAMPLE_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace batchd {

// The features of a tf.train.Example by feature name and kind.
struct ExampleFeatures {
  std::map<std::string, std::vector<std::string>> bytes;
  std::map<std::string, std::vector<int64_t>> int64s;
  std::map<std::string, std::vector<float>> floats;
};
// The most a parse keeps beyond the bytes of the values themselves: an
// object per value (a std::string per bytes value, 8 bytes per int64, 4 per
// float) and the map nodes of each feature entry. A value takes as little as
// one byte of a record (two for an empty bytes value, a few for an entry),
// so without a bound a record of 64 MiB of empty values would keep 1 GiB of
// std::strings, on each thread that reads one. 16 MiB: half a million bytes
// values or two million int64s, far beyond a real Example (an image and its
// label; a molecule's graph of a few thousand values).
inline constexpr uint64_t kMaxExampleOverheadBytes = uint64_t(16) << 20;

// Parses the serialized tf.train.Example wire format (field numbers from
// tensorflow/core/example/{example,feature}.proto), reading only the bytes
// `serialized` views. InvalidArgument on malformed input, and on one whose
// values would keep more than kMaxExampleOverheadBytes beyond their bytes
// (refused as it is parsed, before it keeps more); never crashes on any
// input.
absl::StatusOr<ExampleFeatures> ParseExample(absl::string_view serialized);
// The inverse, for generators and tests.
std::string SerializeExample(const ExampleFeatures& features);

}  // namespace batchd

#endif  // BATCHD_WORKLOADS_COMMON_TF_EXAMPLE_H_

// A strict reader of NumPy's .npy format (numpy/lib/format.py's documented
// layout), for the one-dimensional integer arrays of AlgoPerf's
// pre-processed LibriSpeech: the magic "\x93NUMPY", a version (1.0, 2.0 or
// 3.0), the header's length (2 bytes in version 1, 4 in 2 and 3), a Python
// dict literal {'descr': ..., 'fortran_order': ..., 'shape': (...)} padded
// with spaces and a newline, then the raw data.
//
// Bytes come from files anyone may have written: every length is checked
// against the buffer, and an error names the file and the offset.
//
// Thread safety: functions of values only.
#ifndef BATCHD_WORKLOADS_LIBRISPEECH_NPY_H_
#define BATCHD_WORKLOADS_LIBRISPEECH_NPY_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace batchd {

// A parsed one-dimensional little-endian signed integer array.
struct NpyArray {
  int item_bytes = 0;          // 2, 4 or 8 ('<i2', '<i4', '<i8')
  uint64_t length = 0;         // shape[0]
  uint64_t data_offset = 0;    // where the values start in the file
  const char* data = nullptr;  // into the parsed buffer

  // Value i (i < length), sign-extended.
  int64_t at(uint64_t i) const;
};

// Parses `bytes` (the whole file `file`, for messages) as a 1-D array of
// one of the integer dtypes in `descrs` (e.g. {"<i8"}), C order, at most
// `max_length` values, the data exactly length * item size bytes. Anything
// else is DataLoss naming the file, the offset and what was found.
absl::StatusOr<NpyArray> ParseNpy(absl::string_view bytes,
                                  const std::string& file,
                                  const std::vector<std::string>& descrs,
                                  uint64_t max_length);

}  // namespace batchd

#endif  // BATCHD_WORKLOADS_LIBRISPEECH_NPY_H_

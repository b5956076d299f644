// Reading small trusted files whole (TLS keys and certificates, models,
// tools' inputs). Data files of a data set are read through
// workloads/common/data_file.h instead, which confines and caps them.
//
// Thread safety: pure functions.
#ifndef BATCHD_BASE_FILES_H_
#define BATCHD_BASE_FILES_H_

#include <string>

#include "absl/status/statusor.h"

namespace batchd {

// The bytes of `path`. NotFound (or another code from errno) naming the
// path and the reason when it cannot be opened or read.
absl::StatusOr<std::string> ReadFileToString(const std::string& path);

}  // namespace batchd

#endif  // BATCHD_BASE_FILES_H_

// Reading small trusted files whole (TLS keys and certificates, models,
// tools' inputs), and whole ranges of a file already open. Data files of a
// data set are opened through storage/data_file.h, which confines
// and caps them.
//
// Thread safety: pure functions.
#ifndef BATCHD_BASE_FILES_H_
#define BATCHD_BASE_FILES_H_

#include <sys/types.h>

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace batchd {

// The bytes of `path`. NotFound (or another code from errno) naming the
// path and the reason when it cannot be opened or read.
absl::StatusOr<std::string> ReadFileToString(const std::string& path);

// Reads exactly n bytes at offset of the open file fd, retrying short and
// interrupted reads; returns the bytes read (less than n only at end of
// file) or -1 with errno set.
ssize_t PreadFull(int fd, void* buf, size_t n, uint64_t offset);

}  // namespace batchd

#endif  // BATCHD_BASE_FILES_H_

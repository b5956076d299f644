// TFRecord files (TensorFlow's record framing) and the tf.train.Example wire
// format, read directly: both are public and small.
//
// Framing of one record:
//   uint64 length (little endian)
//   uint32 masked_crc32c(length bytes)
//   byte   data[length]
//   uint32 masked_crc32c(data)
// masked_crc32c(x) = ((crc >> 15) | (crc << 17)) + 0xa282ead8, crc = CRC32C.
//
// Thread safety: TFRecordFile is immutable after Open (reads use pread), so
// any number of threads may call Read at once.
#ifndef BATCHD_WORKLOADS_COMMON_TFRECORD_H_
#define BATCHD_WORKLOADS_COMMON_TFRECORD_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "workloads/common/data_file.h"

namespace batchd {

uint32_t Crc32c(const void* data, size_t n, uint32_t crc = 0);
uint32_t MaskedCrc32c(const void* data, size_t n);

struct TFRecordOptions {
  // When set, the file is opened through it (confined to the data root);
  // otherwise by path. Either way: regular files only, never blocking.
  std::shared_ptr<const DataRoot> root;
  // A record longer than this is refused by Read (DataLoss) without being
  // read: shards are big, so the cap is per record, not per file.
  // Default: kDefaultMaxFileBytes.
  uint64_t max_record_bytes = kDefaultMaxFileBytes;
};

// One TFRecord file with an index of record offsets, built by one scan at
// Open (which checks every length CRC; data CRCs are checked on Read).
class TFRecordFile {
 public:
  // Errors name the file and the byte offset of the bad record.
  static absl::StatusOr<std::unique_ptr<TFRecordFile>> Open(
      const std::string& path, const TFRecordOptions& options = {});
  ~TFRecordFile();

  const std::string& path() const { return path_; }
  size_t size() const { return offsets_.size(); }
  // Record i's data; DataLoss (naming file and offset) on a CRC mismatch
  // or a record over max_record_bytes.
  absl::StatusOr<std::string> Read(size_t i) const;

 private:
  TFRecordFile(std::string path, int fd, std::vector<uint64_t> offsets,
               std::vector<uint64_t> lengths, uint64_t max_record_bytes);
  const std::string path_;
  const int fd_;
  const uint64_t max_record_bytes_;
  const std::vector<uint64_t> offsets_;  // of each record's data
  const std::vector<uint64_t> lengths_;
};

// Writes TFRecord files (generators and tests).
absl::Status WriteTFRecordFile(const std::string& path,
                               const std::vector<std::string>& records);

// The features of a tf.train.Example that batchd reads: bytes lists and
// int64 lists by feature name (float lists are skipped).
struct ExampleFeatures {
  std::map<std::string, std::vector<std::string>> bytes;
  std::map<std::string, std::vector<int64_t>> int64s;
};
// Parses the serialized tf.train.Example wire format (field numbers from
// tensorflow/core/example/{example,feature}.proto). InvalidArgument on
// malformed input; never crashes on any input.
absl::StatusOr<ExampleFeatures> ParseExample(const std::string& serialized);
// The inverse, for generators and tests.
std::string SerializeExample(const ExampleFeatures& features);

}  // namespace batchd

#endif  // BATCHD_WORKLOADS_COMMON_TFRECORD_H_

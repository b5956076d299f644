// TFRecord files (TensorFlow's record framing), read directly: it is public
// and small. The CRC is crc32c.h's; the offset index the cache may keep,
// tfrecord_index.h's; the records' usual contents, tf_example.h's.
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

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "storage/data_file.h"

namespace batchd {

class CacheDir;

// The framing around a record's data.
constexpr size_t kTFRecordHeaderBytes = 12;  // length + masked CRC of it
constexpr size_t kTFRecordFooterBytes = 4;   // masked CRC of the data

struct TFRecordOptions {
  // When set, the file is opened through it (confined to the data root);
  // otherwise by path. Either way: regular files only, never blocking.
  std::shared_ptr<const DataRoot> root;
  // A record longer than this is refused by Read (DataLoss) without being
  // read: shards are big, so the cap is per record, not per file.
  // Default: kDefaultMaxFileBytes.
  uint64_t max_record_bytes = kDefaultMaxFileBytes;
  // The persistent offset index (tfrecord_index.h); unset or disabled:
  // every Open scans the file.
  std::shared_ptr<const CacheDir> cache;
  // A file whose ctime is less than this before Open is indexed but its
  // index not stored (racy timestamps, tfrecord_index.h). Default 2 s.
  int64_t cache_settle_ns = 2'000'000'000;
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
  // Where the index came from: the cache (no scan), or a scan whose result
  // was stored in the cache.
  bool index_from_cache() const { return from_cache_; }
  bool index_stored() const { return stored_; }
  // Record i's data; DataLoss (naming file and offset) on a CRC mismatch
  // or a record over max_record_bytes.
  absl::StatusOr<std::string> Read(size_t i) const;

 private:
  TFRecordFile(std::string path, int fd, std::vector<uint64_t> offsets,
               std::vector<uint64_t> lengths, uint64_t max_record_bytes);
  const std::string path_;
  bool from_cache_ = false;
  bool stored_ = false;
  const int fd_;
  const uint64_t max_record_bytes_;
  const std::vector<uint64_t> offsets_;  // of each record's data
  const std::vector<uint64_t> lengths_;
};

// Writes TFRecord files (generators and tests).
absl::Status WriteTFRecordFile(const std::string& path,
                               const std::vector<std::string>& records);

}  // namespace batchd

#endif  // BATCHD_WORKLOADS_COMMON_TFRECORD_H_

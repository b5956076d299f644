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
//
// The offset index may be persisted (TFRecordOptions::cache): an entry of
// kind "tfrecord-offsets" keyed by the file's path relative to the data
// root holds the file's identity (inode, size, mtime and ctime in ns) and
// every record's length. It is used only when the identity of the file
// opened equals the stored one. Exactness: the offsets are a function of
// the file's bytes; bytes are only changed by writing the file, which sets
// its mtime and ctime (and appending or truncating its size); a file
// replaced by another has another inode. ctime cannot be set back by
// utimensat, so even a writer that restores the mtime is seen. The device
// number is left out on purpose: it changes at every mount of FUSE and some
// network file systems, while inodes (and the root-relative path in the
// key) stay. Racy writes: timestamps have a granularity (a kernel tick
// locally, the server's clock on NFS), so a file changed less than
// cache_settle_ns before Open could change again within the same
// timestamp; its index is used but not stored. The lengths are checked
// against the file size on load (a damaged value is rebuilt, with a
// warning); CacheDir checks the checksum and the whole key.
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

class CacheDir;

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
  // The persistent offset index (see the top of this file); unset or
  // disabled: every Open scans the file.
  std::shared_ptr<const CacheDir> cache;
  // A file whose ctime is less than this before Open is indexed but its
  // index not stored (racy timestamps, see above). Default 2 s.
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

// The offset index of a TFRecord file, persisted in the cache directory
// (storage/cache_dir.h) so that opening a data set's shards again
// does not scan every record header.
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
//
// Thread safety: functions only; CacheDir's entry lock makes one opener
// scan and store while the others wait and load.
#ifndef BATCHD_WORKLOADS_COMMON_TFRECORD_INDEX_H_
#define BATCHD_WORKLOADS_COMMON_TFRECORD_INDEX_H_

#include <sys/stat.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "storage/data_file.h"

namespace batchd {

class CacheDir;

// Where each record's data starts, and its length.
struct RecordIndex {
  std::vector<uint64_t> offsets;
  std::vector<uint64_t> lengths;
  bool from_cache = false;  // loaded, no scan
  bool stored = false;      // scanned, and stored in the cache
};

// One scan of an open file's record headers (tfrecord.cc).
using ScanRecordsFn = std::function<absl::Status(
    std::vector<uint64_t>* offsets, std::vector<uint64_t>* lengths)>;

// The index of the open file `path` (`st`: its fstat; `root`, may be null,
// names the cache key relative to the data root): from `cache` when its
// entry fits the file's identity, else by `scan`, then stored unless the
// file changed less than `settle_ns` ago. scan's errors are returned; a
// cache that cannot be read or written, or an entry that does not fit the
// file, is a warning (and a scan).
absl::StatusOr<RecordIndex> CachedRecordIndex(
    const CacheDir& cache, const DataRoot* root, const std::string& path,
    const struct stat& st, int64_t settle_ns, const ScanRecordsFn& scan);

}  // namespace batchd

#endif  // BATCHD_WORKLOADS_COMMON_TFRECORD_INDEX_H_

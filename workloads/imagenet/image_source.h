// Where the encoded images and labels of one split come from: an ImageFolder
// tree (torchvision's layout and order) or TFDS imagenet2012 TFRecord shards.
//
// Thread safety: immutable after Open; Read may be called from any number of
// threads at once (it uses pread). Open indexes on up to 16 threads at once
// of the executor it is given (class folders, cache validation, shards): on
// network storage each listing, stat and header read waits for a round
// trip, and the waits overlap. The result is the same as one thread's.
#ifndef BATCHD_WORKLOADS_IMAGENET_IMAGE_SOURCE_H_
#define BATCHD_WORKLOADS_IMAGENET_IMAGE_SOURCE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "storage/data_file.h"

namespace batchd {

class CacheDir;
class Executor;  // base/executor.h

// What indexing did at Open (for logs, tests and benchmarks).
struct ImageIndexStats {
  // ImageFolder: the listing came from the cache (no directory was read),
  // or was built and stored in it.
  bool listing_from_cache = false;
  bool listing_stored = false;
  // TFRecord: shards whose offsets came from the cache, were scanned, and
  // of those scanned, were stored.
  uint64_t shards_from_cache = 0;
  uint64_t shards_scanned = 0;
  uint64_t shards_stored = 0;
};

// Where and how a source reads its files.
struct ImageSourceOptions {
  // Every file and directory is opened through it: confined to the data
  // root, regular files only, non-blocking (storage/data_file.h).
  // Unset: the directory opened (or each shard's directory) is the root.
  std::shared_ptr<const DataRoot> root;
  // A larger image file is an error of that example (a decode error),
  // refused from its size without being read; for TFRecord shards, the cap
  // of one record. Default: kDefaultMaxFileBytes (64 MiB).
  uint64_t max_file_bytes = kDefaultMaxFileBytes;
  // Report indexing progress on stderr every couple of seconds.
  bool progress = false;
  // The persistent index cache (storage/cache_dir.h): ImageFolder
  // listings (kind "imagefolder") and TFRecord offsets ("tfrecord-offsets",
  // see workloads/common/tfrecord.h). Unset or disabled: indexed each Open.
  std::shared_ptr<const CacheDir> cache;
  // Inputs changed less than this before Open are indexed but not stored:
  // timestamps have a granularity, so a second change within it would not
  // be seen. Default 2 s.
  int64_t cache_settle_ns = 2'000'000'000;
  // When set, receives what indexing did.
  ImageIndexStats* stats = nullptr;
  // Where Open lists folders and opens shards, several at once
  // (base/executor.h), borrowed for Open only; null: one at a time on the
  // caller's thread.
  Executor* executor = nullptr;
};

class ImageSource {
 public:
  virtual ~ImageSource() = default;
  virtual uint64_t size() const = 0;
  // Example i's encoded image into *bytes (reused) and its label.
  virtual absl::Status Read(uint64_t i, std::string* bytes,
                            int64_t* label) const = 0;
  // What example i is, for messages: a file path, or shard and record.
  virtual std::string Describe(uint64_t i) const = 0;
  // Class names by label (ImageFolder only; empty for TFRecord shards).
  virtual std::vector<std::string> classes() const { return {}; }
};

// torchvision.datasets.ImageFolder(dir): class folders sorted by name, each
// walked recursively (symlinks followed while they stay inside the data
// root; a folder that leaves it is skipped, as os.walk skips a folder it
// cannot list; directories in sorted path order,
// files sorted by name) keeping files whose lower-cased name ends with one
// of torchvision's IMG_EXTENSIONS; label = index of the class. Fails as
// torchvision does on no class folder or a class with no file. With
// `progress`, reports on stderr every couple of seconds while indexing.
//
// The listing cache. The listing (classes, paths, labels) is a function of
// the names in every directory walked and of each entry's type (directory
// or not, after following symlinks), given the extension rules and the
// depth limit (both in the key, with the root-relative path of `dir`). The
// entry stores, for every directory walked (`dir` itself, the class
// folders, their subfolders), its identity: inode, size, mtime and ctime
// in ns (or that it could not be listed), and the names of its symlinks
// that were taken as files. A cached listing is used only when every one
// of those directories, opened again through the data root, has the same
// identity, and each such symlink still does not resolve to a directory:
//   - a file or folder added, removed or renamed in a directory changes
//     that directory's mtime and ctime (POSIX), so the change is seen in
//     the directory that holds it; a new class folder changes `dir`;
//   - a directory replaced by another (or a symlinked folder retargeted)
//     has another inode; a directory made unreadable or readable changes
//     its ctime; a symlink is changed only by replacing it (the directory
//     holding it changes);
//   - a symlink whose target turns from a file into a directory leaves
//     every walked directory unchanged, hence the re-stat of each symlink
//     taken as a file (none in a tree of plain files and hard links);
//   - a file rewritten in place changes no name: its bytes are read at
//     decode, not at indexing, so the listing is still exact.
// Validation thus costs one open and fstat per directory (1001 for
// ImageNet), never one per file. The device number is left out (it changes
// at each FUSE or NFS mount; the inodes do not). Timestamps have a
// granularity, so a listing is stored only when every directory's mtime
// and ctime are cache_settle_ns old: a change within the same tick after
// the listing could otherwise keep the identity.
absl::StatusOr<std::unique_ptr<ImageSource>> OpenImageFolder(
    const std::string& dir, const ImageSourceOptions& options);
absl::StatusOr<std::unique_ptr<ImageSource>> OpenImageFolder(
    const std::string& dir, bool progress);

// TFRecord shards of tf.train.Example with `image` (encoded bytes) and
// `label` (int64), in the order given; record offsets are indexed at Open,
// or taken from options.cache (TFRecordOptions::cache).
absl::StatusOr<std::unique_ptr<ImageSource>> OpenTFRecordImages(
    const std::vector<std::string>& files, const ImageSourceOptions& options);
absl::StatusOr<std::unique_ptr<ImageSource>> OpenTFRecordImages(
    const std::vector<std::string>& files, bool progress);

// The TFRecord shards of `split` in `dir`: files named
// <name>-<split>.tfrecord-NNNNN-of-NNNNN (or ending -<split>.tfrecord),
// sorted by name. Empty when there are none.
std::vector<std::string> FindTFRecordShards(const std::string& dir,
                                            const std::string& split,
                                            const DataRoot* root = nullptr);

}  // namespace batchd

#endif  // BATCHD_WORKLOADS_IMAGENET_IMAGE_SOURCE_H_

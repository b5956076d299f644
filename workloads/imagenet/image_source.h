// Where the encoded images and labels of one split come from: an ImageFolder
// tree (torchvision's layout and order) or TFDS imagenet2012 TFRecord shards.
//
// Thread safety: immutable after Open; Read may be called from any number of
// threads at once (it uses pread).
#ifndef BATCHD_WORKLOADS_IMAGENET_IMAGE_SOURCE_H_
#define BATCHD_WORKLOADS_IMAGENET_IMAGE_SOURCE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "workloads/common/data_file.h"

namespace batchd {

// Where and how a source reads its files.
struct ImageSourceOptions {
  // Every file and directory is opened through it: confined to the data
  // root, regular files only, non-blocking (workloads/common/data_file.h).
  // Unset: the directory opened (or each shard's directory) is the root.
  std::shared_ptr<const DataRoot> root;
  // A larger image file is an error of that example (a decode error),
  // refused from its size without being read; for TFRecord shards, the cap
  // of one record. Default: kDefaultMaxFileBytes (64 MiB).
  uint64_t max_file_bytes = kDefaultMaxFileBytes;
  // Report indexing progress on stderr every couple of seconds.
  bool progress = false;
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
absl::StatusOr<std::unique_ptr<ImageSource>> OpenImageFolder(
    const std::string& dir, const ImageSourceOptions& options);
absl::StatusOr<std::unique_ptr<ImageSource>> OpenImageFolder(
    const std::string& dir, bool progress);

// TFRecord shards of tf.train.Example with `image` (encoded bytes) and
// `label` (int64), in the order given; record offsets are indexed at Open.
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

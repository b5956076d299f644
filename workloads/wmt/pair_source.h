// Where WMT translation pairs come from: TFDS TFRecord shards or plain
// aligned text files, both seen as N pairs (de, en) numbered from 0.
//
// How `data` (a directory) and `split` map to files, tried in this order
// when the kind is "auto":
//   tfds <data>/<builder>/de-en/1.0.0/<builder>-<split>.tfrecord-NNNNN-of-MMMMM
//         with builder wmt17_translate for train and wmt14_translate for
//         validation and test (AlgoPerf's choice); the other builder is
//         tried next. Every shard 0..MMMMM-1 must be there; shards are read
//         in order, records in file order.
//   text  <data>/<split>.de and <data>/<split>.en, UTF-8, one sentence per
//         line ('\n', a trailing '\r' is dropped), same line count. Lines
//         are read with pread, never mapped: memory holds the line offsets
//         (8 bytes a line), not the text. The offsets come from one
//         sequential pass with a bounded buffer, or from the cache (kind
//         "wmt-lines", keyed by the file's identity) when one is given.
//
// Thread safety: immutable after Open; Read may be called from any number
// of threads at once.
#ifndef BATCHD_WORKLOADS_WMT_PAIR_SOURCE_H_
#define BATCHD_WORKLOADS_WMT_PAIR_SOURCE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "storage/cache_dir.h"
#include "storage/data_file.h"

namespace batchd {

class Executor;  // base/executor.h

namespace wmt {

class PairSource {
 public:
  virtual ~PairSource() = default;
  virtual uint64_t size() const = 0;
  // Pair i. DataLoss or InvalidArgument (naming file and record or line) for
  // a damaged record that readers may count and skip; other codes are I/O
  // errors.
  virtual absl::Status Read(uint64_t i, std::string* de,
                            std::string* en) const = 0;
  // What was opened, for messages: a directory and a file pattern.
  virtual std::string Describe() const = 0;
  // The identity of every file read (FileIdentity of cache_dir.h, in
  // order), for cache keys: it changes when any file does.
  virtual std::string Identity() const = 0;

  // Whether pair i is one stored record (TFDS) that can be read and parsed
  // apart, for read-ahead: Read(i) is then ReadRecord(i) followed by
  // ParseRecord(i, bytes), with the same results and errors. Default:
  // false (text files; both then return Unimplemented).
  virtual bool has_records() const { return false; }
  // The stored bytes of pair i: I/O errors, and DataLoss for a damaged
  // record, as Read reports them.
  virtual absl::Status ReadRecord(uint64_t i, std::string* bytes) const {
    return absl::UnimplementedError("pairs of this source are not records");
  }
  // Pair i from its stored bytes: InvalidArgument (naming file and record)
  // when they do not hold a pair.
  virtual absl::Status ParseRecord(uint64_t i, const std::string& bytes,
                                   std::string* de, std::string* en) const {
    return absl::UnimplementedError("pairs of this source are not records");
  }
};

// How a source opens its files.
struct PairSourceOptions {
  // Every file is opened through it (confined to the data root, regular
  // files only, non-blocking); unset: `data` is the root.
  std::shared_ptr<const DataRoot> root;
  // A TFRecord record or a text line longer than this is a damaged pair
  // (DataLoss), refused without being read whole. Default: 64 MiB.
  uint64_t max_record_bytes = kDefaultMaxFileBytes;
  // Where text sources keep their line offsets; null or disabled: each
  // Open scans the files.
  std::shared_ptr<const CacheDir> cache;
  // Where TFDS shards are opened, several at once (base/executor.h); null:
  // one after another on the caller's thread.
  Executor* executor = nullptr;
};

// kind: "auto", "tfds" or "text". NotFound names every path it tried.
absl::StatusOr<std::unique_ptr<PairSource>> OpenPairSource(
    const std::string& data, const std::string& split, const std::string& kind,
    const PairSourceOptions& options = {});

// The TFDS files of one split, sorted; empty when there are none. An
// incomplete shard set (a missing NNNNN, mixed MMMMM) is an error.
absl::StatusOr<std::vector<std::string>> FindTfdsShards(
    const std::string& data, const std::string& split);

}  // namespace wmt
}  // namespace batchd

#endif  // BATCHD_WORKLOADS_WMT_PAIR_SOURCE_H_

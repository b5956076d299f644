// Opening the files of a data tree, which other users may have written:
// every open is confined to the data root, takes regular files (or
// directories) only, never blocks, and whole-file reads are capped.
//
// The rule for symbolic links: a link inside the root may point anywhere
// inside the root (hard-linked and symlinked data trees are common, and
// torchvision follows links); a link whose target leads outside the root,
// or through /proc magic links, is refused. Nothing is resolved by path
// string (no realpath, no stat of a user's path): with openat2(2) (Linux
// 5.6+) the kernel walks the path, RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS
// from a descriptor of the root; where it cannot (an absolute link, which
// RESOLVE_BENEATH refuses even when it names the root; no openat2) we walk
// it ourselves, one component at a time from the root's descriptor
// (storage/path_walk.h): links read and followed at most 40 deep,
// `..` never above the root, an absolute target taken only when it begins
// with a name of the root (its resolved path, the path it was opened by,
// the operator's --data-root as given: AddOperatorName). A link swapped
// while a path is opened changes what is read next, never where the walk
// may go.
//
// Whose permissions: a DataRoot opened for a ReadAccess other than the
// daemon's (storage/read_access.h) opens only what that reader
// could open itself, from the root down (the root's own directory
// included; its parents are the operator's). Where the daemon can take the
// reader's credentials (it runs as root), every lookup of the walk, the
// kernel's or ours, is made with them; where it cannot (a daemon of another
// uid, a TCP caller), our walk checks the mode bits and ACLs of every
// directory it looks a name up in, through every link, and of the file it
// opens. To either kind of reader a path that is missing, one it may not
// reach and one that leads outside the root (or loops) fail exactly alike:
// NotFound, one message naming the path and the reader, so that no answer
// says what exists where the reader cannot look. Unrestricted readers (the
// daemon, root, the daemon's uid) get the detailed errors.
//
// Thread safety: a DataRoot is immutable after Open; any number of threads
// may open files through it at once.
#ifndef BATCHD_STORAGE_DATA_FILE_H_
#define BATCHD_STORAGE_DATA_FILE_H_

#include <dirent.h>
#include <sys/stat.h>

#include <cstdint>
#include <memory>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "storage/path_walk.h"
#include "storage/read_access.h"

namespace batchd {

// Default cap of one whole-file read (an image): ImageNet's largest JPEG is
// a few MiB, so 64 MiB refuses only what is not a photograph.
constexpr uint64_t kDefaultMaxFileBytes = uint64_t(64) << 20;
// Default bound of any data file opened (batchd --max-data-file-bytes):
// 256 GiB, five times a Criteo 1TB day file (~50 GB), the largest file of
// the AlgoPerf data sets, and far below what a sparse file can claim
// (`truncate -s 2T` costs nothing on disk, and a pass over it hours).
constexpr uint64_t kDefaultMaxDataFileBytes = uint64_t(256) << 30;

class DataRoot {
 public:
  // `root` must be an existing directory; it is resolved (realpath: the
  // operator's path, not a user's) here and held open, so that later renames
  // of its parents do not move it. Files are opened with `access`'s
  // permissions, and none larger than `max_file_bytes` (OpenFile).
  static absl::StatusOr<std::shared_ptr<const DataRoot>> Open(
      const std::string& root, const ReadAccess& access = ReadAccess(),
      uint64_t max_file_bytes = kDefaultMaxDataFileBytes);
  ~DataRoot();
  DataRoot(const DataRoot&) = delete;
  DataRoot& operator=(const DataRoot&) = delete;

  // The resolved root.
  const std::string& path() const { return path_; }
  const ReadAccess& access() const { return access_; }
  uint64_t max_file_bytes() const { return max_file_bytes_; }

  // The real path of `path` (absolute and beneath path(), or relative to
  // it): a directory the reader may search, or a file it may read (any
  // other kind of file is the workload's to refuse). NotFound when missing
  // (for a restricted reader: the one message, also when out of its reach
  // or leading outside the root); PermissionDenied when it leads outside
  // the root (unrestricted readers).
  absl::StatusOr<std::string> Resolve(const std::string& path) const;

  // The fstat of what `path` (as Resolve takes it) leads to, reached as the
  // reader reaches it: no name is looked up with rights the reader lacks,
  // so a link swapped in after Resolve stats nothing beyond its reach.
  // Resolve's errors otherwise.
  absl::Status Stat(const std::string& path, struct stat* st) const;

  // Opens `path` (absolute and beneath path(), or relative to it) read-only,
  // close-on-exec and non-blocking, and returns the descriptor, which the
  // caller closes. PermissionDenied when it resolves outside the root,
  // FailedPrecondition when it is not a regular file (a FIFO, a device, a
  // directory) or its links loop, NotFound when missing; a restricted
  // reader gets NotFound, the one message, for every path it cannot open.
  // ResourceExhausted (CheckFileSize) when it is larger than
  // max_file_bytes(), before anything reads it. `st` (optional) receives
  // its fstat.
  absl::StatusOr<int> OpenFile(const std::string& path,
                               struct stat* st = nullptr) const;
  // The same for a directory (to list it with fdopendir).
  absl::StatusOr<int> OpenDirectory(const std::string& path) const;
  // Lists directory `path` (opened as OpenDirectory does): calls `visit`
  // with each entry but "." and "..", in readdir's order, until it returns
  // false. OpenDirectory's errors, or Internal when it cannot be read.
  absl::Status ForEachEntry(
      const std::string& path,
      absl::FunctionRef<bool(const struct dirent&)> visit) const;
  // Whether `path` leads to a directory inside the root that the reader
  // reaches (stat(2) as the reader would, confined): how a listing tells a
  // link to a directory from any other entry.
  bool IsDirectory(const std::string& path) const;

  // `name` is another absolute name of the root whose resolved path is
  // `resolved`: the daemon's --data-root as the operator gave it (a link,
  // say /data -> /mnt/nvme/data), which absolute links in the tree may use.
  // Every DataRoot of `resolved` opened afterwards accepts it.
  static void AddOperatorName(const std::string& resolved,
                              const std::string& name);

  // Tests: pretend the kernel has no openat2, so that every open takes our
  // walk.
  static void DisableOpenat2ForTesting(bool disable);

 private:
  DataRoot(WalkRoot walk, std::string path, ReadAccess access,
           uint64_t max_file_bytes)
      : walk_(std::move(walk)),
        path_(std::move(path)),
        access_(std::move(access)),
        max_file_bytes_(max_file_bytes) {}
  absl::StatusOr<int> OpenBeneath(const std::string& path, int flags,
                                  bool directory, struct stat* st) const;
  // The descriptor of `path` opened with `flags`, the reader granted `want`
  // (ReadAccess::Want; 0: only the directories walked) on what it names.
  absl::StatusOr<int> OpenChecked(const std::string& path, int flags,
                                  int want) const;
  // The error for a path the reader cannot open, whatever the reason.
  absl::Status Unreachable(const std::string& path) const;

  const WalkRoot walk_;     // the root's descriptor (owned), identity, names
  const std::string path_;  // resolved
  const ReadAccess access_;
  const uint64_t max_file_bytes_;
};

// OK, or ResourceExhausted when `st` (of `path`) is larger than
// `max_file_bytes`: "<path> is N bytes, over the limit of M bytes of one
// data file (batchd --max-data-file-bytes)".
absl::Status CheckFileSize(const std::string& path, const struct stat& st,
                           uint64_t max_file_bytes);

// Reads the regular file `path` (confined to `root`) whole into *bytes,
// which is reused. A file larger than max_bytes is refused from its size,
// without reading it (a sparse 1 GiB file costs nothing), with
// ResourceExhausted naming the size and the cap.
absl::Status ReadFileCapped(const DataRoot& root, const std::string& path,
                            uint64_t max_bytes, std::string* bytes);

}  // namespace batchd

#endif  // BATCHD_STORAGE_DATA_FILE_H_

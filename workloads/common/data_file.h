// Opening the files of a data tree, which other users may have written:
// every open is confined to the data root, takes regular files (or
// directories) only, never blocks, and whole-file reads are capped.
//
// The rule for symbolic links: a link inside the root may point anywhere
// inside the root (hard-linked and symlinked data trees are common, and
// torchvision follows links); a link whose target resolves outside the root,
// or through /proc magic links, is refused. With openat2(2) (Linux 5.6+)
// this is RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS from a descriptor of the
// root; an absolute link that stays inside the root is resolved once with
// realpath(3) and the result opened with RESOLVE_NO_SYMLINKS, so a link
// swapped in between fails instead of escaping. Without openat2 the same
// resolved path is opened one component at a time with O_NOFOLLOW.
//
// Whose permissions: a DataRoot opened for a ReadAccess other than the
// daemon's (workloads/common/read_access.h) opens only what that reader
// could open itself, from the root down (the root's own directory
// included; its parents are the operator's). A path the reader may not
// reach fails exactly as a missing one does: NotFound, one message naming
// the path and the reader, so that no error says what exists where the
// reader cannot look.
//
// Thread safety: a DataRoot is immutable after Open; any number of threads
// may open files through it at once.
#ifndef BATCHD_WORKLOADS_COMMON_DATA_FILE_H_
#define BATCHD_WORKLOADS_COMMON_DATA_FILE_H_

#include <sys/stat.h>

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "workloads/common/read_access.h"

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
  // `root` must be an existing directory; it is resolved (realpath) here and
  // held open, so that later renames of its parents do not move it. Files
  // are opened with `access`'s permissions, and none larger than
  // `max_file_bytes` (OpenFile).
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
  // other kind of file is the workload's to refuse). NotFound (the one
  // message) when missing or out of the reader's reach; PermissionDenied
  // when it resolves outside the root.
  absl::StatusOr<std::string> Resolve(const std::string& path) const;

  // Opens `path` (absolute and beneath path(), or relative to it) read-only,
  // close-on-exec and non-blocking, and returns the descriptor, which the
  // caller closes. PermissionDenied when it resolves outside the root,
  // FailedPrecondition when it is not a regular file (a FIFO, a device, a
  // directory), NotFound when missing; ResourceExhausted (CheckFileSize)
  // when it is larger than max_file_bytes(), before anything reads it. `st`
  // (optional) receives its fstat.
  absl::StatusOr<int> OpenFile(const std::string& path,
                               struct stat* st = nullptr) const;
  // The same for a directory (to list it with fdopendir).
  absl::StatusOr<int> OpenDirectory(const std::string& path) const;

  // Tests: pretend the kernel has no openat2, to exercise the fallback.
  static void DisableOpenat2ForTesting(bool disable);

 private:
  DataRoot(int fd, std::string path, std::string given, ReadAccess access,
           uint64_t max_file_bytes)
      : fd_(fd),
        path_(std::move(path)),
        given_(std::move(given)),
        access_(std::move(access)),
        max_file_bytes_(max_file_bytes) {}
  absl::StatusOr<int> OpenBeneath(const std::string& path, int flags,
                                  bool directory, struct stat* st) const;
  // The descriptor of `path` opened with `flags`, the reader granted `want`
  // (ReadAccess::Want; 0: only the directories walked) on what it names.
  absl::StatusOr<int> OpenChecked(const std::string& path, int flags,
                                  int want) const;
  // Bits check of an open `fd` reached by `rel`: every directory walked
  // searchable, `want` on the file itself.
  bool BitsPermit(int fd, const std::string& rel, int want) const;
  // The error for a path the reader cannot open, whatever the reason.
  absl::Status Unreachable(const std::string& path) const;

  const int fd_;
  const std::string path_;   // resolved
  const std::string given_;  // as passed to Open (paths may be built on it)
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

#endif  // BATCHD_WORKLOADS_COMMON_DATA_FILE_H_

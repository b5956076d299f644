// Confined, non-blocking, capped opens of data files; see data_file.h.
#include "storage/data_file.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "base/files.h"
#include "base/paths.h"
#include "storage/path_walk.h"

namespace batchd {

namespace {

std::atomic<bool> g_no_openat2{false};

const char* TypeName(mode_t mode) {
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISLNK(mode)) return "a symbolic link";
  return "not a regular file";
}

absl::Status ErrnoStatus(const std::string& what, int err) {
  const std::string msg = absl::StrCat(what, ": ", strerror(err));
  if (err == ENOENT || err == ENOTDIR) return absl::NotFoundError(msg);
  if (err == EACCES || err == EPERM) return absl::PermissionDeniedError(msg);
  return absl::UnavailableError(msg);
}

int Openat2(int dirfd, const char* path, int flags, uint64_t resolve) {
  if (g_no_openat2.load(std::memory_order_relaxed)) {
    errno = ENOSYS;
    return -1;
  }
  open_how how;
  memset(&how, 0, sizeof(how));
  how.flags = uint64_t(flags);
  how.resolve = resolve;
  int fd;
  do {
    fd = int(syscall(SYS_openat2, dirfd, path, &how, sizeof(how)));
  } while (fd < 0 && errno == EAGAIN);  // a rename raced the lookup
  return fd;
}

// The operator's names of data roots (--data-root as given, before it was
// resolved), by resolved path.
struct OperatorNames {
  absl::Mutex mu;
  std::vector<std::pair<std::string, std::string>> names ABSL_GUARDED_BY(mu);
};

OperatorNames& Operators() {
  static OperatorNames* names = new OperatorNames;
  return *names;
}

}  // namespace

void DataRoot::DisableOpenat2ForTesting(bool disable) {
  g_no_openat2.store(disable);
}

void DataRoot::AddOperatorName(const std::string& resolved,
                               const std::string& name) {
  OperatorNames& o = Operators();
  absl::MutexLock lock(&o.mu);
  const std::pair<std::string, std::string> entry(resolved, name);
  if (std::find(o.names.begin(), o.names.end(), entry) == o.names.end()) {
    o.names.push_back(entry);
  }
}

absl::StatusOr<std::shared_ptr<const DataRoot>> DataRoot::Open(
    const std::string& root, const ReadAccess& access,
    uint64_t max_file_bytes) {
  // The operator's path (a flag, a tool's argument), not a user's.
  char resolved[PATH_MAX];
  if (realpath(root.c_str(), resolved) == nullptr) {
    return ErrnoStatus(absl::StrCat("data root ", root), errno);
  }
  const int fd = open(resolved, O_PATH | O_DIRECTORY | O_CLOEXEC);
  struct stat st;
  if (fd < 0 || fstat(fd, &st) != 0) {
    const int err = errno;
    if (fd >= 0) close(fd);
    return ErrnoStatus(absl::StrCat("cannot open data root ", resolved), err);
  }
  WalkRoot walk;
  walk.fd = fd;
  walk.dev = st.st_dev;
  walk.ino = st.st_ino;
  // The names an absolute link may give the root: its resolved path, the
  // path it was opened by, and the operator's names of it.
  std::vector<std::string> names = {resolved, root};
  {
    OperatorNames& o = Operators();
    absl::MutexLock lock(&o.mu);
    for (const auto& [path, name] : o.names) {
      if (path == resolved) names.push_back(name);
    }
  }
  for (const std::string& name : names) {
    if (name.empty() || name[0] != '/') continue;
    std::vector<std::string> parts = PathComponents(name);
    if (!parts.empty() && parts.back() == ".") parts.pop_back();
    if (std::find(walk.names.begin(), walk.names.end(), parts) ==
        walk.names.end()) {
      walk.names.push_back(std::move(parts));
    }
  }
  return std::shared_ptr<const DataRoot>(
      new DataRoot(std::move(walk), resolved, access, max_file_bytes));
}

DataRoot::~DataRoot() { close(walk_.fd); }

absl::StatusOr<int> DataRoot::OpenFile(const std::string& path,
                                       struct stat* st) const {
  struct stat own;
  struct stat* const info = st != nullptr ? st : &own;
  absl::StatusOr<int> fd = OpenBeneath(
      path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY, false, info);
  if (!fd.ok()) return fd;
  if (absl::Status s = CheckFileSize(path, *info, max_file_bytes_); !s.ok()) {
    close(*fd);
    return s;
  }
  return fd;
}

absl::StatusOr<int> DataRoot::OpenDirectory(const std::string& path) const {
  return OpenBeneath(path, O_RDONLY | O_CLOEXEC | O_DIRECTORY, true, nullptr);
}

absl::Status DataRoot::ForEachEntry(
    const std::string& path,
    absl::FunctionRef<bool(const struct dirent&)> visit) const {
  absl::StatusOr<int> fd = OpenDirectory(path);
  if (!fd.ok()) return fd.status();
  DIR* d = fdopendir(*fd);
  if (d == nullptr) {
    const int err = errno;
    close(*fd);
    return absl::InternalError(
        absl::StrCat("cannot list ", path, ": ", strerror(err)));
  }
  while (const dirent* e = readdir(d)) {
    const absl::string_view name(e->d_name);
    if (name == "." || name == "..") continue;
    if (!visit(*e)) break;
  }
  closedir(d);
  return absl::OkStatus();
}

bool DataRoot::IsDirectory(const std::string& path) const {
  absl::StatusOr<int> fd =
      OpenChecked(path, O_PATH | O_DIRECTORY | O_CLOEXEC, 0);
  if (!fd.ok()) return false;
  close(*fd);
  return true;
}

absl::Status DataRoot::Unreachable(const std::string& path) const {
  return absl::NotFoundError(absl::StrCat("cannot open ", path,
                                          ": no such file, or not readable by ",
                                          access_.Describe()));
}

absl::StatusOr<int> DataRoot::OpenChecked(const std::string& path, int flags,
                                          int want) const {
  const bool restricted = access_.restricted();
  // The path relative to the root; an absolute one must name a place
  // beneath it lexically (callers build paths from the resolved root).
  std::string rel;
  if (!path.empty() && path[0] == '/') {
    if (PathIsWithin(path, path_)) {
      rel = path.substr(path_ == "/" ? 0 : path_.size());
      // Relative to the root's descriptor (openat2 refuses an absolute path
      // beneath it).
      rel.erase(0, rel.find_first_not_of('/'));
    } else {
      const std::vector<std::string> parts = PathComponents(path);
      const int prefix = RootNamePrefix(walk_, parts);
      if (prefix < 0) {
        if (restricted) return Unreachable(path);
        return absl::PermissionDeniedError(
            absl::StrCat(path, " is outside the data root ", path_));
      }
      rel = absl::StrJoin(parts.begin() + prefix, parts.end(), "/");
    }
  } else {
    rel = path;
  }
  if (rel.empty()) rel = ".";
  // The whole resolution runs with the reader's credentials where the
  // daemon can take them: every lookup is the kernel's check of the
  // reader's rights.
  FsCredsScope as(access_);
  if (!as.ok()) {
    if (restricted) return Unreachable(path);
    return absl::UnavailableError(absl::StrCat(
        "cannot open ", path, ": cannot take the reader's rights"));
  }
  const bool by_bits = restricted && !access_.by_kernel();
  int err = ENOSYS;
  if (!by_bits) {
    // The kernel's walk: links anywhere inside the root, none out of it.
    const int fd = Openat2(walk_.fd, rel.c_str(), flags,
                           RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS);
    if (fd >= 0) return fd;
    err = errno;
  }
  if (by_bits || err == EXDEV || err == ELOOP || err == ENOSYS) {
    // An absolute link (refused by RESOLVE_BENEATH even when it names the
    // root), a link out of the root, a loop, no openat2, or a reader the
    // kernel cannot check: our own walk, with the same rights.
    const WalkResult w =
        WalkBeneath(walk_, rel, flags, by_bits ? &access_ : nullptr, want);
    if (w.fd >= 0) return w.fd;
    switch (w.failure) {
      case WalkFailure::kMissing:
      case WalkFailure::kDenied:
        err = w.err;
        break;  // as the kernel's own errors, below
      case WalkFailure::kOutside:
      case WalkFailure::kLoop:
        // Which one, and where the path leads, only to whom may read every
        // directory.
        if (restricted) return Unreachable(path);
        if (w.failure == WalkFailure::kLoop) {
          return absl::FailedPreconditionError(
              absl::StrCat("cannot open ", path, ": more than ", kMaxLinks,
                           " symbolic links (a loop)"));
        }
        return absl::PermissionDeniedError(
            absl::StrCat(path, " resolves outside the data root ", path_,
                         " (through ", w.outside, ")"));
      case WalkFailure::kSystem:
        if (w.err == EAGAIN) {
          return absl::UnavailableError(absl::StrCat(
              "cannot open ", path, ": it changed while it was opened"));
        }
        err = w.err;
        break;
      case WalkFailure::kNone:
        break;
    }
  }
  if (err == ENXIO) {  // a socket, or a FIFO opened for writing
    return absl::FailedPreconditionError(
        absl::StrCat(path, " is not a regular file"));
  }
  if (restricted &&
      (err == ENOENT || err == ENOTDIR || err == EACCES || err == EPERM)) {
    return Unreachable(path);
  }
  return ErrnoStatus(absl::StrCat("cannot open ", path), err);
}

absl::StatusOr<int> DataRoot::OpenBeneath(const std::string& path, int flags,
                                          bool directory,
                                          struct stat* st_out) const {
  absl::StatusOr<int> opened = OpenChecked(path, flags, ReadAccess::kRead);
  if (!opened.ok()) return opened.status();
  const int fd = *opened;
  struct stat st;
  if (fstat(fd, &st) != 0) {
    const int err = errno;
    close(fd);
    return ErrnoStatus(absl::StrCat("cannot stat ", path), err);
  }
  const bool ok = directory ? S_ISDIR(st.st_mode) : S_ISREG(st.st_mode);
  if (!ok) {
    close(fd);
    return absl::FailedPreconditionError(
        absl::StrCat(path, " is ", TypeName(st.st_mode), ", not ",
                     directory ? "a directory" : "a regular file"));
  }
  if (st_out != nullptr) *st_out = st;
  return fd;
}

absl::StatusOr<std::string> DataRoot::Resolve(const std::string& path) const {
  // Reached (every directory on the way searchable), then: a directory
  // searchable itself, a file readable.
  absl::StatusOr<int> fd = OpenChecked(path, O_PATH | O_CLOEXEC, 0);
  if (!fd.ok()) return fd.status();
  struct stat st;
  char real[PATH_MAX];
  const std::string link = absl::StrCat("/proc/self/fd/", *fd);
  const ssize_t n = readlink(link.c_str(), real, sizeof(real) - 1);
  const bool stated = fstat(*fd, &st) == 0;
  if (n <= 0 || !stated) {
    close(*fd);
    return absl::UnavailableError(absl::StrCat("cannot resolve ", path));
  }
  real[n] = '\0';
  if (S_ISDIR(st.st_mode)) {
    // "." of the directory is looked up in it: search permission.
    bool searchable;
    if (access_.by_kernel()) {
      FsCredsScope as(access_);
      const int self = as.ok() ? openat(*fd, ".", O_PATH | O_CLOEXEC) : -1;
      searchable = self >= 0;
      if (self >= 0) close(self);
    } else {
      // The ACL through the descriptor, not through a name.
      searchable = access_.Permits(link, st, ReadAccess::kSearch);
    }
    close(*fd);
    if (!searchable) return Unreachable(path);
  } else {
    close(*fd);
  }
  if (S_ISREG(st.st_mode)) {
    absl::StatusOr<int> again = OpenChecked(
        real, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY, ReadAccess::kRead);
    if (!again.ok()) {
      return absl::IsNotFound(again.status()) ? Unreachable(path)
                                              : again.status();
    }
    close(*again);
  }
  if (!PathIsWithin(real, path_)) {  // moved out of the root meanwhile
    if (access_.restricted()) return Unreachable(path);
    return absl::PermissionDeniedError(
        absl::StrCat(path, " resolves outside the data root ", path_));
  }
  return std::string(real);
}

absl::Status DataRoot::Stat(const std::string& path, struct stat* st) const {
  absl::StatusOr<int> fd = OpenChecked(path, O_PATH | O_CLOEXEC, 0);
  if (!fd.ok()) return fd.status();
  const bool stated = fstat(*fd, st) == 0;
  close(*fd);
  if (!stated) {
    return absl::UnavailableError(absl::StrCat("cannot stat ", path));
  }
  return absl::OkStatus();
}

absl::Status CheckFileSize(const std::string& path, const struct stat& st,
                           uint64_t max_file_bytes) {
  if (uint64_t(st.st_size) <= max_file_bytes) return absl::OkStatus();
  return absl::ResourceExhaustedError(
      absl::StrCat(path, " is ", uint64_t(st.st_size),
                   " bytes, over the limit of ", max_file_bytes,
                   " bytes of one data file (batchd --max-data-file-bytes)"));
}

absl::Status ReadFileCapped(const DataRoot& root, const std::string& path,
                            uint64_t max_bytes, std::string* bytes) {
  struct stat st;
  absl::StatusOr<int> fd = root.OpenFile(path, &st);
  if (!fd.ok()) return fd.status();
  if (uint64_t(st.st_size) > max_bytes) {
    close(*fd);
    return absl::ResourceExhaustedError(absl::StrCat(
        path, " is ", uint64_t(st.st_size), " bytes, over the limit of ",
        max_bytes, " bytes per file (max_file_bytes)"));
  }
  bytes->resize(size_t(st.st_size));
  // Shorter than its size: the file shrank; what is there is read.
  const ssize_t done = PreadFull(*fd, bytes->data(), bytes->size(), 0);
  const int err = errno;
  close(*fd);
  if (done < 0) return ErrnoStatus(absl::StrCat("cannot read ", path), err);
  bytes->resize(size_t(done));
  return absl::OkStatus();
}

}  // namespace batchd

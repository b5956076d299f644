// Confined, non-blocking, capped opens of data files; see data_file.h.
#include "workloads/common/data_file.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/paths.h"

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

// Opens `rel` (no symlink in it: a realpath result) beneath `root_fd` one
// component at a time, never following a link: the fallback of
// RESOLVE_NO_SYMLINKS on kernels without openat2.
int OpenNoFollowWalk(int root_fd, const std::string& rel, int flags) {
  std::vector<std::string> parts = absl::StrSplit(rel, '/', absl::SkipEmpty());
  if (parts.empty()) return openat(root_fd, ".", flags);
  int dir = dup(root_fd);
  if (dir < 0) return -1;
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    if (parts[i] == "..") {
      close(dir);
      errno = EXDEV;
      return -1;
    }
    const int next = openat(dir, parts[i].c_str(),
                            O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    const int err = errno;
    close(dir);
    if (next < 0) {
      errno = err;
      return -1;
    }
    dir = next;
  }
  const int fd = openat(dir, parts.back().c_str(), flags | O_NOFOLLOW);
  const int err = errno;
  close(dir);
  errno = err;
  return fd;
}

}  // namespace

void DataRoot::DisableOpenat2ForTesting(bool disable) {
  g_no_openat2.store(disable);
}

absl::StatusOr<std::shared_ptr<const DataRoot>> DataRoot::Open(
    const std::string& root, const ReadAccess& access,
    uint64_t max_file_bytes) {
  char resolved[PATH_MAX];
  if (realpath(root.c_str(), resolved) == nullptr) {
    return ErrnoStatus(absl::StrCat("data root ", root), errno);
  }
  const int fd = open(resolved, O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    return ErrnoStatus(absl::StrCat("cannot open data root ", resolved), errno);
  }
  std::string given = root;
  while (given.size() > 1 && given.back() == '/') given.pop_back();
  return std::shared_ptr<const DataRoot>(
      new DataRoot(fd, resolved, given, access, max_file_bytes));
}

DataRoot::~DataRoot() { close(fd_); }

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

absl::Status DataRoot::Unreachable(const std::string& path) const {
  return absl::NotFoundError(absl::StrCat("cannot open ", path,
                                          ": no such file, or not readable by ",
                                          access_.Describe()));
}

bool DataRoot::BitsPermit(int fd, const std::string& rel, int want) const {
  char real[PATH_MAX];
  const std::string link = absl::StrCat("/proc/self/fd/", fd);
  const ssize_t n = readlink(link.c_str(), real, sizeof(real) - 1);
  if (n <= 0) return false;
  real[n] = '\0';
  if (!PathIsWithin(real, path_)) return false;
  const std::string base = path_ == "/" ? "" : path_;
  auto searchable = [&](const std::string& dir) {
    struct stat st;
    return stat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode) &&
           access_.Permits(dir, st, ReadAccess::kSearch);
  };
  // The path opened: the root and every directory below it searchable,
  // `want` on what it names.
  const std::vector<std::string> parts =
      absl::StrSplit(std::string(real + path_.size()), '/', absl::SkipEmpty());
  std::string dir = path_;
  if (!parts.empty() && !searchable(dir)) return false;
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    dir = absl::StrCat(dir == "/" ? "" : dir, "/", parts[i]);
    if (!searchable(dir)) return false;
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || !access_.Permits(real, st, want)) return false;
  // The path as given, up to its first link (what the link names is the
  // path opened): a link is reached only through searchable directories.
  std::string given = base;
  const std::vector<std::string> walked =
      absl::StrSplit(rel, '/', absl::SkipEmpty());
  for (size_t i = 0; i + 1 < walked.size(); ++i) {
    if (walked[i] == "." || walked[i] == "..") break;
    given = absl::StrCat(given, "/", walked[i]);
    struct stat lst;
    if (lstat(given.c_str(), &lst) != 0 || !S_ISDIR(lst.st_mode)) break;
    if (!access_.Permits(given, lst, ReadAccess::kSearch)) return false;
  }
  return true;
}

absl::StatusOr<int> DataRoot::OpenChecked(const std::string& path, int flags,
                                          int want) const {
  // The path relative to the root; an absolute one must name it lexically
  // (callers build paths from the resolved root).
  std::string rel;
  if (!path.empty() && path[0] == '/') {
    const std::string* base = PathIsWithin(path, path_)    ? &path_
                              : PathIsWithin(path, given_) ? &given_
                                                           : nullptr;
    if (base == nullptr) {
      return absl::PermissionDeniedError(
          absl::StrCat(path, " is outside the data root ", path_));
    }
    rel = *base == "/" ? path.substr(1) : path.substr(base->size());
    while (!rel.empty() && rel[0] == '/') rel.erase(0, 1);
  } else {
    rel = path;
  }
  if (rel.empty()) rel = ".";
  const bool restricted = access_.restricted();
  // Only the opens themselves run with the reader's credentials (the
  // kernel's check); resolving a link is the daemon's.
  auto open_as_reader = [&](auto&& open) -> std::pair<int, int> {
    FsCredsScope as(access_);
    if (!as.ok()) return {-1, EPERM};
    const int fd = open();
    return {fd, fd < 0 ? errno : 0};
  };
  auto [fd, err] = open_as_reader([&] {
    return Openat2(fd_, rel.c_str(), flags,
                   RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS);
  });
  if (fd < 0 && (err == EXDEV || err == ELOOP || err == ENOSYS)) {
    // An absolute link (refused by RESOLVE_BENEATH even when it stays
    // inside), a link out of the root, or no openat2: resolve once and
    // check, then open the resolved path without following any link.
    const bool no_openat2 = err == ENOSYS;
    const std::string full =
        path_ == "/" ? "/" + rel : absl::StrCat(path_, "/", rel);
    char resolved[PATH_MAX];
    if (realpath(full.c_str(), resolved) == nullptr) {
      if (restricted) return Unreachable(path);
      return ErrnoStatus(absl::StrCat("cannot open ", full), errno);
    }
    if (!PathIsWithin(resolved, path_)) {
      // Where it leads is named only to whom may read every directory.
      return absl::PermissionDeniedError(
          restricted
              ? absl::StrCat(full, " resolves outside the data root ", path_)
              : absl::StrCat(full, " resolves to ", resolved,
                             ", outside the data root ", path_));
    }
    std::string rrel = path_ == "/" ? std::string(resolved + 1)
                                    : std::string(resolved + path_.size());
    while (!rrel.empty() && rrel[0] == '/') rrel.erase(0, 1);
    if (rrel.empty()) rrel = ".";
    std::tie(fd, err) = open_as_reader([&] {
      return no_openat2 ? OpenNoFollowWalk(fd_, rrel, flags)
                        : Openat2(fd_, rrel.c_str(), flags,
                                  RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS);
    });
    if (fd < 0 && (err == EXDEV || err == ELOOP)) {
      return absl::PermissionDeniedError(absl::StrCat(
          full, " changed while it was opened (a link swapped in)"));
    }
  }
  if (fd < 0) {
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
  if (restricted && !access_.by_kernel() && !BitsPermit(fd, rel, want)) {
    close(fd);
    return Unreachable(path);
  }
  return fd;
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
      searchable = access_.Permits(real, st, ReadAccess::kSearch);
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
  if (!PathIsWithin(real, path_)) {
    return absl::PermissionDeniedError(
        absl::StrCat(path, " resolves outside the data root ", path_));
  }
  return std::string(real);
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
  size_t done = 0;
  while (done < bytes->size()) {
    const ssize_t n =
        pread(*fd, &(*bytes)[done], bytes->size() - done, off_t(done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      close(*fd);
      return ErrnoStatus(absl::StrCat("cannot read ", path), err);
    }
    if (n == 0) break;  // the file shrank
    done += size_t(n);
  }
  bytes->resize(done);
  close(*fd);
  return absl::OkStatus();
}

}  // namespace batchd

// The persistent cache directory; see cache_dir.h.
#include "storage/cache_dir.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/crc32c.h"
#include "base/files.h"
#include "base/format.h"

namespace batchd {
namespace {

constexpr char kMagic[8] = {'B', 'A', 'T', 'C', 'H', 'D', 'C', '\x01'};
constexpr size_t kHeaderBytes = 32;
constexpr const char* kTempPrefix = ".tmp.";
constexpr time_t kStaleTempSeconds = 3600;

std::string Errno(int err) { return strerror(err); }

absl::Status CheckKind(absl::string_view kind) {
  bool ok = !kind.empty() && kind.size() <= 64;
  for (char c : kind) {
    ok = ok && ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
                c == '_');
  }
  if (!ok) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cache: kind '", kind, "' is not 1-64 characters of [a-z0-9_-]"));
  }
  return absl::OkStatus();
}

std::string Quoted(const std::string& s) {
  // Printable: a path under the data root may hold ESC, CR or LF.
  std::string out = "\"";
  for (char c : Printable(s)) {
    if (c == '"') out += '\\';
    out += c;
  }
  return out + "\"";
}

// Why `dir` (lstat'ed into st) may not hold a cache; empty when it may.
std::string Unsafe(const struct stat& st) {
  if (S_ISLNK(st.st_mode)) return "is a symbolic link";
  if (!S_ISDIR(st.st_mode)) return "is not a directory";
  if (st.st_uid != geteuid()) {
    return absl::StrCat("is owned by uid ", st.st_uid, ", not ", geteuid());
  }
  if ((st.st_mode & 022) != 0) {
    return absl::StrFormat("is writable by group or others (mode %04o)",
                           st.st_mode & 07777);
  }
  return "";
}

// mkdir -p of the parents of `dir` (0755), then `dir` itself (0700).
absl::Status MakeDirectory(const std::string& dir) {
  for (size_t slash = dir.find('/', 1); slash != std::string::npos;
       slash = dir.find('/', slash + 1)) {
    const std::string parent = dir.substr(0, slash);
    if (mkdir(parent.c_str(), 0755) != 0 && errno != EEXIST) {
      const int err = errno;
      return absl::FailedPreconditionError(absl::StrCat(
          "cache: cannot create ", parent, " (for ", dir, "): ", Errno(err)));
    }
  }
  if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    const int err = errno;
    return absl::FailedPreconditionError(
        absl::StrCat("cache: cannot create ", dir, ": ", Errno(err)));
  }
  return absl::OkStatus();
}

absl::Status WriteAll(int fd, const char* p, size_t n,
                      const std::string& what) {
  while (n > 0) {
    const ssize_t w = write(fd, p, std::min<size_t>(n, size_t(1) << 30));
    if (w < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      return absl::UnavailableError(
          absl::StrCat("cache: cannot write ", what, ": ", Errno(err)));
    }
    p += w;
    n -= size_t(w);
  }
  return absl::OkStatus();
}

std::string TempName(const std::string& name) {
  static std::atomic<uint64_t> counter{0};
  thread_local std::mt19937_64 rng(std::random_device{}());
  return absl::StrFormat("%s%s.%d.%d.%016x", kTempPrefix, name, getpid(),
                         counter.fetch_add(1), rng());
}

}  // namespace

uint64_t StableHash64(absl::string_view bytes) {
  constexpr uint64_t kPrime = 0x100000001b3ull;
  uint64_t h = 0xcbf29ce484222325ull;
  const char* p = bytes.data();
  size_t n = bytes.size();
  for (; n >= 8; p += 8, n -= 8) h = (h ^ LoadLE64(p)) * kPrime;
  for (; n > 0; ++p, --n) h = (h ^ uint8_t(*p)) * kPrime;
  h ^= uint64_t(bytes.size());
  // MurmurHash3's finaliser: every input bit reaches every output bit.
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ull;
  h ^= h >> 33;
  return h;
}

std::string FileIdentity(const std::string& rel_path, const struct stat& st) {
  std::string id;
  absl::StrAppend(&id, rel_path.size(), ":", rel_path, " size=", st.st_size,
                  " mtime_ns=", Nanos(st.st_mtim), " ctime_ns=",
                  Nanos(st.st_ctim), " ino=", st.st_ino, " dev=", st.st_dev,
                  ";");
  return id;
}

CacheDir::Lock& CacheDir::Lock::operator=(Lock&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) close(fd_);
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

CacheDir::Lock::~Lock() {
  if (fd_ >= 0) close(fd_);  // closing the descriptor drops the flock
}

absl::StatusOr<std::shared_ptr<const CacheDir>> CacheDir::Open(
    const std::string& dir) {
  if (dir.empty()) return std::shared_ptr<const CacheDir>(new CacheDir(-1, ""));
  if (dir[0] != '/') {
    return absl::InvalidArgumentError(absl::StrCat(
        "cache: the cache directory '", dir, "' is not an absolute path"));
  }
  struct stat st;
  if (lstat(dir.c_str(), &st) != 0) {
    if (errno != ENOENT) {
      const int err = errno;
      return absl::FailedPreconditionError(
          absl::StrCat("cache: cannot stat ", dir, ": ", Errno(err)));
    }
    absl::Status made = MakeDirectory(dir);
    if (!made.ok()) return made;
  } else if (S_ISLNK(st.st_mode)) {
    // O_NOFOLLOW | O_DIRECTORY below would say only "not a directory".
    return absl::FailedPreconditionError(
        absl::StrCat("cache: refusing ", dir, ": it is a symbolic link"));
  }
  const int fd =
      open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    if (err == ELOOP || err == ENOTDIR) {
      return absl::FailedPreconditionError(absl::StrCat(
          "cache: refusing ", dir, ": it ",
          err == ELOOP ? "is a symbolic link" : "is not a directory"));
    }
    return absl::FailedPreconditionError(
        absl::StrCat("cache: cannot open ", dir, ": ", Errno(err)));
  }
  // Checked on the descriptor: what was checked is what is used.
  if (fstat(fd, &st) != 0) {
    const int err = errno;
    close(fd);
    return absl::FailedPreconditionError(
        absl::StrCat("cache: cannot stat ", dir, ": ", Errno(err)));
  }
  const std::string why = Unsafe(st);
  if (!why.empty()) {
    close(fd);
    return absl::FailedPreconditionError(absl::StrCat(
        "cache: refusing ", dir, ": it ", why,
        " (the cache must be a directory of the daemon's user, mode 0700)"));
  }
  std::shared_ptr<const CacheDir> cache(new CacheDir(fd, dir));
  // Temporary files of writers that died mid-Put.
  const int list_fd = dup(fd);
  if (list_fd >= 0) {
    if (DIR* d = fdopendir(list_fd)) {
      const time_t now = time(nullptr);
      while (struct dirent* e = readdir(d)) {
        if (strncmp(e->d_name, kTempPrefix, strlen(kTempPrefix)) != 0) {
          continue;
        }
        struct stat ts;
        if (fstatat(fd, e->d_name, &ts, AT_SYMLINK_NOFOLLOW) == 0 &&
            now - ts.st_mtime > kStaleTempSeconds) {
          unlinkat(fd, e->d_name, 0);
        }
      }
      closedir(d);
    } else {
      close(list_fd);
    }
  }
  return cache;
}

CacheDir::~CacheDir() {
  if (fd_ >= 0) close(fd_);
}

std::string CacheDir::EntryName(absl::string_view kind, absl::string_view key) {
  return absl::StrFormat("%s-%016x.entry", kind, StableHash64(key));
}

void CacheDir::Discard(const std::string& name, const struct stat& st,
                       absl::string_view kind, const std::string& why) const {
  // Remove it only if it is still the file that was read: a writer may
  // have renamed a good entry over it since.
  struct stat now;
  if (fstatat(fd_, name.c_str(), &now, AT_SYMLINK_NOFOLLOW) == 0 &&
      now.st_ino == st.st_ino && now.st_dev == st.st_dev) {
    unlinkat(fd_, name.c_str(), 0);
  }
  fprintf(stderr,
          "batchd: level=warn event=cache_corrupt kind=%s path=%s "
          "reason=%s action=rebuild\n",
          std::string(kind).c_str(), Quoted(path_ + "/" + name).c_str(),
          Quoted(why).c_str());
}

absl::StatusOr<CacheDir::EntryFile> CacheDir::OpenEntryFile(
    const std::string& name, absl::string_view kind,
    absl::string_view what) const {
  absl::Status valid = CheckKind(kind);
  if (!valid.ok()) return valid;
  if (!enabled()) return absl::NotFoundError("cache: off");
  // O_NONBLOCK: a FIFO planted in its place must not hang the open.
  const int fd =
      openat(fd_, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT) {
      return absl::NotFoundError(absl::StrCat("cache: no ", what, " ", name));
    }
    struct stat st;
    if (fstatat(fd_, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 &&
        !S_ISREG(st.st_mode)) {
      Discard(name, st, kind, "not a regular file");
      return absl::NotFoundError(absl::StrCat("cache: discarded ", name));
    }
    return absl::UnavailableError(absl::StrCat("cache: cannot open ", path_,
                                               "/", name, ": ", Errno(err)));
  }
  EntryFile file;
  file.fd = fd;
  if (fstat(fd, &file.st) != 0) {
    const int err = errno;
    close(fd);
    return absl::UnavailableError(absl::StrCat("cache: cannot stat ", path_,
                                               "/", name, ": ", Errno(err)));
  }
  std::string why;
  if (!S_ISREG(file.st.st_mode)) {
    why = "not a regular file";
  } else if (file.st.st_uid != geteuid()) {
    why = absl::StrCat("owned by uid ", file.st.st_uid);
  }
  if (!why.empty()) return Reject(fd, name, file.st, kind, why);
  return file;
}

absl::Status CacheDir::Reject(int fd, const std::string& name,
                              const struct stat& st, absl::string_view kind,
                              const std::string& why) const {
  close(fd);
  Discard(name, st, kind, why);
  return absl::NotFoundError(
      absl::StrCat("cache: discarded ", name, ": ", why));
}

absl::StatusOr<std::string> CacheDir::Get(absl::string_view kind,
                                          absl::string_view key) const {
  const std::string name = EntryName(kind, key);
  absl::StatusOr<EntryFile> file = OpenEntryFile(name, kind, "entry");
  if (!file.ok()) return file.status();
  const int fd = file->fd;
  const struct stat st = file->st;
  auto discard = [&](const std::string& why) {
    return Reject(fd, name, st, kind, why);
  };
  const uint64_t size = uint64_t(st.st_size);
  const uint64_t least = kHeaderBytes + kind.size() + key.size() + 4;
  if (size < least) {
    return discard(absl::StrCat("truncated: ", size, " bytes"));
  }
  std::string bytes(size, '\0');
  const ssize_t got = PreadFull(fd, bytes.data(), size, 0);
  if (got < 0) {
    const int err = errno;
    close(fd);
    return absl::UnavailableError(absl::StrCat("cache: cannot read ", path_,
                                               "/", name, ": ", Errno(err)));
  }
  if (uint64_t(got) != size) return discard("shorter than its size");
  const char* p = bytes.data();
  if (memcmp(p, kMagic, sizeof(kMagic)) != 0) return discard("bad magic");
  if (LoadLE32(p + 8) != kEntryFormatVersion) {
    return discard(absl::StrCat("format version ", LoadLE32(p + 8), ", not ",
                                kEntryFormatVersion));
  }
  const uint64_t kind_len = LoadLE32(p + 12);
  const uint64_t key_len = LoadLE64(p + 16);
  const uint64_t value_len = LoadLE64(p + 24);
  if (kind_len != kind.size() || key_len != key.size() || value_len > size ||
      kHeaderBytes + kind_len + key_len + value_len + 4 != size) {
    return discard("lengths disagree with the file size (truncated?)");
  }
  const uint32_t stored_crc = LoadLE32(p + size - 4);
  if (Crc32c(p, size - 4) != stored_crc) return discard("checksum mismatch");
  if (absl::string_view(p + kHeaderBytes, kind_len) != kind ||
      absl::string_view(p + kHeaderBytes + kind_len, key_len) != key) {
    return discard("holds another key");
  }
  close(fd);
  // The value, in place: shift it to the front instead of copying it.
  const size_t value_at = kHeaderBytes + kind_len + key_len;
  bytes.erase(0, value_at);
  bytes.resize(value_len);
  return bytes;
}

absl::Status CacheDir::Put(absl::string_view kind, absl::string_view key,
                           absl::string_view value) const {
  absl::Status valid = CheckKind(kind);
  if (!valid.ok()) return valid;
  if (!enabled()) return absl::OkStatus();
  const std::string name = EntryName(kind, key);
  const std::string temp = TempName(name);
  const int fd =
      openat(fd_, temp.c_str(),
             O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) {
    const int err = errno;
    return absl::UnavailableError(absl::StrCat("cache: cannot create ", path_,
                                               "/", temp, ": ", Errno(err)));
  }
  char header[kHeaderBytes];
  memcpy(header, kMagic, sizeof(kMagic));
  StoreLE32(kEntryFormatVersion, header + 8);
  StoreLE32(uint32_t(kind.size()), header + 12);
  StoreLE64(key.size(), header + 16);
  StoreLE64(value.size(), header + 24);
  uint32_t crc = Crc32c(header, kHeaderBytes);
  crc = Crc32c(kind.data(), kind.size(), crc);
  crc = Crc32c(key.data(), key.size(), crc);
  crc = Crc32c(value.data(), value.size(), crc);
  char trailer[4];
  StoreLE32(crc, trailer);
  const std::string what = absl::StrCat(path_, "/", temp);
  absl::Status s = WriteAll(fd, header, kHeaderBytes, what);
  if (s.ok()) s = WriteAll(fd, kind.data(), kind.size(), what);
  if (s.ok()) s = WriteAll(fd, key.data(), key.size(), what);
  if (s.ok()) s = WriteAll(fd, value.data(), value.size(), what);
  if (s.ok()) s = WriteAll(fd, trailer, 4, what);
  if (s.ok() && fsync(fd) != 0) {
    const int err = errno;
    s = absl::UnavailableError(
        absl::StrCat("cache: cannot sync ", what, ": ", Errno(err)));
  }
  close(fd);
  if (s.ok() && renameat(fd_, temp.c_str(), fd_, name.c_str()) != 0) {
    const int err = errno;
    s = absl::UnavailableError(absl::StrCat("cache: cannot rename ", what,
                                            " to ", name, ": ", Errno(err)));
  }
  if (!s.ok()) {
    unlinkat(fd_, temp.c_str(), 0);
    return s;
  }
  fsync(fd_);  // the rename itself survives a crash
  return absl::OkStatus();
}

absl::StatusOr<CacheDir::Lock> CacheDir::LockEntry(
    absl::string_view kind, absl::string_view key) const {
  return LockEntryImpl(kind, key, /*wait=*/true);
}

absl::StatusOr<CacheDir::Lock> CacheDir::TryLockEntry(
    absl::string_view kind, absl::string_view key) const {
  return LockEntryImpl(kind, key, /*wait=*/false);
}

absl::StatusOr<CacheDir::Lock> CacheDir::LockEntryImpl(absl::string_view kind,
                                                       absl::string_view key,
                                                       bool wait) const {
  absl::Status valid = CheckKind(kind);
  if (!valid.ok()) return valid;
  if (!enabled()) return Lock();
  std::string name = EntryName(kind, key);
  name.replace(name.size() - strlen(".entry"), std::string::npos, ".lock");
  const int fd = openat(fd_, name.c_str(),
                        O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) {
    const int err = errno;
    return absl::UnavailableError(absl::StrCat(
        "cache: cannot open the lock ", path_, "/", name, ": ", Errno(err)));
  }
  while (flock(fd, wait ? LOCK_EX : LOCK_EX | LOCK_NB) != 0) {
    if (errno == EINTR) continue;
    const int err = errno;
    if (!wait && err == EWOULDBLOCK) {
      close(fd);
      return Lock();  // another builder holds it
    }
    close(fd);
    return absl::UnavailableError(absl::StrCat("cache: cannot lock ", path_,
                                               "/", name, ": ", Errno(err)));
  }
  return Lock(fd);
}

std::string CacheDir::BlobName(absl::string_view kind, absl::string_view key) {
  return absl::StrFormat("%s-%016x.blob", kind, StableHash64(key));
}

namespace {
constexpr char kBlobMagic[8] = {'B', 'A', 'T', 'C', 'H', 'D', 'B', '\x01'};
constexpr size_t kBlobTrailerBytes = 8 + 4 + 4 + 8 + 8 + 4;
constexpr size_t kBlobBuffer = size_t(1) << 20;
}  // namespace

absl::StatusOr<std::unique_ptr<CacheDir::BlobWriter>> CacheDir::BeginBlob(
    absl::string_view kind, absl::string_view key) const {
  absl::Status valid = CheckKind(kind);
  if (!valid.ok()) return valid;
  if (!enabled()) return std::unique_ptr<BlobWriter>();
  const std::string temp = TempName(BlobName(kind, key));
  const int fd =
      openat(fd_, temp.c_str(),
             O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) {
    const int err = errno;
    return absl::UnavailableError(absl::StrCat("cache: cannot create ", path_,
                                               "/", temp, ": ", Errno(err)));
  }
  return std::unique_ptr<BlobWriter>(new BlobWriter(
      this, std::string(kind), std::string(key), temp, fd));
}

CacheDir::BlobWriter::~BlobWriter() {
  if (fd_ >= 0) {
    close(fd_);
    unlinkat(dir_->fd_, temp_.c_str(), 0);
  }
}

absl::Status CacheDir::BlobWriter::Flush() {
  if (error_.ok() && !buffer_.empty()) {
    error_ = WriteAll(fd_, buffer_.data(), buffer_.size(),
                      absl::StrCat(dir_->path_, "/", temp_));
  }
  buffer_.clear();
  return error_;
}

absl::Status CacheDir::BlobWriter::Append(const void* data, size_t n) {
  if (fd_ < 0) return absl::FailedPreconditionError("cache: blob committed");
  crc_ = Crc32c(data, n, crc_);
  value_bytes_ += n;
  buffer_.append(static_cast<const char*>(data), n);
  if (buffer_.size() >= kBlobBuffer) return Flush();
  return error_;
}

absl::Status CacheDir::BlobWriter::Commit() {
  if (fd_ < 0) return absl::FailedPreconditionError("cache: blob committed");
  buffer_ += kind_;
  buffer_ += key_;
  char trailer[kBlobTrailerBytes];
  memcpy(trailer, kBlobMagic, 8);
  StoreLE32(kEntryFormatVersion, trailer + 8);
  StoreLE32(uint32_t(kind_.size()), trailer + 12);
  StoreLE64(key_.size(), trailer + 16);
  StoreLE64(value_bytes_, trailer + 24);
  crc_ = Crc32c(kind_.data(), kind_.size(), crc_);
  crc_ = Crc32c(key_.data(), key_.size(), crc_);
  crc_ = Crc32c(trailer, kBlobTrailerBytes - 4, crc_);
  StoreLE32(crc_, trailer + kBlobTrailerBytes - 4);
  buffer_.append(trailer, kBlobTrailerBytes);
  absl::Status s = Flush();
  const std::string what = absl::StrCat(dir_->path_, "/", temp_);
  if (s.ok() && fsync(fd_) != 0) {
    const int err = errno;
    s = absl::UnavailableError(
        absl::StrCat("cache: cannot sync ", what, ": ", Errno(err)));
  }
  close(fd_);
  fd_ = -1;
  const std::string name = BlobName(kind_, key_);
  if (s.ok() &&
      renameat(dir_->fd_, temp_.c_str(), dir_->fd_, name.c_str()) != 0) {
    const int err = errno;
    s = absl::UnavailableError(absl::StrCat("cache: cannot rename ", what,
                                            " to ", name, ": ", Errno(err)));
  }
  if (!s.ok()) {
    unlinkat(dir_->fd_, temp_.c_str(), 0);
    return s;
  }
  fsync(dir_->fd_);
  return absl::OkStatus();
}

CacheDir::Blob::~Blob() { close(fd_); }

absl::Status CacheDir::Blob::Read(uint64_t offset, size_t n, void* out) const {
  if (offset > size_ || n > size_ - offset) {
    return absl::OutOfRangeError(absl::StrCat(
        "cache: bytes [", offset, ", ", offset + n, ") of ", what_,
        ", whose value holds ", size_));
  }
  const ssize_t got = PreadFull(fd_, out, n, offset);
  if (got < 0 || size_t(got) != n) {
    const int err = got < 0 ? errno : EIO;
    return absl::UnavailableError(
        absl::StrCat("cache: cannot read ", what_, ": ", Errno(err)));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<const CacheDir::Blob>> CacheDir::OpenBlob(
    absl::string_view kind, absl::string_view key,
    const ValueCheck& check) const {
  const std::string name = BlobName(kind, key);
  absl::StatusOr<EntryFile> file = OpenEntryFile(name, kind, "blob");
  if (!file.ok()) return file.status();
  const int fd = file->fd;
  const struct stat st = file->st;
  auto discard = [&](const std::string& why) {
    return Reject(fd, name, st, kind, why);
  };
  const uint64_t size = uint64_t(st.st_size);
  if (size < kBlobTrailerBytes + kind.size() + key.size()) {
    return discard(absl::StrCat("truncated: ", size, " bytes"));
  }
  // One pass over the whole file: the checksum (and the caller's check of
  // the value), then the description.
  posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  std::string chunk(kBlobBuffer, '\0');
  uint32_t crc = 0;
  const uint64_t covered = size - 4;
  const uint64_t value_end = size - kBlobTrailerBytes - kind.size() - key.size();
  for (uint64_t at = 0; at < covered;) {
    // A whole chunk at a time (short reads are read on), so that the pieces
    // given to `check` start at multiples of the chunk.
    const size_t n = size_t(std::min<uint64_t>(chunk.size(), covered - at));
    const ssize_t got = PreadFull(fd, chunk.data(), n, at);
    if (got < 0) {
      const int err = errno;
      close(fd);
      return absl::UnavailableError(absl::StrCat(
          "cache: cannot read ", path_, "/", name, ": ", Errno(err)));
    }
    if (size_t(got) != n) return discard("shorter than its size");
    crc = Crc32c(chunk.data(), n, crc);
    if (check && at < value_end) {
      const std::string wrong = check(
          absl::string_view(chunk.data(),
                            size_t(std::min<uint64_t>(n, value_end - at))),
          at);
      if (!wrong.empty()) return discard(wrong);
    }
    at += n;
  }
  const uint64_t tail_bytes = kBlobTrailerBytes + kind.size() + key.size();
  std::string tail(tail_bytes, '\0');
  if (PreadFull(fd, tail.data(), tail_bytes, size - tail_bytes) !=
      ssize_t(tail_bytes)) {
    return discard("shorter than its size");
  }
  const char* t = tail.data() + kind.size() + key.size();
  if (memcmp(t, kBlobMagic, 8) != 0) return discard("bad magic");
  if (LoadLE32(t + 8) != kEntryFormatVersion) {
    return discard(absl::StrCat("format version ", LoadLE32(t + 8), ", not ",
                                kEntryFormatVersion));
  }
  const uint64_t value_len = LoadLE64(t + 24);
  if (LoadLE32(t + 12) != kind.size() || LoadLE64(t + 16) != key.size() ||
      value_len != size - tail_bytes) {
    return discard("lengths disagree with the file size (truncated?)");
  }
  if (crc != LoadLE32(t + kBlobTrailerBytes - 4)) {
    return discard("checksum mismatch");
  }
  if (absl::string_view(tail.data(), kind.size()) != kind ||
      absl::string_view(tail.data() + kind.size(), key.size()) != key) {
    return discard("holds another key");
  }
  posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM);
  return std::shared_ptr<const Blob>(
      new Blob(fd, value_len, absl::StrCat(path_, "/", name)));
}

int64_t Nanos(const struct timespec& t) {
  return int64_t(t.tv_sec) * 1000000000 + t.tv_nsec;
}

}  // namespace batchd

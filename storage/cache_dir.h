// The persistent cache of work done on data sets (indexes, token lengths):
// one directory (the daemon's --cache-dir) of entries, each the value of a
// (kind, key) pair, where kind is a short name ("wmt-lengths", "imagefolder",
// "tfrecord-offsets") and key any bytes that describe every input of the
// value (file identities, model hashes, options). An entry is trusted only
// when its checksum and its whole key match; anything else is removed,
// logged (event cache_corrupt) and reported as a miss, so the caller
// rebuilds it.
//
// Entry file <dir>/<kind>-<hex 64-bit hash of key>.entry:
//   char[8]  magic "BATCHDC\x01"
//   uint32   format version (kEntryFormatVersion)
//   uint32   kind length
//   uint64   key length
//   uint64   value length
//   byte     kind[], key[], value[]
//   uint32   CRC32C of every byte before it
// (integers little endian). Puts write a unique temporary file, fsync it
// and rename it over the entry, so readers see an old whole entry or a new
// whole entry, and two processes writing one entry leave one of them.
// Builds are serialised across processes by LockEntry (flock(2) on
// <kind>-<hash>.lock, which stays in place).
//
// Blobs are entries too large to hold in memory (WMT's token ids): written
// as a stream (BeginBlob) and read in pieces (OpenBlob), with the same
// guarantees. Blob file <dir>/<kind>-<hash>.blob:
//   byte     value[], kind[], key[]
//   char[8]  magic "BATCHDB\x01"
//   uint32   format version, uint32 kind length
//   uint64   key length, uint64 value length
//   uint32   CRC32C of every byte before it
// (the description follows the value, whose length is known only at the
// end). OpenBlob checks all of it, reading the file once.
//
// The directory may be shared by daemons of one user; it is refused when
// another user could write into it: it must be a real directory (not a
// symbolic link), owned by the effective uid and not writable by group or
// others. Files are opened relative to a descriptor of the directory, never
// following links.
//
// Thread safety: a CacheDir is immutable after Open; any number of threads
// (and processes) may call Get, Put and LockEntry at once.
#ifndef BATCHD_STORAGE_CACHE_DIR_H_
#define BATCHD_STORAGE_CACHE_DIR_H_

#include <sys/stat.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "base/coding.h"

namespace batchd {

constexpr uint32_t kEntryFormatVersion = 1;

class CacheDir {
 public:
  // An exclusive build lock of one entry, held until destroyed. Move-only.
  class Lock {
   public:
    Lock() = default;
    explicit Lock(int fd) : fd_(fd) {}
    Lock(Lock&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
    Lock& operator=(Lock&& other) noexcept;
    Lock(const Lock&) = delete;
    Lock& operator=(const Lock&) = delete;
    ~Lock();
    // False for the lock of a disabled cache (which locks nothing).
    bool held() const { return fd_ >= 0; }

   private:
    int fd_ = -1;
  };

  // "" : caching off (Get always misses, Put and LockEntry do nothing).
  // Otherwise creates `dir` (mode 0700; missing parents 0755) if absent and
  // opens it; FailedPrecondition when it is a symbolic link, not a
  // directory, owned by another uid or writable by group or others (the
  // message names the path and what is wrong). Temporary files of Puts
  // that died more than an hour ago are removed.
  static absl::StatusOr<std::shared_ptr<const CacheDir>> Open(
      const std::string& dir);
  ~CacheDir();
  CacheDir(const CacheDir&) = delete;
  CacheDir& operator=(const CacheDir&) = delete;

  bool enabled() const { return fd_ >= 0; }
  // The directory as given to Open ("" when disabled).
  const std::string& path() const { return path_; }

  // The value of (kind, key). NotFound when absent, when the cache is off,
  // and when the entry is damaged (truncated, checksum mismatch, another
  // key or kind, not a regular file of ours): such an entry is removed and
  // a warning logged. Other codes: I/O errors. `kind` must be 1-64 of
  // [a-z0-9_-] (InvalidArgument otherwise, for every method).
  absl::StatusOr<std::string> Get(absl::string_view kind,
                                  absl::string_view key) const;
  // Stores the value of (kind, key), replacing any entry atomically. A
  // disabled cache returns Ok. Errors (a full disk) leave no partial entry.
  absl::Status Put(absl::string_view kind, absl::string_view key,
                   absl::string_view value) const;
  // Blocks until this process holds the build lock of (kind, key) across
  // processes and threads (each call opens its own lock descriptor, so two
  // threads of one process exclude each other too). The usual pattern:
  //   Get; on a miss LockEntry, Get again (another builder may have
  //   finished), build, Put, release.
  absl::StatusOr<Lock> LockEntry(absl::string_view kind,
                                 absl::string_view key) const;
  // LockEntry without waiting: a Lock that is not held() when another
  // builder holds it (or when the cache is off), so that a builder can
  // wait for it in steps and still give up when asked to stop.
  absl::StatusOr<Lock> TryLockEntry(absl::string_view kind,
                                    absl::string_view key) const;

  // The entry's file name within path() (tests corrupt it on purpose).
  static std::string EntryName(absl::string_view kind, absl::string_view key);
  static std::string BlobName(absl::string_view kind, absl::string_view key);

  // A blob being written: Append the value in pieces, then Commit, which
  // makes it the entry of (kind, key) atomically. Destroyed uncommitted, it
  // leaves nothing. Not thread-safe.
  class BlobWriter {
   public:
    ~BlobWriter();
    absl::Status Append(const void* data, size_t n);
    absl::Status Commit();
    uint64_t size() const { return value_bytes_; }

   private:
    friend class CacheDir;
    BlobWriter(const CacheDir* dir, std::string kind, std::string key,
               std::string temp, int fd)
        : dir_(dir), kind_(std::move(kind)), key_(std::move(key)),
          temp_(std::move(temp)), fd_(fd) {}
    absl::Status Flush();
    const CacheDir* dir_;
    const std::string kind_, key_, temp_;
    int fd_;
    std::string buffer_;
    uint32_t crc_ = 0;
    uint64_t value_bytes_ = 0;
    absl::Status error_;
  };
  // A blob's value, checked whole at open, read in pieces. Thread-safe.
  class Blob {
   public:
    ~Blob();
    uint64_t size() const { return size_; }
    // Bytes [offset, offset + n) of the value (within size()).
    absl::Status Read(uint64_t offset, size_t n, void* out) const;

   private:
    friend class CacheDir;
    Blob(int fd, uint64_t size, std::string what)
        : fd_(fd), size_(size), what_(std::move(what)) {}
    const int fd_;
    const uint64_t size_;
    const std::string what_;
  };
  // Null (and Ok) when the cache is off.
  absl::StatusOr<std::unique_ptr<BlobWriter>> BeginBlob(
      absl::string_view kind, absl::string_view key) const;
  // What a caller checks of a blob's value as OpenBlob reads it for its
  // checksum (no second read): called with consecutive pieces of the value
  // and the offset of each (pieces start at multiples of 1 MiB), it returns
  // "" when the piece is right, else why not.
  using ValueCheck =
      std::function<std::string(absl::string_view piece, uint64_t offset)>;
  // As Get: NotFound when absent, off or damaged (removed, warned), and
  // when `check` (may be null) finds a piece wrong, which counts as damage.
  absl::StatusOr<std::shared_ptr<const Blob>> OpenBlob(
      absl::string_view kind, absl::string_view key,
      const ValueCheck& check = nullptr) const;

 private:
  CacheDir(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  absl::StatusOr<Lock> LockEntryImpl(absl::string_view kind,
                                     absl::string_view key, bool wait) const;
  // An entry's or blob's file, open for reading, checked to be a regular
  // file of this user (discarded, with a warning, if not).
  struct EntryFile {
    int fd = -1;
    struct stat st;
  };
  // NotFound when absent, discarded or the cache is off; `what` names it
  // in the message.
  absl::StatusOr<EntryFile> OpenEntryFile(const std::string& name,
                                          absl::string_view kind,
                                          absl::string_view what) const;
  // Closes fd, discards the file (Discard) and says NotFound, why.
  absl::Status Reject(int fd, const std::string& name, const struct stat& st,
                      absl::string_view kind, const std::string& why) const;
  void Discard(const std::string& name, const struct stat& st,
               absl::string_view kind, const std::string& why) const;

  const int fd_;  // the directory (O_RDONLY | O_DIRECTORY); -1 when off
  const std::string path_;
};

// Cache values are encoded with base/coding.h: LEB128 varints and
// length-prefixed strings (AppendVarint, AppendString; ReadVarint and
// ReadString return false on a value cut short, a damaged entry, which the
// caller rebuilds).
// A timestamp of struct stat in nanoseconds, for identities.
int64_t Nanos(const struct timespec& t);

// A stable 64-bit hash of bytes (FNV-1a over 64-bit lanes; not
// cryptographic): the same in every process and release, for keys and
// entry names.
uint64_t StableHash64(absl::string_view bytes);

// The identity of an input file, for cache keys: its path relative to the
// data root, size, mtime and ctime (ns), inode and device. A file replaced
// or rewritten in place changes it, even one whose mtime was set back
// afterwards (setting a time changes the ctime, which nobody can set).
std::string FileIdentity(const std::string& rel_path, const struct stat& st);

}  // namespace batchd

#endif  // BATCHD_STORAGE_CACHE_DIR_H_

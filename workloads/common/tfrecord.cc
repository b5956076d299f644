// TFRecord framing: the scan, reads and the writer; see tfrecord.h.
#include "workloads/common/tfrecord.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/coding.h"
#include "base/crc32c.h"
#include "base/files.h"
#include "base/work_context.h"
#include "storage/cache_dir.h"
#include "workloads/common/tfrecord_index.h"

namespace batchd {

namespace {

absl::Status ErrnoStatus(const std::string& what, const std::string& path,
                         int err) {
  std::string msg = absl::StrCat(what, " ", path, ": ", strerror(err));
  if (err == ENOENT) return absl::NotFoundError(msg);
  if (err == EACCES || err == EPERM) return absl::PermissionDeniedError(msg);
  return absl::UnavailableError(msg);
}

}  // namespace

TFRecordFile::TFRecordFile(std::string path, int fd,
                           std::vector<uint64_t> offsets,
                           std::vector<uint64_t> lengths,
                           uint64_t max_record_bytes)
    : path_(std::move(path)),
      fd_(fd),
      max_record_bytes_(max_record_bytes),
      offsets_(std::move(offsets)),
      lengths_(std::move(lengths)) {}

TFRecordFile::~TFRecordFile() { close(fd_); }

namespace {

// One scan of the file's record headers: offsets of each record's data and
// its length. Errors name the file and the offset.
absl::Status ScanRecords(int fd, const std::string& path, uint64_t file_size,
                         std::vector<uint64_t>* offsets_out,
                         std::vector<uint64_t>* lengths_out) {
  std::vector<uint64_t>& offsets = *offsets_out;
  std::vector<uint64_t>& lengths = *lengths_out;
  uint64_t pos = 0;
  // Headers are read through a buffer: one pread per record would make
  // opening 1024 ImageNet shards a million system calls.
  std::vector<uint8_t> buf(1 << 16);
  uint64_t buf_start = 0, buf_len = 0;
  while (pos < file_size) {
    if (file_size - pos < kTFRecordHeaderBytes) {
      return absl::DataLossError(absl::StrCat(
          path, ": truncated record at offset ", pos, " (", file_size - pos,
          " bytes left, the header needs ", kTFRecordHeaderBytes, ")"));
    }
    if (pos < buf_start || pos + kTFRecordHeaderBytes > buf_start + buf_len) {
      // Every 64 KiB at most: a request that no longer wants the index
      // stops the scan.
      if (absl::Status s = CheckCancelled(absl::StrCat("indexing ", path));
          !s.ok()) {
        return s;
      }
      const ssize_t r = PreadFull(fd, buf.data(), buf.size(), pos);
      if (r < 0) {
        return ErrnoStatus(absl::StrCat("cannot read at offset ", pos), path,
                           errno);
      }
      buf_start = pos;
      buf_len = uint64_t(r);
      if (buf_len < kTFRecordHeaderBytes) {
        return absl::DataLossError(absl::StrCat(
            path, ": truncated record at offset ", pos, " (file shrank)"));
      }
    }
    const uint8_t* h = buf.data() + (pos - buf_start);
    const uint64_t length = LoadLE64(h);
    const uint32_t stored_crc = LoadLE32(h + 8);
    if (MaskedCrc32c(h, 8) != stored_crc) {
      return absl::DataLossError(
          absl::StrCat(path, ": bad length CRC in record ", offsets.size(),
                       " at offset ", pos));
    }
    const uint64_t left = file_size - pos - kTFRecordHeaderBytes;
    if (length > left || left - length < kTFRecordFooterBytes) {
      return absl::DataLossError(absl::StrCat(
          path, ": truncated record ", offsets.size(), " at offset ", pos,
          " (length ", length, ", ", left, " bytes left in the file)"));
    }
    offsets.push_back(pos + kTFRecordHeaderBytes);
    lengths.push_back(length);
    pos += kTFRecordHeaderBytes + length + kTFRecordFooterBytes;
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<TFRecordFile>> TFRecordFile::Open(
    const std::string& path, const TFRecordOptions& options) {
  int fd;
  struct stat st;
  if (options.root != nullptr) {
    absl::StatusOr<int> opened = options.root->OpenFile(path, &st);
    if (!opened.ok()) return opened.status();
    fd = *opened;
  } else {
    // Non-blocking: a FIFO named like a shard must not hang the opener.
    fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0) return ErrnoStatus("cannot open TFRecord file", path, errno);
    if (fstat(fd, &st) != 0) {
      const int err = errno;
      close(fd);
      return ErrnoStatus("cannot stat TFRecord file", path, err);
    }
    if (!S_ISREG(st.st_mode)) {
      close(fd);
      return absl::FailedPreconditionError(
          absl::StrCat("TFRecord file ", path, " is not a regular file"));
    }
  }
  const uint64_t file_size = uint64_t(st.st_size);
  auto scan = [&](std::vector<uint64_t>* offsets,
                  std::vector<uint64_t>* lengths) {
    return ScanRecords(fd, path, file_size, offsets, lengths);
  };
  const CacheDir* cache = options.cache != nullptr && options.cache->enabled()
                              ? options.cache.get()
                              : nullptr;
  RecordIndex index;
  absl::Status indexed;
  if (cache == nullptr) {
    indexed = scan(&index.offsets, &index.lengths);
  } else {
    absl::StatusOr<RecordIndex> cached = CachedRecordIndex(
        *cache, options.root.get(), path, st, options.cache_settle_ns, scan);
    if (cached.ok()) index = *std::move(cached);
    indexed = cached.status();
  }
  if (!indexed.ok()) {
    close(fd);
    return indexed;
  }
  auto file = std::unique_ptr<TFRecordFile>(
      new TFRecordFile(path, fd, std::move(index.offsets),
                       std::move(index.lengths), options.max_record_bytes));
  file->from_cache_ = index.from_cache;
  file->stored_ = index.stored;
  return file;
}

absl::StatusOr<std::string> TFRecordFile::Read(size_t i) const {
  if (i >= offsets_.size()) {
    return absl::OutOfRangeError(absl::StrCat(
        path_, ": record ", i, " out of range (", offsets_.size(), ")"));
  }
  const uint64_t length = lengths_[i];
  const uint64_t record_offset = offsets_[i] - kTFRecordHeaderBytes;
  if (length > max_record_bytes_) {
    return absl::DataLossError(absl::StrCat(
        path_, ": record ", i, " at offset ", record_offset, " holds ", length,
        " bytes, over the limit of ", max_record_bytes_, " bytes per record"));
  }
  std::string data(length + kTFRecordFooterBytes, '\0');
  const ssize_t r = PreadFull(fd_, data.data(), data.size(), offsets_[i]);
  if (r < 0) {
    return ErrnoStatus(absl::StrCat("cannot read record ", i, " at offset ",
                                    record_offset, " of"),
                       path_, errno);
  }
  if (uint64_t(r) != data.size()) {
    return absl::DataLossError(absl::StrCat(path_, ": truncated record ", i,
                                            " at offset ", record_offset,
                                            " (the file shrank after Open)"));
  }
  const uint32_t stored_crc =
      LoadLE32(reinterpret_cast<const uint8_t*>(data.data()) + length);
  if (MaskedCrc32c(data.data(), length) != stored_crc) {
    return absl::DataLossError(absl::StrCat(path_, ": bad data CRC in record ",
                                            i, " at offset ", record_offset));
  }
  data.resize(length);
  return data;
}

absl::Status WriteTFRecordFile(const std::string& path,
                               const std::vector<std::string>& records) {
  std::string out;
  size_t total = 0;
  for (const std::string& r : records) {
    total += kTFRecordHeaderBytes + r.size() + kTFRecordFooterBytes;
  }
  out.reserve(total);
  for (const std::string& r : records) {
    uint8_t header[kTFRecordHeaderBytes];
    StoreLE64(r.size(), header);
    StoreLE32(MaskedCrc32c(header, 8), header + 8);
    out.append(reinterpret_cast<const char*>(header), kTFRecordHeaderBytes);
    out.append(r);
    uint8_t footer[kTFRecordFooterBytes];
    StoreLE32(MaskedCrc32c(r.data(), r.size()), footer);
    out.append(reinterpret_cast<const char*>(footer), kTFRecordFooterBytes);
  }
  const int fd =
      open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoStatus("cannot create", path, errno);
  size_t done = 0;
  while (done < out.size()) {
    const ssize_t w = write(fd, out.data() + done, out.size() - done);
    if (w < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      close(fd);
      return ErrnoStatus("cannot write", path, err);
    }
    done += size_t(w);
  }
  if (close(fd) != 0) return ErrnoStatus("cannot close", path, errno);
  return absl::OkStatus();
}

}  // namespace batchd

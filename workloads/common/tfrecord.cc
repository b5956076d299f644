// TFRecord framing and tf.train.Example parsing; see tfrecord.h.
#include "workloads/common/tfrecord.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "base/clock.h"
#include "base/coding.h"
#include "base/log.h"
#include "base/wire_reader.h"
#include "workloads/common/cache_dir.h"

namespace batchd {

// ---------------------------------------------------------------------------
// CRC32C (Castagnoli, reflected polynomial 0x82F63B78), slicing by 8.

namespace {

using CrcTables = std::array<std::array<uint32_t, 256>, 8>;

CrcTables MakeCrcTables() {
  CrcTables t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1)));
    t[0][i] = c;
  }
  for (uint32_t i = 0; i < 256; ++i) {
    for (int s = 1; s < 8; ++s) {
      t[s][i] = (t[s - 1][i] >> 8) ^ t[0][t[s - 1][i] & 0xff];
    }
  }
  return t;
}

const CrcTables& Tables() {
  static const CrcTables tables = MakeCrcTables();
  return tables;
}

constexpr uint32_t kMaskDelta = 0xa282ead8u;
constexpr size_t kHeaderBytes = 12;  // length + masked CRC of the length
constexpr size_t kFooterBytes = 4;   // masked CRC of the data

}  // namespace

uint32_t Crc32c(const void* data, size_t n, uint32_t crc) {
  const CrcTables& t = Tables();
  const uint8_t* p = static_cast<const uint8_t*>(data);
  uint32_t c = ~crc;
  while (n >= 8) {
    const uint32_t lo = LoadLE32(p) ^ c;
    const uint32_t hi = LoadLE32(p + 4);
    c = t[7][lo & 0xff] ^ t[6][(lo >> 8) & 0xff] ^ t[5][(lo >> 16) & 0xff] ^
        t[4][lo >> 24] ^ t[3][hi & 0xff] ^ t[2][(hi >> 8) & 0xff] ^
        t[1][(hi >> 16) & 0xff] ^ t[0][hi >> 24];
    p += 8;
    n -= 8;
  }
  while (n-- > 0) c = (c >> 8) ^ t[0][(c ^ *p++) & 0xff];
  return ~c;
}

uint32_t MaskedCrc32c(const void* data, size_t n) {
  const uint32_t crc = Crc32c(data, n);
  return ((crc >> 15) | (crc << 17)) + kMaskDelta;
}

// ---------------------------------------------------------------------------
// TFRecordFile

namespace {

// Reads exactly n bytes at offset, retrying short reads; returns the bytes
// read (less than n only at end of file) or -1 with errno set.
ssize_t PreadFull(int fd, void* buf, size_t n, uint64_t offset) {
  size_t done = 0;
  while (done < n) {
    const ssize_t r = pread(fd, static_cast<uint8_t*>(buf) + done, n - done,
                            off_t(offset + done));
    if (r < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    if (r == 0) break;
    done += size_t(r);
  }
  return ssize_t(done);
}

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
    if (file_size - pos < kHeaderBytes) {
      return absl::DataLossError(absl::StrCat(
          path, ": truncated record at offset ", pos, " (", file_size - pos,
          " bytes left, the header needs ", kHeaderBytes, ")"));
    }
    if (pos < buf_start || pos + kHeaderBytes > buf_start + buf_len) {
      const ssize_t r = PreadFull(fd, buf.data(), buf.size(), pos);
      if (r < 0) {
        return ErrnoStatus(absl::StrCat("cannot read at offset ", pos), path,
                           errno);
      }
      buf_start = pos;
      buf_len = uint64_t(r);
      if (buf_len < kHeaderBytes) {
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
    const uint64_t left = file_size - pos - kHeaderBytes;
    if (length > left || left - length < kFooterBytes) {
      return absl::DataLossError(absl::StrCat(
          path, ": truncated record ", offsets.size(), " at offset ", pos,
          " (length ", length, ", ", left, " bytes left in the file)"));
    }
    offsets.push_back(pos + kHeaderBytes);
    lengths.push_back(length);
    pos += kHeaderBytes + length + kFooterBytes;
  }
  return absl::OkStatus();
}

// The offset index's cache entry: kind, format, value layout.
constexpr const char* kOffsetsKind = "tfrecord-offsets";
constexpr const char* kOffsetsFormat = "tfrecord-offsets v1";

// What the index depends on (see tfrecord.h): no device number.
std::string ShardIdentity(const struct stat& st) {
  return absl::StrCat("ino=", st.st_ino, " size=", st.st_size,
                      " mtime_ns=", Nanos(st.st_mtim),
                      " ctime_ns=", Nanos(st.st_ctim));
}

// Value: varint identity length, identity, varint record count, each
// record's length as a varint (offsets follow from the framing).
std::string EncodeOffsets(const std::string& identity,
                          const std::vector<uint64_t>& lengths) {
  std::string v;
  v.reserve(identity.size() + 16 + lengths.size() * 3);
  AppendVarint(identity.size(), &v);
  v.append(identity);
  AppendVarint(lengths.size(), &v);
  for (uint64_t l : lengths) AppendVarint(l, &v);
  return v;
}

enum class Decoded { kOk, kStale, kDamaged };

Decoded DecodeOffsets(absl::string_view v, const std::string& identity,
                      uint64_t file_size, std::vector<uint64_t>* offsets,
                      std::vector<uint64_t>* lengths) {
  uint64_t n;
  if (!ReadVarint(&v, &n) || n > v.size()) return Decoded::kDamaged;
  if (v.substr(0, n) != identity) return Decoded::kStale;
  v.remove_prefix(n);
  uint64_t count;
  // Every record takes at least 16 bytes of the file.
  if (!ReadVarint(&v, &count) || count > file_size / 16 + 1) {
    return Decoded::kDamaged;
  }
  offsets->reserve(count);
  lengths->reserve(count);
  uint64_t pos = 0;
  for (uint64_t i = 0; i < count; ++i) {
    uint64_t length;
    if (!ReadVarint(&v, &length) || length > file_size ||
        file_size - pos < kHeaderBytes + kFooterBytes + length) {
      return Decoded::kDamaged;
    }
    offsets->push_back(pos + kHeaderBytes);
    lengths->push_back(length);
    pos += kHeaderBytes + length + kFooterBytes;
  }
  if (!v.empty() || pos != file_size) return Decoded::kDamaged;
  return Decoded::kOk;
}

// `path` relative to the data root, when it lies beneath it.
std::string RootRelative(const DataRoot* root, const std::string& path) {
  if (root == nullptr) return path;
  const std::string prefix = absl::StrCat(root->path(), "/");
  if (absl::StartsWith(path, prefix)) return path.substr(prefix.size());
  return path;
}

bool Settled(const struct stat& st, int64_t settle_ns) {
  const int64_t now = RealtimeNanos();
  return now - Nanos(st.st_ctim) >= settle_ns &&
         now - Nanos(st.st_mtim) >= settle_ns;
}

void Warn(const std::string& msg) {
  Log(LogLevel::kWarn, "index_cache", {{"msg", msg}});
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
  std::vector<uint64_t> offsets, lengths;
  auto fail = [&](absl::Status s) {
    close(fd);
    return s;
  };
  const CacheDir* cache = options.cache != nullptr && options.cache->enabled()
                              ? options.cache.get()
                              : nullptr;
  if (cache == nullptr) {
    absl::Status s = ScanRecords(fd, path, file_size, &offsets, &lengths);
    if (!s.ok()) return fail(s);
    return std::unique_ptr<TFRecordFile>(
        new TFRecordFile(path, fd, std::move(offsets), std::move(lengths),
                         options.max_record_bytes));
  }
  const std::string key = absl::StrCat(kOffsetsFormat, "\n",
                                       RootRelative(options.root.get(), path));
  const std::string identity = ShardIdentity(st);
  // Takes the index from the cache; false on a miss (a stale or damaged
  // value is reported and replaced by the caller's Put).
  auto load = [&]() {
    absl::StatusOr<std::string> v = cache->Get(kOffsetsKind, key);
    if (!v.ok()) {
      if (!absl::IsNotFound(v.status())) {
        Warn(absl::StrCat("tfrecord: offset cache of ", path,
                          " unreadable: ", v.status().message()));
      }
      return false;
    }
    offsets.clear();
    lengths.clear();
    switch (DecodeOffsets(*v, identity, file_size, &offsets, &lengths)) {
      case Decoded::kOk:
        return true;
      case Decoded::kStale:
        break;  // the file changed: rebuilt silently
      case Decoded::kDamaged:
        Warn(absl::StrCat("tfrecord: offset cache of ", path,
                          " does not fit the file; rebuilding it"));
        break;
    }
    offsets.clear();
    lengths.clear();
    return false;
  };
  bool from_cache = load();
  bool stored = false;
  if (!from_cache) {
    // One build per entry across streams and daemons: the lock's holder
    // scans and stores; a waiter then finds the entry.
    absl::StatusOr<CacheDir::Lock> lock = cache->LockEntry(kOffsetsKind, key);
    from_cache = lock.ok() && load();
    if (!from_cache) {
      absl::Status s = ScanRecords(fd, path, file_size, &offsets, &lengths);
      if (!s.ok()) return fail(s);
      if (Settled(st, options.cache_settle_ns)) {
        absl::Status put =
            cache->Put(kOffsetsKind, key, EncodeOffsets(identity, lengths));
        if (put.ok()) {
          stored = true;
        } else {
          Warn(absl::StrCat("tfrecord: cannot store the offsets of ", path,
                            ": ", put.message()));
        }
      }
    }
  }
  auto file = std::unique_ptr<TFRecordFile>(
      new TFRecordFile(path, fd, std::move(offsets), std::move(lengths),
                       options.max_record_bytes));
  file->from_cache_ = from_cache;
  file->stored_ = stored;
  return file;
}

absl::StatusOr<std::string> TFRecordFile::Read(size_t i) const {
  if (i >= offsets_.size()) {
    return absl::OutOfRangeError(absl::StrCat(
        path_, ": record ", i, " out of range (", offsets_.size(), ")"));
  }
  const uint64_t length = lengths_[i];
  const uint64_t record_offset = offsets_[i] - kHeaderBytes;
  if (length > max_record_bytes_) {
    return absl::DataLossError(absl::StrCat(
        path_, ": record ", i, " at offset ", record_offset, " holds ", length,
        " bytes, over the limit of ", max_record_bytes_, " bytes per record"));
  }
  std::string data(length + kFooterBytes, '\0');
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
    total += kHeaderBytes + r.size() + kFooterBytes;
  }
  out.reserve(total);
  for (const std::string& r : records) {
    uint8_t header[kHeaderBytes];
    StoreLE64(r.size(), header);
    StoreLE32(MaskedCrc32c(header, 8), header + 8);
    out.append(reinterpret_cast<const char*>(header), kHeaderBytes);
    out.append(r);
    uint8_t footer[kFooterBytes];
    StoreLE32(MaskedCrc32c(r.data(), r.size()), footer);
    out.append(reinterpret_cast<const char*>(footer), kFooterBytes);
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

// ---------------------------------------------------------------------------
// tf.train.Example wire format.
//
//   Example    { Features features = 1; }
//   Features   { map<string, Feature> feature = 1; }
//                (each map entry: { string key = 1; Feature value = 2; })
//   Feature    { oneof kind { BytesList bytes_list = 1;
//                             FloatList float_list = 2;
//                             Int64List int64_list = 3; } }
//   BytesList  { repeated bytes value = 1; }
//   Int64List  { repeated int64 value = 1 [packed = true]; }
//
// Protobuf semantics kept here: unknown fields are skipped; a message field
// seen twice is merged; within a oneof, the last member seen wins; for a map
// key seen twice, the last entry wins.

namespace {

enum class FeatureKind { kNone, kBytes, kFloat, kInt64 };

struct ParsedFeature {
  FeatureKind kind = FeatureKind::kNone;
  std::vector<std::string> bytes;
  std::vector<int64_t> int64s;
};

absl::Status Malformed(const char* what) {
  return absl::InvalidArgumentError(
      absl::StrCat("malformed tf.train.Example: bad ", what));
}

bool ParseBytesList(const char* p, size_t n, std::vector<std::string>* out) {
  WireReader r(p, n);
  while (!r.done()) {
    uint32_t field, wire;
    if (!r.ReadTag(&field, &wire)) return false;
    if (field == 1 && wire == kWireLengthDelimited) {
      const char* d;
      size_t len;
      if (!r.ReadBytes(&d, &len)) return false;
      out->emplace_back(d, len);
    } else if (!r.Skip(wire)) {
      return false;
    }
  }
  return true;
}

bool ParseInt64List(const char* p, size_t n, std::vector<int64_t>* out) {
  WireReader r(p, n);
  while (!r.done()) {
    uint32_t field, wire;
    if (!r.ReadTag(&field, &wire)) return false;
    if (field == 1 && wire == kWireVarint) {
      uint64_t v;
      if (!r.ReadVarint(&v)) return false;
      out->push_back(int64_t(v));
    } else if (field == 1 && wire == kWireLengthDelimited) {
      const char* d;
      size_t len;
      if (!r.ReadBytes(&d, &len)) return false;
      WireReader packed(d, len);
      while (!packed.done()) {
        uint64_t v;
        if (!packed.ReadVarint(&v)) return false;
        out->push_back(int64_t(v));
      }
    } else if (!r.Skip(wire)) {
      return false;
    }
  }
  return true;
}

// Checks that a FloatList is well formed; its values are not kept.
bool CheckFloatList(const char* p, size_t n) {
  WireReader r(p, n);
  while (!r.done()) {
    uint32_t field, wire;
    if (!r.ReadTag(&field, &wire)) return false;
    if (field == 1 && wire == kWireLengthDelimited) {
      const char* d;
      size_t len;
      if (!r.ReadBytes(&d, &len) || len % 4 != 0) return false;
    } else if (!r.Skip(wire)) {
      return false;
    }
  }
  return true;
}

absl::Status ParseFeature(const char* p, size_t n, ParsedFeature* f) {
  WireReader r(p, n);
  while (!r.done()) {
    uint32_t field, wire;
    if (!r.ReadTag(&field, &wire)) return Malformed("Feature tag");
    if (wire == kWireLengthDelimited && field >= 1 && field <= 3) {
      const char* d;
      size_t len;
      if (!r.ReadBytes(&d, &len)) return Malformed("Feature length");
      const FeatureKind kind = field == 1   ? FeatureKind::kBytes
                               : field == 2 ? FeatureKind::kFloat
                                            : FeatureKind::kInt64;
      if (kind != f->kind) *f = ParsedFeature{kind, {}, {}};
      bool ok = true;
      if (kind == FeatureKind::kBytes) ok = ParseBytesList(d, len, &f->bytes);
      if (kind == FeatureKind::kFloat) ok = CheckFloatList(d, len);
      if (kind == FeatureKind::kInt64) ok = ParseInt64List(d, len, &f->int64s);
      if (!ok) return Malformed("feature value list");
    } else if (!r.Skip(wire)) {
      return Malformed("Feature field");
    }
  }
  return absl::OkStatus();
}

absl::Status ParseFeatures(const char* p, size_t n,
                           std::map<std::string, ParsedFeature>* out) {
  WireReader r(p, n);
  while (!r.done()) {
    uint32_t field, wire;
    if (!r.ReadTag(&field, &wire)) return Malformed("Features tag");
    if (field == 1 && wire == kWireLengthDelimited) {
      const char* entry;
      size_t entry_len;
      if (!r.ReadBytes(&entry, &entry_len)) return Malformed("map entry");
      WireReader er(entry, entry_len);
      std::string key;
      ParsedFeature value;
      while (!er.done()) {
        uint32_t ef, ew;
        if (!er.ReadTag(&ef, &ew)) return Malformed("map entry tag");
        const char* d;
        size_t len;
        if (ef == 1 && ew == kWireLengthDelimited) {
          if (!er.ReadBytes(&d, &len)) return Malformed("feature name");
          key.assign(d, len);
        } else if (ef == 2 && ew == kWireLengthDelimited) {
          if (!er.ReadBytes(&d, &len)) return Malformed("feature length");
          absl::Status s = ParseFeature(d, len, &value);
          if (!s.ok()) return s;
        } else if (!er.Skip(ew)) {
          return Malformed("map entry field");
        }
      }
      (*out)[key] = std::move(value);
    } else if (!r.Skip(wire)) {
      return Malformed("Features field");
    }
  }
  return absl::OkStatus();
}

void PutLengthDelimited(uint32_t field, const std::string& data,
                        std::string* out) {
  AppendVarint((uint64_t(field) << 3) | kWireLengthDelimited, out);
  AppendVarint(data.size(), out);
  out->append(data);
}

void PutMapEntry(const std::string& key, const std::string& feature,
                 std::string* features) {
  std::string entry;
  PutLengthDelimited(1, key, &entry);
  PutLengthDelimited(2, feature, &entry);
  PutLengthDelimited(1, entry, features);
}

}  // namespace

absl::StatusOr<ExampleFeatures> ParseExample(const std::string& serialized) {
  std::map<std::string, ParsedFeature> parsed;
  WireReader r(serialized.data(), serialized.size());
  while (!r.done()) {
    uint32_t field, wire;
    if (!r.ReadTag(&field, &wire)) return Malformed("Example tag");
    if (field == 1 && wire == kWireLengthDelimited) {
      const char* d;
      size_t len;
      if (!r.ReadBytes(&d, &len)) return Malformed("Features length");
      absl::Status s = ParseFeatures(d, len, &parsed);
      if (!s.ok()) return s;
    } else if (!r.Skip(wire)) {
      return Malformed("Example field");
    }
  }
  ExampleFeatures out;
  for (auto& [name, f] : parsed) {
    if (f.kind == FeatureKind::kBytes) out.bytes[name] = std::move(f.bytes);
    if (f.kind == FeatureKind::kInt64) out.int64s[name] = std::move(f.int64s);
  }
  return out;
}

std::string SerializeExample(const ExampleFeatures& features) {
  // Keys are written in sorted order, each in one map entry, so equal inputs
  // give equal bytes. A name present in both maps keeps its int64 list (the
  // later oneof member), as a parser would read the two entries.
  std::string body;
  for (const auto& [name, values] : features.bytes) {
    std::string list;
    for (const std::string& v : values) PutLengthDelimited(1, v, &list);
    std::string feature;
    PutLengthDelimited(1, list, &feature);
    PutMapEntry(name, feature, &body);
  }
  for (const auto& [name, values] : features.int64s) {
    std::string packed;
    for (int64_t v : values) AppendVarint(uint64_t(v), &packed);
    std::string list;
    PutLengthDelimited(1, packed, &list);
    std::string feature;
    PutLengthDelimited(3, list, &feature);
    PutMapEntry(name, feature, &body);
  }
  std::string example;
  PutLengthDelimited(1, body, &example);
  return example;
}

}  // namespace batchd

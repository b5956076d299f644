// The offset index of a TFRecord file in the cache; see tfrecord_index.h.
#include "workloads/common/tfrecord_index.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "base/clock.h"
#include "base/coding.h"
#include "base/log.h"
#include "storage/cache_dir.h"
#include "workloads/common/tfrecord.h"

namespace batchd {
namespace {

// The offset index's cache entry: kind, format, value layout.
constexpr const char* kOffsetsKind = "tfrecord-offsets";
constexpr const char* kOffsetsFormat = "tfrecord-offsets v1";

// What the index depends on (see tfrecord_index.h): no device number.
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
        file_size - pos <
            kTFRecordHeaderBytes + kTFRecordFooterBytes + length) {
      return Decoded::kDamaged;
    }
    offsets->push_back(pos + kTFRecordHeaderBytes);
    lengths->push_back(length);
    pos += kTFRecordHeaderBytes + length + kTFRecordFooterBytes;
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

absl::StatusOr<RecordIndex> CachedRecordIndex(
    const CacheDir& cache, const DataRoot* root, const std::string& path,
    const struct stat& st, int64_t settle_ns, const ScanRecordsFn& scan) {
  const uint64_t file_size = uint64_t(st.st_size);
  RecordIndex index;
  const std::string key =
      absl::StrCat(kOffsetsFormat, "\n", RootRelative(root, path));
  const std::string identity = ShardIdentity(st);
  // Takes the index from the cache; false on a miss (a stale or damaged
  // value is reported and replaced by the caller's Put).
  auto load = [&]() {
    absl::StatusOr<std::string> v = cache.Get(kOffsetsKind, key);
    if (!v.ok()) {
      if (!absl::IsNotFound(v.status())) {
        Warn(absl::StrCat("tfrecord: offset cache of ", path,
                          " unreadable: ", v.status().message()));
      }
      return false;
    }
    index.offsets.clear();
    index.lengths.clear();
    switch (DecodeOffsets(*v, identity, file_size, &index.offsets,
                          &index.lengths)) {
      case Decoded::kOk:
        return true;
      case Decoded::kStale:
        break;  // the file changed: rebuilt silently
      case Decoded::kDamaged:
        Warn(absl::StrCat("tfrecord: offset cache of ", path,
                          " does not fit the file; rebuilding it"));
        break;
    }
    index.offsets.clear();
    index.lengths.clear();
    return false;
  };
  index.from_cache = load();
  if (!index.from_cache) {
    // One build per entry across streams and daemons: the lock's holder
    // scans and stores; a waiter then finds the entry.
    absl::StatusOr<CacheDir::Lock> lock = cache.LockEntry(kOffsetsKind, key);
    index.from_cache = lock.ok() && load();
    if (!index.from_cache) {
      absl::Status s = scan(&index.offsets, &index.lengths);
      if (!s.ok()) return s;
      if (Settled(st, settle_ns)) {
        absl::Status put = cache.Put(kOffsetsKind, key,
                                     EncodeOffsets(identity, index.lengths));
        if (put.ok()) {
          index.stored = true;
        } else {
          Warn(absl::StrCat("tfrecord: cannot store the offsets of ", path,
                            ": ", put.message()));
        }
      }
    }
  }
  return index;
}

}  // namespace batchd

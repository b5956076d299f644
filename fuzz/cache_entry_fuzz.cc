// libFuzzer target for the persistent cache's entry and blob files
// (storage/cache_dir.h), as a damaged or hostile --cache-dir hands
// them to the daemon: any bytes where an entry or a blob should be give its
// value or NotFound (the file discarded), never a crash or a read past the
// file, and what is accepted is exactly the value the file's framing holds.
//
// Input: byte 0 chooses the file (bit 0: entry or blob) and whether the
// target seals it with its correct CRC32C (bit 1: the last 4 bytes replaced
// by the checksum of the bytes before them), so that mutations get past the
// checksum to the length and key checks behind it; the rest is the file.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "base/coding.h"
#include "base/crc32c.h"
#include "fuzz/fuzz_util.h"
#include "storage/cache_dir.h"

namespace {

constexpr absl::string_view kKind = "fuzz-entry";
constexpr absl::string_view kKey = "a fuzzed key";
constexpr size_t kEntryHeader = 32;  // magic, version, 3 lengths
constexpr size_t kBlobTrailer = 36;  // magic, version, 3 lengths, CRC

const batchd::CacheDir& Cache() {
  static const std::shared_ptr<const batchd::CacheDir>* cache = [] {
    auto c = batchd::CacheDir::Open(batchd::fuzz::ScratchDir() + "/cache");
    if (!c.ok()) batchd::fuzz::Fail(std::string(c.status().message()));
    return new std::shared_ptr<const batchd::CacheDir>(*c);
  }();
  return **cache;
}

void Place(const std::string& name, const std::string& file) {
  Cache();  // makes the directory on first use
  batchd::fuzz::WriteScratchFile(
      "cache/" + name, reinterpret_cast<const uint8_t*>(file.data()),
      file.size());
}

// What the grammar in cache_dir.h says an entry file holds: its value, or
// false where the file is not a whole entry of (kKind, kKey).
bool EntryValue(absl::string_view f, absl::string_view* value) {
  if (f.size() < kEntryHeader + 4 ||
      f.substr(0, 8) != absl::string_view("BATCHDC\x01", 8) ||
      batchd::LoadLE32(f.data() + 8) != batchd::kEntryFormatVersion) {
    return false;
  }
  const uint64_t kind = batchd::LoadLE32(f.data() + 12);
  const uint64_t key = batchd::LoadLE64(f.data() + 16);
  const uint64_t len = batchd::LoadLE64(f.data() + 24);
  if (kind != kKind.size() || key != kKey.size() ||
      len != f.size() - kEntryHeader - kind - key - 4) {
    return false;
  }
  *value = f.substr(kEntryHeader + kind + key, len);
  return true;
}

void CheckEntry(const std::string& file) {
  Place(batchd::CacheDir::EntryName(kKind, kKey), file);
  absl::StatusOr<std::string> got = Cache().Get(kKind, kKey);
  if (!got.ok()) {
    if (!absl::IsNotFound(got.status())) {
      batchd::fuzz::Fail(absl::StrCat("entry: not NotFound: ",
                                      got.status().message()));
    }
    return;
  }
  absl::string_view want;
  if (!EntryValue(file, &want)) {
    batchd::fuzz::Fail("entry: a file of another shape accepted");
  }
  if (*got != want) batchd::fuzz::Fail("entry: not the value the file holds");
}

void CheckBlob(const std::string& file) {
  Place(batchd::CacheDir::BlobName(kKind, kKey), file);
  auto blob = Cache().OpenBlob(kKind, kKey);
  if (!blob.ok()) {
    if (!absl::IsNotFound(blob.status())) {
      batchd::fuzz::Fail(absl::StrCat("blob: not NotFound: ",
                                      blob.status().message()));
    }
    return;
  }
  const uint64_t n = (*blob)->size();
  if (file.size() != n + kKind.size() + kKey.size() + kBlobTrailer) {
    batchd::fuzz::Fail("blob: a value of another length accepted");
  }
  std::string value(n, '\0');
  // In two pieces, as readers take it.
  const size_t half = n / 2;
  absl::Status s = (*blob)->Read(0, half, value.data());
  if (s.ok()) s = (*blob)->Read(half, n - half, value.data() + half);
  if (!s.ok()) batchd::fuzz::Fail(absl::StrCat("blob: read: ", s.message()));
  if (value != file.substr(0, n)) {
    batchd::fuzz::Fail("blob: not the value the file holds");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const bool blob = (data[0] & 1) != 0;
  const bool seal = (data[0] & 2) != 0;
  std::string file(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (seal && file.size() >= 4) {
    batchd::StoreLE32(batchd::Crc32c(file.data(), file.size() - 4),
                      &file[file.size() - 4]);
  }
  if (blob) {
    CheckBlob(file);
  } else {
    CheckEntry(file);
  }
  return 0;
}

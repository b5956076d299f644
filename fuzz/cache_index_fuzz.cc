// libFuzzer target for the values of the persistent cache that index data
// sets: a TFRecord shard's record offsets ("tfrecord-offsets",
// workloads/common/tfrecord.h) and an ImageFolder listing ("imagefolder",
// workloads/imagenet/image_source.h). Their checksums and keys match, so
// the decoders see the value as stored: any value must give a usable
// source (a value that does not decode is rebuilt from the data), never a
// crash, a read past the shard or an example outside the tree.
//
// Set-up, once: a shard of 3 records and a tree of 2 classes, indexed with
// the cache, whose entries give the real (kind, key) pairs and values.
// Input: byte 0 chooses the entry (bit 0) and how the rest makes its value
// (bits 1-2): the bytes themselves, the real value with the bytes written
// over it at the offset in bytes 1-2, or the real value cut to that length.
// The value is stored under the real key and the source opened again.
#include <dirent.h>
#include <sys/stat.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/coding.h"
#include "base/files.h"
#include "fuzz/fuzz_util.h"
#include "storage/cache_dir.h"
#include "workloads/common/tfrecord.h"
#include "workloads/imagenet/image_source.h"

namespace {

using batchd::fuzz::Fail;

// The tree's files; each holds its own name.
constexpr const char* kFiles[] = {"a/1.JPEG", "a/2.png", "b/sub/3.jpg",
                                  "b/x.txt"};

bool IsTreeFile(const std::string& bytes) {
  for (const char* f : kFiles) {
    if (bytes == f) return true;
  }
  return false;
}

struct Entry {
  std::string kind, key, value;
};

struct World {
  std::string shard, tree;
  std::shared_ptr<const batchd::CacheDir> cache;
  Entry offsets, listing;
  uint64_t shard_bytes = 0;
};

void MakeFile(const std::string& path, const std::string& bytes) {
  batchd::fuzz::WriteScratchFile(path, reinterpret_cast<const uint8_t*>(
                                           bytes.data()), bytes.size());
}

// Every entry file of the cache, read by the grammar in cache_dir.h.
std::vector<Entry> Entries(const std::string& dir) {
  std::vector<Entry> out;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) Fail("cannot list " + dir);
  while (dirent* e = readdir(d)) {
    if (!absl::EndsWith(e->d_name, ".entry")) continue;
    absl::StatusOr<std::string> read =
        batchd::ReadFileToString(dir + "/" + e->d_name);
    if (!read.ok() || read->size() < 36) Fail("cannot read an entry");
    const std::string& f = *read;
    const uint64_t kind = batchd::LoadLE32(f.data() + 12);
    const uint64_t key = batchd::LoadLE64(f.data() + 16);
    const uint64_t value = batchd::LoadLE64(f.data() + 24);
    out.push_back({f.substr(32, kind), f.substr(32 + kind, key),
                   f.substr(32 + kind + key, value)});
  }
  closedir(d);
  return out;
}

batchd::ImageSourceOptions ImageOptions(const World& w) {
  batchd::ImageSourceOptions o;
  o.cache = w.cache;
  o.cache_settle_ns = 0;
  return o;
}

const World& Setup() {
  static const World* world = [] {
    // The cache fsyncs every value it stores, twice an input here: in
    // memory (unless TMPDIR says otherwise) that costs nothing.
    setenv("TMPDIR", "/dev/shm", /*overwrite=*/0);
    atexit([] {  // libFuzzer ends its runs with exit(): leave no scratch
      std::error_code ec;
      std::filesystem::remove_all(batchd::fuzz::ScratchDir(), ec);
    });
    auto* w = new World;
    const std::string& scratch = batchd::fuzz::ScratchDir();
    w->shard = scratch + "/shard.tfrecord";
    if (!batchd::WriteTFRecordFile(w->shard, {"one", std::string(300, 'x'),
                                              ""})
             .ok()) {
      Fail("cannot write the shard");
    }
    struct stat st;
    stat(w->shard.c_str(), &st);
    w->shard_bytes = uint64_t(st.st_size);
    w->tree = scratch + "/tree";
    for (const char* d : {"", "/a", "/b", "/b/sub"}) {
      mkdir((w->tree + d).c_str(), 0755);
    }
    for (const char* f : kFiles) MakeFile(std::string("tree/") + f, f);
    auto cache = batchd::CacheDir::Open(scratch + "/cache");
    if (!cache.ok()) Fail(std::string(cache.status().message()));
    w->cache = *cache;
    batchd::TFRecordOptions t;
    t.cache = w->cache;
    t.cache_settle_ns = 0;
    auto file = batchd::TFRecordFile::Open(w->shard, t);
    if (!file.ok() || !(*file)->index_stored()) Fail("offsets not stored");
    auto src = batchd::OpenImageFolder(w->tree, ImageOptions(*w));
    if (!src.ok()) Fail(std::string(src.status().message()));
    for (Entry& e : Entries(scratch + "/cache")) {
      if (e.kind == "tfrecord-offsets") w->offsets = e;
      if (e.kind == "imagefolder") w->listing = e;
    }
    if (w->offsets.kind.empty() || w->listing.kind.empty()) {
      Fail("the set-up stored no offsets or no listing");
    }
    return w;
  }();
  return *world;
}

void CheckOffsets(const World& w) {
  batchd::TFRecordOptions t;
  t.cache = w.cache;
  t.cache_settle_ns = 0;
  auto file = batchd::TFRecordFile::Open(w.shard, t);
  if (!file.ok()) Fail(absl::StrCat("shard: ", file.status().message()));
  if (!(*file)->index_from_cache() && (*file)->size() != 3) {
    Fail("a rescan that does not find the shard's 3 records");
  }
  uint64_t bytes = 0;
  for (size_t i = 0; i < (*file)->size(); ++i) {
    absl::StatusOr<std::string> r = (*file)->Read(i);
    if (r.ok()) bytes += r->size();
  }
  if (bytes > w.shard_bytes) Fail("records hold more bytes than the shard");
}

void CheckListing(const World& w) {
  auto src = batchd::OpenImageFolder(w.tree, ImageOptions(w));
  if (!src.ok()) Fail(absl::StrCat("tree: ", src.status().message()));
  if ((*src)->size() == 0) Fail("a listing of no example accepted");
  const size_t classes = (*src)->classes().size();
  std::string bytes;
  for (uint64_t i = 0; i < (*src)->size(); ++i) {
    int64_t label = -1;
    const absl::Status s = (*src)->Read(i, &bytes, &label);
    if (s.ok() && (label < 0 || uint64_t(label) >= classes)) {
      Fail(absl::StrCat("example ", i, " has label ", label, " of ", classes,
                        " classes"));
    }
    if (s.ok() && !IsTreeFile(bytes)) {
      Fail(absl::StrCat("example ", i, " (", (*src)->Describe(i),
                        ") is not a file of the tree"));
    }
    (void)(*src)->Describe(i);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const World& w = Setup();
  if (size == 0) return 0;
  const Entry& e = (data[0] & 1) ? w.listing : w.offsets;
  const int how = (data[0] >> 1) & 3;
  const std::string rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  std::string value;
  if (how == 0 || rest.size() < 2) {
    value = rest;
  } else {
    const size_t at = (uint8_t(rest[0]) | uint8_t(rest[1]) << 8) %
                      (e.value.size() + 1);
    value = e.value;
    if (how == 1 || how == 3) {
      value.replace(at, rest.size() - 2, rest.substr(2));
    } else {
      value.resize(at);
    }
  }
  const absl::Status s = w.cache->Put(e.kind, e.key, value);
  if (!s.ok()) Fail(absl::StrCat("put: ", s.message()));
  if (&e == &w.offsets) {
    CheckOffsets(w);
  } else {
    CheckListing(w);
  }
  return 0;
}

// TFDS and text sources of WMT pairs; see pair_source.h.
#include "workloads/wmt/pair_source.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "base/coding.h"
#include "base/files.h"
#include "base/format.h"
#include "base/work_context.h"
#include "workloads/common/tf_example.h"
#include "workloads/common/tfrecord.h"
#include "workloads/common/tfrecord_shards.h"

namespace batchd {
namespace wmt {

namespace {

constexpr const char* kBuilders[] = {"wmt17_translate", "wmt14_translate"};
// Shards indexed at once at most (the executor's serving threads bound it
// too): on network storage each open and scan waits for round trips, and
// the waits overlap.
constexpr size_t kOpenThreads = 16;

// ---------------------------------------------------------------------------
// TFDS shards

class TfdsSource : public PairSource {
 public:
  static absl::StatusOr<std::unique_ptr<PairSource>> Open(
      const std::vector<std::string>& shards,
      const PairSourceOptions& options) {
    TFRecordOptions tfr;
    tfr.root = options.root;
    tfr.max_record_bytes = options.max_record_bytes;
    tfr.cache = options.cache;  // the shards' offset indexes (tfrecord.h)
    std::string identity = "tfds ";
    for (const std::string& path : shards) {
      struct stat st;
      absl::StatusOr<int> fd = options.root->OpenFile(path, &st);
      if (!fd.ok()) return fd.status();
      close(*fd);
      absl::StrAppend(&identity, FileIdentity(path, st));
    }
    absl::StatusOr<TFRecordShards> opened =
        TFRecordShards::Open(shards, tfr, nullptr, kOpenThreads,
                             options.executor);
    if (!opened.ok()) return opened.status();
    std::string describe = shards.empty() ? "" : shards.front();
    if (shards.size() > 1)
      absl::StrAppend(&describe, " (+", shards.size() - 1, " shards)");
    return std::unique_ptr<PairSource>(new TfdsSource(
        std::move(*opened), std::move(describe), std::move(identity)));
  }

  uint64_t size() const override { return shards_.size(); }
  std::string Describe() const override { return describe_; }
  std::string Identity() const override { return identity_; }

  absl::Status Read(uint64_t i, std::string* de,
                    std::string* en) const override {
    std::string bytes;
    absl::Status s = ReadRecord(i, &bytes);
    if (!s.ok()) return s;
    return ParseRecord(i, bytes, de, en);
  }

  bool has_records() const override { return true; }

  absl::Status ReadRecord(uint64_t i, std::string* bytes) const override {
    if (i >= size()) {
      return absl::OutOfRangeError(
          absl::StrCat("pair ", i, " out of range (", size(), ")"));
    }
    const TFRecordShards::Location at = shards_.Locate(i);
    absl::StatusOr<std::string> read =
        shards_.shard(at.shard).Read(size_t(at.record));
    if (!read.ok()) return read.status();
    *bytes = std::move(*read);
    return absl::OkStatus();
  }

  absl::Status ParseRecord(uint64_t i, const std::string& bytes,
                           std::string* de, std::string* en) const override {
    if (i >= size()) {
      return absl::OutOfRangeError(
          absl::StrCat("pair ", i, " out of range (", size(), ")"));
    }
    const TFRecordShards::Location at = shards_.Locate(i);
    const TFRecordFile& file = shards_.shard(at.shard);
    const size_t record = size_t(at.record);
    absl::StatusOr<ExampleFeatures> ex = ParseExample(bytes);
    if (!ex.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          file.path(), ": record ", record, ": ", ex.status().message()));
    }
    for (auto [name, out] :
         {std::pair<const char*, std::string*>{"de", de}, {"en", en}}) {
      auto it = ex->bytes.find(name);
      if (it == ex->bytes.end() || it->second.size() != 1) {
        return absl::InvalidArgumentError(absl::StrCat(
            file.path(), ": record ", record,
            ": the Example has no single-valued bytes feature '", name, "'"));
      }
      *out = std::move(it->second[0]);
    }
    return absl::OkStatus();
  }

 private:
  TfdsSource(TFRecordShards shards, std::string describe, std::string identity)
      : shards_(std::move(shards)),
        describe_(std::move(describe)),
        identity_(std::move(identity)) {}
  const TFRecordShards shards_;
  const std::string describe_;
  const std::string identity_;
};

// ---------------------------------------------------------------------------
// Aligned text files

// One text file read with pread, and the start of each line. Text files
// are big (WMT17's train side is ~1 GB): no size cap, but a line over
// max_line_bytes is a damaged pair.
class LineFile {
 public:
  static absl::StatusOr<std::unique_ptr<LineFile>> Open(
      const std::string& path, const PairSourceOptions& options) {
    struct stat st;
    absl::StatusOr<int> opened = options.root->OpenFile(path, &st);
    if (!opened.ok()) {
      if (absl::IsNotFound(opened.status())) {
        return absl::NotFoundError(absl::StrCat("no such file ", path));
      }
      return opened.status();
    }
    std::unique_ptr<LineFile> f(
        new LineFile(path, *opened, options.max_record_bytes));
    f->size_ = uint64_t(st.st_size);
    f->identity_ = FileIdentity(path, st);
    const CacheDir* cache = options.cache.get();
    const std::string key =
        absl::StrCat("wmt-lines v", kLinesFormat, " ", f->identity_);
    if (cache != nullptr && f->LoadStarts(*cache, key)) return f;
    absl::Status s = f->ScanStarts();
    if (!s.ok()) return s;
    if (cache != nullptr) {
      std::string value(f->starts_.size() * 8, '\0');
      for (size_t i = 0; i < f->starts_.size(); ++i) {
        StoreLE64(f->starts_[i], &value[8 * i]);
      }
      absl::Status put = cache->Put(kLinesKind, key, value);
      if (!put.ok()) {
        fprintf(stderr,
                "batchd: level=warn event=cache_put_failed kind=%s "
                "error=\"%s\"\n",
                kLinesKind,
                absl::StrReplaceAll(Printable(put.message()),
                                    {{"\"", "\\\""}})
                    .c_str());
      }
    }
    return f;
  }

  ~LineFile() { close(fd_); }

  const std::string& path() const { return path_; }
  const std::string& identity() const { return identity_; }
  uint64_t lines() const { return starts_.size() - 1; }
  absl::StatusOr<std::string> Line(uint64_t i) const {
    const uint64_t begin = starts_[i];
    uint64_t end = starts_[i + 1] - 1;
    // One byte more to see a '\r' before the '\n'; the cap applies to the
    // line without it.
    if (end - begin > max_line_bytes_ + 1) {
      return absl::DataLossError(
          absl::StrCat(path_, ": line ", i + 1, " holds ", end - begin,
                       " bytes, over the limit of ", max_line_bytes_));
    }
    std::string line(end - begin, '\0');
    const ssize_t got = PreadFull(fd_, line.data(), line.size(), begin);
    if (got < 0) {
      const int err = errno;
      return absl::UnavailableError(absl::StrCat("cannot read ", path_, " at ",
                                                 begin, ": ", strerror(err)));
    }
    if (size_t(got) != line.size()) {
      return absl::DataLossError(absl::StrCat(
          path_, ": line ", i + 1, " ends past the end of the file (",
          "the file shrank since it was indexed)"));
    }
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.size() > max_line_bytes_) {
      return absl::DataLossError(
          absl::StrCat(path_, ": line ", i + 1, " holds ", line.size(),
                       " bytes, over the limit of ", max_line_bytes_));
    }
    return line;
  }

 private:
  static constexpr const char* kLinesKind = "wmt-lines";
  static constexpr int kLinesFormat = 1;
  static constexpr size_t kScanBuffer = size_t(1) << 20;

  LineFile(std::string path, int fd, uint64_t max_line_bytes)
      : path_(std::move(path)), fd_(fd), max_line_bytes_(max_line_bytes) {}

  // Line i is [starts_[i], starts_[i + 1] - 1); the sentinel is one past
  // the end when the file does not end in '\n'. One sequential pass with a
  // bounded buffer.
  absl::Status ScanStarts() {
    posix_fadvise(fd_, 0, 0, POSIX_FADV_SEQUENTIAL);
    std::unique_ptr<char[]> buffer(new char[kScanBuffer]);
    uint64_t offset = 0;
    bool at_line_start = true;
    while (offset < size_) {
      // Every MiB: a request that no longer wants the index stops it.
      if (absl::Status s = CheckCancelled(absl::StrCat("indexing ", path_));
          !s.ok()) {
        return s;
      }
      const ssize_t r =
          PreadFull(fd_, buffer.get(),
                    std::min<uint64_t>(kScanBuffer, size_ - offset), offset);
      if (r < 0) {
        const int err = errno;
        return absl::UnavailableError(absl::StrCat(
            "cannot read ", path_, " at ", offset, ": ", strerror(err)));
      }
      if (r == 0) break;  // shrank while scanning: index what is there
      const char* p = buffer.get();
      const char* const end = p + r;
      while (p < end) {
        if (at_line_start)
          starts_.push_back(offset + uint64_t(p - buffer.get()));
        const void* nl = memchr(p, '\n', size_t(end - p));
        if (nl == nullptr) {
          at_line_start = false;
          break;
        }
        p = static_cast<const char*>(nl) + 1;
        at_line_start = true;
      }
      offset += uint64_t(r);
    }
    size_ = offset;
    starts_.push_back(at_line_start ? size_ : size_ + 1);
    posix_fadvise(fd_, 0, 0, POSIX_FADV_RANDOM);
    return absl::OkStatus();
  }

  // The offsets of a cache entry, checked against the file's size; false
  // when absent or unusable.
  bool LoadStarts(const CacheDir& cache, const std::string& key) {
    absl::StatusOr<std::string> value = cache.Get(kLinesKind, key);
    if (!value.ok()) return false;
    const size_t n = value->size() / 8;
    bool ok = value->size() % 8 == 0 && n >= 1;
    std::vector<uint64_t> starts(n);
    for (size_t i = 0; ok && i < n; ++i) {
      starts[i] = LoadLE64(value->data() + 8 * i);
      ok = i == 0 ? starts[0] == 0 : starts[i] > starts[i - 1];
    }
    ok =
        ok && (starts.back() == size_ || (n > 1 && starts.back() == size_ + 1));
    if (!ok) return false;  // the whole-key and checksum match: not expected
    starts_ = std::move(starts);
    return true;
  }

  const std::string path_;
  const int fd_;
  const uint64_t max_line_bytes_;
  uint64_t size_ = 0;
  std::string identity_;
  std::vector<uint64_t> starts_;
};

class TextSource : public PairSource {
 public:
  static absl::StatusOr<std::unique_ptr<PairSource>> Open(
      const std::string& de_path, const std::string& en_path,
      const PairSourceOptions& options) {
    absl::StatusOr<std::unique_ptr<LineFile>> de =
        LineFile::Open(de_path, options);
    if (!de.ok()) return de.status();
    absl::StatusOr<std::unique_ptr<LineFile>> en =
        LineFile::Open(en_path, options);
    if (!en.ok()) return en.status();
    if ((*de)->lines() != (*en)->lines()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the text files are not aligned: ", de_path, " has ", (*de)->lines(),
          " lines, ", en_path, " has ", (*en)->lines()));
    }
    return std::unique_ptr<PairSource>(
        new TextSource(std::move(*de), std::move(*en)));
  }

  uint64_t size() const override { return de_->lines(); }
  std::string Describe() const override {
    return absl::StrCat(de_->path(), " + ", en_->path());
  }
  std::string Identity() const override {
    return absl::StrCat("text ", de_->identity(), en_->identity());
  }

  absl::Status Read(uint64_t i, std::string* de,
                    std::string* en) const override {
    if (i >= size()) {
      return absl::OutOfRangeError(
          absl::StrCat("pair ", i, " out of range (", size(), ")"));
    }
    absl::StatusOr<std::string> d = de_->Line(i);
    if (!d.ok()) return d.status();
    absl::StatusOr<std::string> e = en_->Line(i);
    if (!e.ok()) return e.status();
    *de = std::move(*d);
    *en = std::move(*e);
    return absl::OkStatus();
  }

 private:
  TextSource(std::unique_ptr<LineFile> de, std::unique_ptr<LineFile> en)
      : de_(std::move(de)), en_(std::move(en)) {}
  const std::unique_ptr<LineFile> de_, en_;
};

bool ParseShardSuffix(const std::string& suffix, uint32_t* index,
                      uint32_t* count) {
  // "NNNNN-of-MMMMM"
  const size_t of = suffix.find("-of-");
  if (of == std::string::npos || of == 0) return false;
  const std::string a = suffix.substr(0, of), b = suffix.substr(of + 4);
  if (b.empty() || a.find_first_not_of("0123456789") != std::string::npos ||
      b.find_first_not_of("0123456789") != std::string::npos) {
    return false;
  }
  return absl::SimpleAtoi(a, index) && absl::SimpleAtoi(b, count);
}

}  // namespace

absl::StatusOr<std::vector<std::string>> FindTfdsShards(
    const std::string& data, const std::string& split) {
  std::vector<std::string> order(std::begin(kBuilders), std::end(kBuilders));
  if (split != "train") std::swap(order[0], order[1]);
  for (const std::string& builder : order) {
    const std::filesystem::path dir =
        std::filesystem::path(data) / builder / "de-en" / "1.0.0";
    std::error_code ec;
    if (!std::filesystem::is_directory(dir, ec)) continue;
    const std::string prefix = builder + "-" + split + ".tfrecord-";
    std::map<uint32_t, std::string> shards;
    uint32_t expected_count = 0;
    for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
      const std::string name = entry.path().filename().string();
      if (name.compare(0, prefix.size(), prefix) != 0) continue;
      uint32_t index = 0, count = 0;
      if (!ParseShardSuffix(name.substr(prefix.size()), &index, &count)) {
        continue;
      }
      if (expected_count != 0 && count != expected_count) {
        return absl::FailedPreconditionError(absl::StrCat(
            dir.string(), ": shards of ", split, " disagree on their count (",
            expected_count, " and ", count, ")"));
      }
      expected_count = count;
      shards[index] = entry.path().string();
    }
    if (ec) {
      return absl::UnavailableError(
          absl::StrCat("cannot list ", dir.string(), ": ", ec.message()));
    }
    if (shards.empty()) continue;
    std::vector<std::string> paths;
    for (uint32_t k = 0; k < expected_count; ++k) {
      auto it = shards.find(k);
      if (it == shards.end()) {
        return absl::FailedPreconditionError(absl::StrFormat(
            "%s: shard %05u of %05u of %s is missing (found %u)", dir.string(),
            k, expected_count, split, shards.size()));
      }
      paths.push_back(it->second);
    }
    if (shards.size() != expected_count) {
      return absl::FailedPreconditionError(
          absl::StrCat(dir.string(), ": ", shards.size(), " shards of ", split,
                       " but their names say ", expected_count));
    }
    return paths;
  }
  return std::vector<std::string>{};
}

absl::StatusOr<std::unique_ptr<PairSource>> OpenPairSource(
    const std::string& data, const std::string& split, const std::string& kind,
    const PairSourceOptions& in_options) {
  PairSourceOptions options = in_options;
  if (options.root == nullptr) {
    absl::StatusOr<std::shared_ptr<const DataRoot>> root = DataRoot::Open(data);
    if (!root.ok()) return root.status();
    options.root = std::move(*root);
  }
  if (kind != "auto" && kind != "tfds" && kind != "text") {
    return absl::InvalidArgumentError(absl::StrCat(
        "wmt: source='", kind, "' is not one of auto, tfds, text"));
  }
  if (split.empty() || split.find('/') != std::string::npos ||
      split.find("..") != std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("wmt: bad split name '", split, "'"));
  }
  std::vector<std::string> tried;
  if (kind != "text") {
    absl::StatusOr<std::vector<std::string>> shards =
        FindTfdsShards(data, split);
    if (!shards.ok()) return shards.status();
    if (!shards->empty()) return TfdsSource::Open(*shards, options);
    for (const char* b : kBuilders) {
      tried.push_back(absl::StrCat(data, "/", b, "/de-en/1.0.0/", b, "-", split,
                                   ".tfrecord-*"));
    }
  }
  if (kind != "tfds") {
    const std::string de = absl::StrCat(data, "/", split, ".de");
    const std::string en = absl::StrCat(data, "/", split, ".en");
    std::error_code ec;
    if (std::filesystem::exists(de, ec) || std::filesystem::exists(en, ec)) {
      return TextSource::Open(de, en, options);
    }
    tried.push_back(de + " and " + en);
  }
  return absl::NotFoundError(absl::StrCat(
      "wmt: no ", split, " data; looked for ", absl::StrJoin(tried, ", ")));
}

}  // namespace wmt
}  // namespace batchd

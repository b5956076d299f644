// TFDS and text sources of WMT pairs; see pair_source.h.
#include "workloads/wmt/pair_source.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "workloads/common/tfrecord.h"
#include "workloads/common/tfrecord_shards.h"

namespace batchd {
namespace wmt {

namespace {

constexpr const char* kBuilders[] = {"wmt17_translate", "wmt14_translate"};

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
    absl::StatusOr<TFRecordShards> opened = TFRecordShards::Open(shards, tfr);
    if (!opened.ok()) return opened.status();
    std::string describe = shards.empty() ? "" : shards.front();
    if (shards.size() > 1)
      absl::StrAppend(&describe, " (+", shards.size() - 1, " shards)");
    return std::unique_ptr<PairSource>(
        new TfdsSource(std::move(*opened), std::move(describe)));
  }

  uint64_t size() const override { return shards_.size(); }
  std::string Describe() const override { return describe_; }

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
  TfdsSource(TFRecordShards shards, std::string describe)
      : shards_(std::move(shards)), describe_(std::move(describe)) {}
  const TFRecordShards shards_;
  const std::string describe_;
};

// ---------------------------------------------------------------------------
// Aligned text files

// One read-only mapped text file and the start of each line.
class LineFile {
 public:
  // Text files are big (WMT17's train side is ~1 GB) and mapped, not read:
  // no size cap, but a line over max_line_bytes is a damaged pair.
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
    const int fd = *opened;
    std::unique_ptr<LineFile> f(new LineFile(path, options.max_record_bytes));
    f->size_ = uint64_t(st.st_size);
    if (f->size_ > 0) {
      void* p = mmap(nullptr, f->size_, PROT_READ, MAP_SHARED, fd, 0);
      if (p == MAP_FAILED) {
        const int err = errno;
        close(fd);
        return absl::UnavailableError(
            absl::StrCat("cannot map ", path, ": ", strerror(err)));
      }
      f->data_ = static_cast<const char*>(p);
      madvise(p, f->size_, MADV_SEQUENTIAL);
    }
    close(fd);
    // Line i is [starts_[i], starts_[i + 1] - 1); the sentinel is one past
    // the end when the file does not end in '\n'.
    uint64_t pos = 0;
    while (pos < f->size_) {
      f->starts_.push_back(pos);
      const void* nl = memchr(f->data_ + pos, '\n', f->size_ - pos);
      pos = nl == nullptr
                ? f->size_ + 1
                : uint64_t(static_cast<const char*>(nl) - f->data_) + 1;
    }
    f->starts_.push_back(std::max(pos, f->size_));
    if (f->size_ > 0)
      madvise(const_cast<char*>(f->data_), f->size_, MADV_RANDOM);
    return f;
  }

  ~LineFile() {
    if (data_ != nullptr) munmap(const_cast<char*>(data_), size_);
  }

  const std::string& path() const { return path_; }
  uint64_t lines() const { return starts_.size() - 1; }
  absl::StatusOr<std::string> Line(uint64_t i) const {
    uint64_t begin = starts_[i], end = starts_[i + 1] - 1;
    if (end > begin && data_[end - 1] == '\r') --end;
    if (end - begin > max_line_bytes_) {
      return absl::DataLossError(
          absl::StrCat(path_, ": line ", i + 1, " holds ", end - begin,
                       " bytes, over the limit of ", max_line_bytes_));
    }
    return std::string(data_ + begin, end - begin);
  }

 private:
  LineFile(std::string path, uint64_t max_line_bytes)
      : path_(std::move(path)), max_line_bytes_(max_line_bytes) {}
  const std::string path_;
  const uint64_t max_line_bytes_;
  const char* data_ = nullptr;
  uint64_t size_ = 0;
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

// ImageFolder and TFRecord image sources; see image_source.h.
#include "workloads/imagenet/image_source.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/log.h"
#include "workloads/common/data_file.h"
#include "workloads/common/tfrecord.h"
#include "workloads/common/tfrecord_shards.h"

namespace batchd {
namespace {

// torchvision.datasets.folder.IMG_EXTENSIONS.
constexpr const char* kImageExtensions[] = {
    ".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp"};

bool HasImageExtension(const std::string& name) {
  const std::string lower = absl::AsciiStrToLower(name);
  for (const char* ext : kImageExtensions) {
    if (absl::EndsWith(lower, ext)) return true;
  }
  return false;
}

// os.walk's depth is unbounded; a symlink cycle would make it loop, and we
// stop instead.
constexpr int kMaxDepth = 64;

struct DirEntries {
  std::vector<std::string> dirs;
  std::vector<std::string> files;
};

// Lists `path` as os.scandir / os.walk classify entries: is_dir() follows
// symlinks; everything else (files, broken links, sockets) is a file. With
// a root, the directory is opened through it (confined).
absl::Status ListDir(const DataRoot* root, const std::string& path,
                     DirEntries* out) {
  DIR* d = nullptr;
  if (root != nullptr) {
    absl::StatusOr<int> fd = root->OpenDirectory(path);
    if (!fd.ok()) return fd.status();
    d = fdopendir(*fd);
    if (d == nullptr) close(*fd);
  } else {
    d = opendir(path.c_str());
  }
  if (d == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("cannot list ", path, ": ", strerror(errno)));
  }
  while (dirent* e = readdir(d)) {
    const char* n = e->d_name;
    if (strcmp(n, ".") == 0 || strcmp(n, "..") == 0) continue;
    bool is_dir = e->d_type == DT_DIR;
    if (e->d_type == DT_UNKNOWN || e->d_type == DT_LNK) {
      struct stat st;
      is_dir = fstatat(dirfd(d), n, &st, 0) == 0 && S_ISDIR(st.st_mode);
    }
    (is_dir ? out->dirs : out->files).push_back(n);
  }
  closedir(d);
  return absl::OkStatus();
}

class Progress {
 public:
  explicit Progress(bool on) : on_(on), start_(Clock::now()), last_(start_) {}
  // Reports at most every two seconds, and only once indexing is slow.
  template <typename... Args>
  void Maybe(const Args&... args) {
    if (!on_) return;
    const auto now = Clock::now();
    if (now - last_ < std::chrono::seconds(2)) return;
    last_ = now;
    reported_ = true;
    Log(LogLevel::kInfo, "indexing",
        {{"workload", "imagenet"},
         {"progress", absl::StrCat(args...)},
         {"seconds", absl::StrFormat("%.0f", Seconds(now))}});
  }
  template <typename... Args>
  void Done(const Args&... args) {
    if (!on_ || !reported_) return;
    Log(LogLevel::kInfo, "indexed",
        {{"workload", "imagenet"},
         {"progress", absl::StrCat(args...)},
         {"seconds", absl::StrFormat("%.1f", Seconds(Clock::now()))}});
  }

 private:
  using Clock = std::chrono::steady_clock;
  double Seconds(Clock::time_point t) const {
    return std::chrono::duration<double>(t - start_).count();
  }
  const bool on_;
  const Clock::time_point start_;
  Clock::time_point last_;
  bool reported_ = false;
};

class ImageFolderSource : public ImageSource {
 public:
  static absl::StatusOr<std::unique_ptr<ImageSource>> Open(
      const std::string& dir, const ImageSourceOptions& options) {
    std::shared_ptr<const DataRoot> root = options.root;
    if (root == nullptr) {
      absl::StatusOr<std::shared_ptr<const DataRoot>> r = DataRoot::Open(dir);
      if (!r.ok()) return r.status();
      root = std::move(*r);
    }
    auto src = std::unique_ptr<ImageFolderSource>(
        new ImageFolderSource(dir, std::move(root), options.max_file_bytes));
    const bool progress = options.progress;
    DirEntries top;
    absl::Status st = ListDir(src->root_.get(), dir, &top);
    if (!st.ok()) return st;
    std::sort(top.dirs.begin(), top.dirs.end());
    if (top.dirs.empty()) {
      return absl::NotFoundError(absl::StrCat("no class folder in ", dir,
                                              " (ImageFolder layout: ", dir,
                                              "/<class>/<image>)"));
    }
    src->classes_ = top.dirs;
    Progress report(progress);
    std::vector<std::string> empty;
    for (size_t c = 0; c < src->classes_.size(); ++c) {
      const size_t before = src->labels_.size();
      st = src->AddClass(int32_t(c), src->classes_[c]);
      if (!st.ok()) return st;
      if (src->labels_.size() == before) empty.push_back(src->classes_[c]);
      report.Maybe("indexed ", src->labels_.size(), " files in ", c + 1, " of ",
                   src->classes_.size(), " classes of ", dir);
    }
    if (!empty.empty()) {
      return absl::NotFoundError(
          absl::StrCat("Found no valid file for the classes ",
                       absl::StrJoin(empty, ", "), " in ", dir,
                       ". Supported extensions are: .jpg, .jpeg, .png, .ppm, "
                       ".bmp, .pgm, .tif, .tiff, .webp"));
    }
    report.Done("indexed ", src->labels_.size(), " files in ",
                src->classes_.size(), " classes of ", dir);
    return std::unique_ptr<ImageSource>(std::move(src));
  }

  uint64_t size() const override { return labels_.size(); }

  absl::Status Read(uint64_t i, std::string* bytes,
                    int64_t* label) const override {
    *label = labels_[i];
    return ReadFileCapped(*root_, Path(i), max_file_bytes_, bytes);
  }

  std::string Describe(uint64_t i) const override { return Path(i); }
  std::vector<std::string> classes() const override { return classes_; }

 private:
  ImageFolderSource(std::string dir, std::shared_ptr<const DataRoot> root,
                    uint64_t max_file_bytes)
      : dir_(std::move(dir)),
        root_(std::move(root)),
        max_file_bytes_(max_file_bytes) {}

  std::string Path(uint64_t i) const {
    return absl::StrCat(dir_, "/", RelPath(i));
  }
  std::string RelPath(uint64_t i) const {
    return std::string(names_.data() + offsets_[i],
                       offsets_[i + 1] - offsets_[i]);
  }

  // os.walk(class_dir, followlinks=True), sorted by directory path, files
  // sorted within each directory.
  absl::Status AddClass(int32_t label, const std::string& cls) {
    std::vector<std::pair<std::string, int>> pending = {{cls, 0}};
    std::vector<std::string> dirs;
    while (!pending.empty()) {
      auto [rel, depth] = pending.back();
      pending.pop_back();
      dirs.push_back(rel);
      if (depth >= kMaxDepth) continue;
      DirEntries e;
      absl::Status st = ListDir(root_.get(), absl::StrCat(dir_, "/", rel), &e);
      if (!st.ok()) {
        if (depth == 0) return st;
        continue;  // os.walk skips a folder it cannot list
      }
      for (const std::string& d : e.dirs) {
        pending.push_back({absl::StrCat(rel, "/", d), depth + 1});
      }
    }
    std::sort(dirs.begin(), dirs.end());
    for (const std::string& rel : dirs) {
      DirEntries e;
      if (!ListDir(root_.get(), absl::StrCat(dir_, "/", rel), &e).ok()) {
        continue;
      }
      std::sort(e.files.begin(), e.files.end());
      for (const std::string& f : e.files) {
        if (!HasImageExtension(f)) continue;
        if (offsets_.empty()) offsets_.push_back(0);
        names_.append(rel).append("/").append(f);
        offsets_.push_back(names_.size());
        labels_.push_back(label);
      }
    }
    return absl::OkStatus();
  }

  const std::string dir_;
  const std::shared_ptr<const DataRoot> root_;
  const uint64_t max_file_bytes_;
  std::vector<std::string> classes_;
  // Paths relative to dir_, packed: path i is names_[offsets_[i],
  // offsets_[i + 1]) (1.28 M paths as strings would cost ~3x the memory).
  std::string names_;
  std::vector<uint64_t> offsets_;
  std::vector<int32_t> labels_;
};

class TFRecordImageSource : public ImageSource {
 public:
  static absl::StatusOr<std::unique_ptr<ImageSource>> Open(
      const std::vector<std::string>& files,
      const ImageSourceOptions& options) {
    Progress report(options.progress);
    TFRecordOptions tfr;
    tfr.root = options.root;
    tfr.max_record_bytes = options.max_file_bytes;
    absl::StatusOr<TFRecordShards> shards =
        TFRecordShards::Open(files, tfr, [&](size_t opened, uint64_t records) {
          report.Maybe("indexed ", records, " records in ", opened, " of ",
                       files.size(), " shards");
        });
    if (!shards.ok()) return shards.status();
    const uint64_t total = shards->size();
    report.Done("indexed ", total, " records in ", files.size(), " shards");
    if (total == 0) {
      return absl::NotFoundError(
          absl::StrCat("no records in the ", files.size(), " TFRecord shards"));
    }
    return std::unique_ptr<ImageSource>(
        new TFRecordImageSource(std::move(*shards)));
  }

  uint64_t size() const override { return shards_.size(); }

  absl::Status Read(uint64_t i, std::string* bytes,
                    int64_t* label) const override {
    absl::StatusOr<std::string> record = shards_.Read(i);
    if (!record.ok()) return record.status();
    absl::StatusOr<ExampleFeatures> ex = ParseExample(*record);
    if (!ex.ok()) {
      return absl::DataLossError(
          absl::StrCat(Describe(i), ": ", ex.status().message()));
    }
    auto img = ex->bytes.find("image");
    auto lab = ex->int64s.find("label");
    if (img == ex->bytes.end() || img->second.size() != 1 ||
        lab == ex->int64s.end() || lab->second.size() != 1) {
      return absl::DataLossError(
          absl::StrCat(Describe(i),
                       ": a tf.train.Example without one `image` (bytes) "
                       "and one `label` (int64)"));
    }
    *label = lab->second[0];
    bytes->swap(img->second[0]);
    return absl::OkStatus();
  }

  std::string Describe(uint64_t i) const override {
    const TFRecordShards::Location at = shards_.Locate(i);
    return absl::StrCat(shards_.shard(at.shard).path(), " record ", at.record);
  }

 private:
  explicit TFRecordImageSource(TFRecordShards shards)
      : shards_(std::move(shards)) {}

  const TFRecordShards shards_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<ImageSource>> OpenImageFolder(
    const std::string& dir, const ImageSourceOptions& options) {
  return ImageFolderSource::Open(dir, options);
}

absl::StatusOr<std::unique_ptr<ImageSource>> OpenImageFolder(
    const std::string& dir, bool progress) {
  ImageSourceOptions options;
  options.progress = progress;
  return ImageFolderSource::Open(dir, options);
}

absl::StatusOr<std::unique_ptr<ImageSource>> OpenTFRecordImages(
    const std::vector<std::string>& files, const ImageSourceOptions& options) {
  return TFRecordImageSource::Open(files, options);
}

absl::StatusOr<std::unique_ptr<ImageSource>> OpenTFRecordImages(
    const std::vector<std::string>& files, bool progress) {
  ImageSourceOptions options;
  options.progress = progress;
  return TFRecordImageSource::Open(files, options);
}

std::vector<std::string> FindTFRecordShards(const std::string& dir,
                                            const std::string& split,
                                            const DataRoot* root) {
  DirEntries e;
  std::vector<std::string> out;
  if (!ListDir(root, dir, &e).ok()) return out;
  const std::string infix = absl::StrCat("-", split, ".tfrecord-");
  const std::string suffix = absl::StrCat("-", split, ".tfrecord");
  for (const std::string& f : e.files) {
    if (absl::StrContains(f, infix) || absl::EndsWith(f, suffix)) {
      out.push_back(absl::StrCat(dir, "/", f));
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace batchd

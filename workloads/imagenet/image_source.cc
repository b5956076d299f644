// ImageFolder and TFRecord image sources; see image_source.h.
#include "workloads/imagenet/image_source.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <functional>
#include <mutex>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "base/clock.h"
#include "base/executor.h"
#include "base/log.h"
#include "base/test_hooks.h"
#include "base/work_context.h"
#include "storage/cache_dir.h"
#include "storage/data_file.h"
#include "workloads/common/tf_example.h"
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

// What a directory's listing depends on (image_source.h): no device number.
std::string DirIdentity(const struct stat& st) {
  return absl::StrCat("ino=", st.st_ino, " size=", st.st_size,
                      " mtime_ns=", Nanos(st.st_mtim),
                      " ctime_ns=", Nanos(st.st_ctim));
}

struct DirEntries {
  std::vector<std::string> dirs;
  std::vector<std::string> files;
  // Symbolic links among `files` (they resolved to no directory).
  std::vector<std::string> linked_files;
  std::string identity;    // of the directory listed
  int64_t changed_ns = 0;  // its latest mtime or ctime
};

// Opens directory `path` through `root` (confined) or, without a root, by
// path; nullptr with errno set on failure (a confinement refusal is EACCES).
DIR* OpenDir(const DataRoot* root, const std::string& path) {
  if (root == nullptr) return opendir(path.c_str());
  absl::StatusOr<int> fd = root->OpenDirectory(path);
  if (!fd.ok()) {
    errno = absl::IsNotFound(fd.status()) ? ENOENT : EACCES;
    return nullptr;
  }
  DIR* d = fdopendir(*fd);
  if (d == nullptr) close(*fd);
  return d;
}

// Whether `name`, a link in directory `path` (open as `dir_fd`), leads to a
// directory, as os.scandir's is_dir() follows it. A restricted reader's
// answer is the data root's, with its rights: a link it cannot follow, or
// one that leads outside the root, is no directory (as a broken link), so
// that a listing says nothing of what lies where the reader cannot look.
bool LinkIsDirectory(const DataRoot* root, int dir_fd, const std::string& path,
                     const char* name) {
  if (root != nullptr && root->access().restricted()) {
    return root->IsDirectory(absl::StrCat(path, "/", name));
  }
  struct stat st;
  return fstatat(dir_fd, name, &st, 0) == 0 && S_ISDIR(st.st_mode);
}

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
  struct stat self;
  if (fstat(dirfd(d), &self) == 0) {
    out->identity = DirIdentity(self);
    out->changed_ns = std::max(Nanos(self.st_mtim), Nanos(self.st_ctim));
  }
  uint64_t seen = 0;
  while (dirent* e = readdir(d)) {
    // A folder of millions of entries stops when its request goes.
    if (++seen % 4096 == 0) {
      if (absl::Status s = CheckCancelled(absl::StrCat("listing ", path));
          !s.ok()) {
        closedir(d);
        return s;
      }
    }
    const char* n = e->d_name;
    if (strcmp(n, ".") == 0 || strcmp(n, "..") == 0) continue;
    bool is_dir = e->d_type == DT_DIR;
    bool is_link = e->d_type == DT_LNK;
    if (e->d_type == DT_UNKNOWN) {
      struct stat st;
      const bool known = fstatat(dirfd(d), n, &st, AT_SYMLINK_NOFOLLOW) == 0;
      is_link = known && S_ISLNK(st.st_mode);
      is_dir = known && S_ISDIR(st.st_mode);
    }
    if (is_link) {
      is_dir = LinkIsDirectory(root, dirfd(d), path, n);
      if (!is_dir) out->linked_files.push_back(n);
    }
    (is_dir ? out->dirs : out->files).push_back(n);
  }
  closedir(d);
  return absl::OkStatus();
}

// `path` relative to the data root, when it lies beneath it.
std::string RootRelative(const DataRoot& root, const std::string& path) {
  const std::string prefix = absl::StrCat(root.path(), "/");
  if (absl::StartsWith(path, prefix)) return path.substr(prefix.size());
  return path == root.path() ? "." : path;
}

// Test hook ($BATCHD_TEST_IMAGEFOLDER_HOLD=PATH, with test hooks on): while
// PATH exists, listing an ImageFolder tree goes on slowly (on the thread
// that lists it, before its class folders), as on storage that
// answers a listing in minutes: it waits, having created PATH.held once,
// so that a test can act while a stream is being prepared (ask again, kill
// its caller, open another stream). The wait counts steps of progress
// (CheckCancelled); it ends when PATH goes, or with CANCELLED when the
// work is no longer wanted.
absl::Status HoldListingForTest(const std::string& what) {
  const char* path = TestHook("BATCHD_TEST_IMAGEFOLDER_HOLD");
  if (path == nullptr) return absl::OkStatus();
  const std::string held = absl::StrCat(path, ".held");
  while (access(path, F_OK) == 0) {
    if (access(held.c_str(), F_OK) != 0) {
      const int fd = open(held.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
      if (fd >= 0) close(fd);
    }
    if (absl::Status s = CheckCancelled(what); !s.ok()) return s;
    usleep(10000);
  }
  return absl::OkStatus();
}

// An index-cache line of the daemon's log (event index_cache).
void LogIndex(LogLevel level, const std::string& msg) {
  Log(level, "index_cache", {{"workload", "imagenet"}, {"msg", msg}});
}

// Listings and shard opens in flight at Open at most, on the daemon's
// executor (its serving threads bound them too): metadata and header reads
// are latency-bound on network storage (a round trip each), so the waits
// overlap.
constexpr size_t kIndexThreads = 16;

// fn(0) ... fn(n - 1), on up to kIndexThreads threads at once: this one and
// the executor's (null: this one alone). CANCELLED, with items left out,
// when the request that indexes no longer wants it.
absl::Status ParallelFor(Executor* executor, size_t n,
                         const std::function<void(size_t)>& fn) {
  return batchd::ParallelFor(
      executor, Priority::kServing, n, kIndexThreads,
      [&](uint64_t i) {
        fn(size_t(i));
        return absl::OkStatus();
      },
      /*max_chunk=*/1);
}

// The listing cache entry's kind and the rules its key names.
constexpr const char* kListingKind = "imagefolder";
std::string ListingKey(const std::string& rel_dir) {
  return absl::StrCat("imagefolder listing v1\nextensions=",
                      absl::StrJoin(kImageExtensions, ","),
                      "\nmax_depth=", kMaxDepth, "\ndir=", rel_dir);
}

class Progress {
 public:
  explicit Progress(bool on)
      : on_(on), start_ns_(MonotonicNanos()), last_ns_(start_ns_) {}
  // Reports at most every two seconds, and only once indexing is slow.
  template <typename... Args>
  void Maybe(const Args&... args) {
    if (!on_) return;
    const uint64_t now = MonotonicNanos();
    if (now - last_ns_ < uint64_t(2e9)) return;
    last_ns_ = now;
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
         {"seconds", absl::StrFormat("%.1f", Seconds(MonotonicNanos()))}});
  }

 private:
  double Seconds(uint64_t now_ns) const {
    return double(now_ns - start_ns_) / 1e9;
  }
  const bool on_;
  const uint64_t start_ns_;  // MonotonicNanos
  uint64_t last_ns_;
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
    auto src = std::unique_ptr<ImageFolderSource>(new ImageFolderSource(
        dir, std::move(root), options.max_file_bytes, options.executor));
    const CacheDir* cache = options.cache != nullptr && options.cache->enabled()
                                ? options.cache.get()
                                : nullptr;
    ImageIndexStats unused;
    ImageIndexStats* stats = options.stats ? options.stats : &unused;
    if (cache == nullptr) {
      absl::Status st = src->Build(options.progress);
      if (!st.ok()) return st;
      return std::unique_ptr<ImageSource>(std::move(src));
    }
    const uint64_t start_ns = MonotonicNanos();
    const std::string key = ListingKey(RootRelative(*src->root_, dir));
    bool hit = src->Load(*cache, key);
    absl::StatusOr<CacheDir::Lock> lock;
    if (!hit) {
      // One build per listing across streams and daemons: the lock's holder
      // lists and stores; a waiter then finds the entry.
      lock = cache->LockEntry(kListingKind, key);
      hit = lock.ok() && src->Load(*cache, key);
    }
    if (hit) {
      stats->listing_from_cache = true;
      if (options.progress) {
        LogIndex(
            LogLevel::kInfo,
            absl::StrCat("imagenet: listing of ", dir,
                         " from the cache: ", src->labels_.size(), " files in ",
                         src->classes_.size(), " classes (",
                         src->walked_.size(), " folders checked, ",
                         absl::StrFormat(
                             "%.2f", double(MonotonicNanos() - start_ns) / 1e9),
                         " s)"));
      }
      src->walked_.clear();
      src->walked_.shrink_to_fit();
      return std::unique_ptr<ImageSource>(std::move(src));
    }
    const int64_t begin_ns = RealtimeNanos();
    absl::Status st = src->Build(options.progress);
    if (!st.ok()) return st;
    if (begin_ns - src->latest_change_ns_ >= options.cache_settle_ns) {
      absl::Status put = cache->Put(kListingKind, key, src->Encode());
      if (put.ok()) {
        stats->listing_stored = true;
        if (options.progress) {
          LogIndex(LogLevel::kInfo,
                   absl::StrCat("imagenet: listing of ", dir,
                                " stored in the cache ", cache->path()));
        }
      } else {
        LogIndex(LogLevel::kWarn,
                 absl::StrCat("imagenet: cannot store the listing of ", dir,
                              ": ", put.message()));
      }
    } else if (options.progress) {
      LogIndex(LogLevel::kInfo,
               absl::StrCat("imagenet: listing of ", dir,
                            " not cached: a folder changed within ",
                            options.cache_settle_ns / 1000000, " ms"));
    }
    src->walked_.clear();
    src->walked_.shrink_to_fit();
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
                    uint64_t max_file_bytes, Executor* executor)
      : dir_(std::move(dir)),
        root_(std::move(root)),
        max_file_bytes_(max_file_bytes),
        executor_(executor) {}

  std::string Path(uint64_t i) const {
    return absl::StrCat(dir_, "/", RelPath(i));
  }
  std::string RelPath(uint64_t i) const {
    return std::string(names_.data() + offsets_[i],
                       offsets_[i + 1] - offsets_[i]);
  }

  // Lists the tree (torchvision's ImageFolder), recording every directory
  // walked for the cache.
  absl::Status Build(bool progress) {
    DirEntries top;
    absl::Status st = ListDir(root_.get(), dir_, &top);
    if (!st.ok()) return st;
    Walked(std::string(), top);
    std::sort(top.dirs.begin(), top.dirs.end());
    if (top.dirs.empty()) {
      return absl::NotFoundError(absl::StrCat("no class folder in ", dir_,
                                              " (ImageFolder layout: ", dir_,
                                              "/<class>/<image>)"));
    }
    classes_ = top.dirs;
    Progress report(progress);
    // What the request that waits for the listing is told.
    const std::string listing =
        absl::StrCat("listing ", RootRelative(*root_, dir_));
    ReportProgress(listing, 0, classes_.size(), "class folders");
    if (absl::Status held = HoldListingForTest(listing); !held.ok()) {
      return held;
    }
    std::vector<std::string> empty;
    // Classes are listed by several threads (on network storage each
    // listing waits for round trips), a batch at a time to bound memory.
    constexpr size_t kBatch = 4 * kIndexThreads;
    for (size_t first = 0; first < classes_.size(); first += kBatch) {
      std::vector<ClassListing> batch(
          std::min(kBatch, classes_.size() - first));
      absl::Status listed = ParallelFor(executor_, batch.size(), [&](size_t i) {
        ListClass(classes_[first + i], &batch[i]);
      });
      if (!listed.ok()) return listed;
      for (size_t i = 0; i < batch.size(); ++i) {
        const size_t c = first + i;
        if (!batch[i].status.ok()) return batch[i].status;
        const size_t before = labels_.size();
        AddClass(int32_t(c), &batch[i]);
        if (labels_.size() == before) empty.push_back(classes_[c]);
        report.Maybe("indexed ", labels_.size(), " files in ", c + 1, " of ",
                     classes_.size(), " classes of ", dir_);
        ReportProgress(listing, c + 1, classes_.size(), "class folders");
      }
    }
    if (!empty.empty()) {
      return absl::NotFoundError(
          absl::StrCat("Found no valid file for the classes ",
                       absl::StrJoin(empty, ", "), " in ", dir_,
                       ". Supported extensions are: .jpg, .jpeg, .png, .ppm, "
                       ".bmp, .pgm, .tif, .tiff, .webp"));
    }
    report.Done("indexed ", labels_.size(), " files in ", classes_.size(),
                " classes of ", dir_);
    return absl::OkStatus();
  }

  // What one class folder holds: os.walk(class_dir, followlinks=True),
  // each directory listed once.
  struct ClassListing {
    absl::Status status;
    std::vector<std::pair<std::string, DirEntries>> dirs;  // walked
  };

  // Lists class folder `cls`; touches no member (classes are listed by
  // several threads at once).
  void ListClass(const std::string& cls, ClassListing* out) const {
    std::vector<std::pair<std::string, int>> pending = {{cls, 0}};
    while (!pending.empty()) {
      if (absl::Status s = CheckCancelled(absl::StrCat("listing ", dir_));
          !s.ok()) {
        out->status = s;
        return;
      }
      auto [rel, depth] = pending.back();
      pending.pop_back();
      DirEntries e;
      absl::Status st = ListDir(root_.get(), absl::StrCat(dir_, "/", rel), &e);
      if (!st.ok()) {
        if (depth == 0 || absl::IsCancelled(st)) {
          out->status = st;
          return;
        }
        // os.walk skips a folder it cannot list
        out->dirs.emplace_back(std::move(rel), DirEntries());
        continue;
      }
      if (depth < kMaxDepth) {
        for (const std::string& d : e.dirs) {
          pending.push_back({absl::StrCat(rel, "/", d), depth + 1});
        }
      }
      out->dirs.emplace_back(std::move(rel), std::move(e));
    }
  }

  // Appends a listed class: directories in sorted path order, files sorted
  // within each directory, image extensions only.
  void AddClass(int32_t label, ClassListing* listing) {
    auto& dirs = listing->dirs;
    std::sort(dirs.begin(), dirs.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    for (auto& [rel, e] : dirs) {
      Walked(rel, e);
      std::sort(e.files.begin(), e.files.end());
      for (const std::string& f : e.files) {
        if (!HasImageExtension(f)) continue;
        if (offsets_.empty()) offsets_.push_back(0);
        names_.append(rel).append("/").append(f);
        offsets_.push_back(names_.size());
        labels_.push_back(label);
      }
    }
  }

  // A directory walked (rel to dir_; identity empty: it could not be listed).
  struct WalkedDir {
    std::string rel;
    std::string identity;
    std::vector<std::string> linked_files;
  };

  void Walked(const std::string& rel, const DirEntries& e) {
    walked_.push_back({rel, e.identity, e.linked_files});
    latest_change_ns_ = std::max(latest_change_ns_, e.changed_ns);
  }

  std::string DirPath(const std::string& rel) const {
    return rel.empty() ? dir_ : absl::StrCat(dir_, "/", rel);
  }

  // The cache value: the directories walked, then per class its name and
  // its files' paths after "<class>/" (labels follow from the classes).
  std::string Encode() const {
    std::string v;
    v.reserve(names_.size() + 4 * labels_.size() + 64 * walked_.size());
    AppendVarint(walked_.size(), &v);
    for (const WalkedDir& w : walked_) {
      AppendString(w.rel, &v);
      AppendString(w.identity, &v);
      AppendVarint(w.linked_files.size(), &v);
      for (const std::string& l : w.linked_files) AppendString(l, &v);
    }
    AppendVarint(classes_.size(), &v);
    size_t i = 0;
    for (size_t c = 0; c < classes_.size(); ++c) {
      size_t end = i;
      while (end < labels_.size() && labels_[end] == int32_t(c)) ++end;
      AppendString(classes_[c], &v);
      AppendVarint(end - i, &v);
      for (; i < end; ++i) {
        AppendString(RelPath(i).substr(classes_[c].size() + 1), &v);
      }
    }
    return v;
  }

  // Takes the listing from the cache when its entry decodes and every
  // directory it walked is unchanged (image_source.h); false otherwise,
  // leaving the source empty.
  bool Load(const CacheDir& cache, const std::string& key) {
    absl::StatusOr<std::string> v = cache.Get(kListingKind, key);
    if (!v.ok()) {
      if (!absl::IsNotFound(v.status())) {
        LogIndex(LogLevel::kWarn,
                 absl::StrCat("imagenet: listing cache of ", dir_,
                              " unreadable: ", v.status().message()));
      }
      return false;
    }
    const bool decoded = Decode(*v);
    if (!decoded) {
      LogIndex(LogLevel::kWarn,
               absl::StrCat("imagenet: listing cache of ", dir_,
                            " does not decode; rebuilding it"));
    }
    if (!decoded || !Unchanged()) {
      walked_.clear();
      classes_.clear();
      names_.clear();
      offsets_.clear();
      labels_.clear();
      return false;
    }
    return true;
  }

  bool Decode(absl::string_view v) {
    uint64_t n;
    if (!ReadVarint(&v, &n) || n > v.size()) return false;
    walked_.resize(n);
    for (WalkedDir& w : walked_) {
      absl::string_view rel, id;
      uint64_t links;
      if (!ReadString(&v, &rel) || !ReadString(&v, &id) ||
          !ReadVarint(&v, &links) || links > v.size()) {
        return false;
      }
      w.rel = std::string(rel);
      w.identity = std::string(id);
      w.linked_files.resize(links);
      for (std::string& l : w.linked_files) {
        absl::string_view name;
        if (!ReadString(&v, &name)) return false;
        l = std::string(name);
      }
    }
    if (!ReadVarint(&v, &n) || n == 0 || n > v.size()) return false;
    classes_.resize(n);
    for (size_t c = 0; c < classes_.size(); ++c) {
      absl::string_view cls;
      uint64_t files;
      if (!ReadString(&v, &cls) || !ReadVarint(&v, &files) || files == 0 ||
          files > v.size()) {
        return false;
      }
      classes_[c] = std::string(cls);
      for (uint64_t f = 0; f < files; ++f) {
        absl::string_view suffix;
        if (!ReadString(&v, &suffix)) return false;
        if (offsets_.empty()) offsets_.push_back(0);
        names_.append(cls.data(), cls.size()).append("/");
        names_.append(suffix.data(), suffix.size());
        offsets_.push_back(names_.size());
        labels_.push_back(int32_t(c));
      }
    }
    return v.empty() && !walked_.empty();
  }

  // Every walked directory has its identity (or is still unlistable), and
  // no symlink taken as a file resolves to a directory.
  bool Unchanged() const {
    ReportProgress(absl::StrCat("checking the cached listing of ",
                                RootRelative(*root_, dir_)),
                   0, 0, "");
    std::atomic<bool> same{true};
    absl::Status checked =
        ParallelFor(executor_, walked_.size(), [&](size_t i) {
          if (same.load(std::memory_order_relaxed) && !Unchanged(walked_[i])) {
            same = false;
          }
        });
    // Not all checked (cancelled): not known to be the same; the listing
    // that follows stops for the same reason.
    return checked.ok() && same;
  }

  bool Unchanged(const WalkedDir& w) const {
    DIR* d = OpenDir(root_.get(), DirPath(w.rel));
    if (d == nullptr) return w.identity.empty();
    struct stat st;
    bool same = !w.identity.empty() && fstat(dirfd(d), &st) == 0 &&
                DirIdentity(st) == w.identity;
    for (size_t i = 0; same && i < w.linked_files.size(); ++i) {
      same = !LinkIsDirectory(root_.get(), dirfd(d), DirPath(w.rel),
                              w.linked_files[i].c_str());
    }
    closedir(d);
    return same;
  }

  const std::string dir_;
  const std::shared_ptr<const DataRoot> root_;
  const uint64_t max_file_bytes_;
  Executor* const executor_;  // borrowed; may be null
  std::vector<std::string> classes_;
  // Paths relative to dir_, packed: path i is names_[offsets_[i],
  // offsets_[i + 1]) (1.28 M paths as strings would cost ~3x the memory).
  std::string names_;
  std::vector<uint64_t> offsets_;
  std::vector<int32_t> labels_;
  // While indexing: the directories walked, and their latest change.
  std::vector<WalkedDir> walked_;
  int64_t latest_change_ns_ = 0;
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
    tfr.cache = options.cache;
    tfr.cache_settle_ns = options.cache_settle_ns;
    ImageIndexStats unused;
    ImageIndexStats* stats = options.stats ? options.stats : &unused;
    absl::StatusOr<TFRecordShards> shards = TFRecordShards::Open(
        files, tfr,
        [&](size_t opened, uint64_t records) {
          report.Maybe("indexed ", records, " records in ", opened, " of ",
                       files.size(), " shards");
        },
        kIndexThreads, options.executor);
    if (!shards.ok()) return shards.status();
    const uint64_t total = shards->size();
    for (size_t f = 0; f < shards->shard_count(); ++f) {
      const TFRecordFile& file = shards->shard(f);
      if (file.index_from_cache()) {
        ++stats->shards_from_cache;
      } else {
        ++stats->shards_scanned;
        if (file.index_stored()) ++stats->shards_stored;
      }
    }
    report.Done("indexed ", total, " records in ", files.size(), " shards");
    if (options.progress && options.cache != nullptr &&
        options.cache->enabled()) {
      LogIndex(LogLevel::kInfo,
               absl::StrCat("imagenet: offsets of ", files.size(),
                            " shards: ", stats->shards_from_cache,
                            " from the cache, ", stats->shards_scanned,
                            " scanned (", stats->shards_stored, " stored)"));
    }
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

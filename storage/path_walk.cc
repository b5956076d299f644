// The user-space walk beneath a root; see path_walk.h.
#include "storage/path_walk.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace batchd {

namespace {

std::atomic<WalkStepHook> g_step_hook{nullptr};

WalkFailure FailureOf(int err) {
  switch (err) {
    case ENOENT:
    case ENOTDIR:
      return WalkFailure::kMissing;
    case EACCES:
    case EPERM:
      return WalkFailure::kDenied;
    case ELOOP:
      return WalkFailure::kLoop;
    default:
      return WalkFailure::kSystem;
  }
}

// Where a walk stands: one descriptor of the directory it is in (the
// root's, borrowed, at depth 0), and the identity and name of each
// directory between the root and it, so that `..` can be checked without
// holding a descriptor per level (a path of 2,000 components must not take
// 2,000 of the daemon's descriptors).
class Walker {
 public:
  Walker(const WalkRoot& root, const ReadAccess* bits)
      : root_(root), bits_(bits) {}
  ~Walker() { Release(); }
  Walker(const Walker&) = delete;
  Walker& operator=(const Walker&) = delete;

  int dir() const { return dir_; }

  // Whether the reader may look a name up in dir(): the kernel checks that
  // itself in every lookup, so only a bits reader is checked here.
  bool MaySearch() {
    if (bits_ == nullptr) return true;
    const struct stat* st = DirStat();
    return st != nullptr && Permits(dir_, *st, ReadAccess::kSearch);
  }

  // Descends into `fd`, a directory named `name` looked up in dir().
  bool Enter(int fd, std::string name, WalkResult* r) {
    if (dir_ == root_.fd) {
      ids_.emplace_back(root_.dev, root_.ino);
    } else if (const struct stat* st = DirStat()) {
      ids_.emplace_back(st->st_dev, st->st_ino);
    } else {
      const int err = errno;
      close(fd);
      return Fail(WalkFailure::kSystem, err, r);
    }
    names_.push_back(std::move(name));
    SetDir(fd);
    return true;
  }

  // `..`: back to the directory dir() was entered from, never above the
  // root; one that is no longer dir()'s parent (moved meanwhile) ends the
  // walk.
  bool Up(WalkResult* r) {
    if (ids_.empty()) {
      r->outside = "..";
      return Fail(WalkFailure::kOutside, EXDEV, r);
    }
    const int fd = openat(dir_, "..", O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return Fail(FailureOf(errno), errno, r);
    struct stat st;
    if (fstat(fd, &st) != 0 || st.st_dev != ids_.back().first ||
        st.st_ino != ids_.back().second) {
      close(fd);
      return Fail(WalkFailure::kSystem, EAGAIN, r);
    }
    ids_.pop_back();
    names_.pop_back();
    if (ids_.empty()) {
      close(fd);
      SetDir(root_.fd);
    } else {
      SetDir(fd);
    }
    return true;
  }

  // An absolute link target naming the root: back to the root itself.
  void ToRoot() {
    SetDir(root_.fd);
    ids_.clear();
    names_.clear();
  }

  // "a/b/name": where a link was found, for messages.
  std::string Here(const std::string& name) const {
    return names_.empty() ? name
                          : absl::StrCat(absl::StrJoin(names_, "/"), "/", name);
  }

  // The opened `fd` is the walk's result if a bits reader is granted
  // `want` on it.
  WalkResult Finish(int fd, int want) {
    WalkResult r;
    struct stat st;
    if (bits_ != nullptr && want != 0 &&
        !(fstat(fd, &st) == 0 && Permits(fd, st, want))) {
      close(fd);
      Fail(WalkFailure::kDenied, EACCES, &r);
      return r;
    }
    r.fd = fd;
    return r;
  }

  static bool Fail(WalkFailure failure, int err, WalkResult* r) {
    r->failure = failure;
    r->err = err;
    return false;
  }

 private:
  bool Permits(int fd, const struct stat& st, int want) const {
    // An ACL is read through the descriptor's /proc link: the inode the
    // walk holds, not a name someone could change.
    return bits_->Permits(absl::StrCat("/proc/self/fd/", fd), st, want);
  }

  // dir()'s fstat, taken once per directory; null when it fails.
  const struct stat* DirStat() {
    if (!dir_stat_ok_) {
      if (fstat(dir_, &dir_stat_) != 0) return nullptr;
      dir_stat_ok_ = true;
    }
    return &dir_stat_;
  }

  void SetDir(int fd) {
    Release();
    dir_ = fd;
    dir_stat_ok_ = false;
  }

  void Release() {
    if (dir_ != root_.fd) close(dir_);
  }

  const WalkRoot& root_;
  const ReadAccess* const bits_;
  int dir_ = root_.fd;
  struct stat dir_stat_;
  bool dir_stat_ok_ = false;
  // Of each directory entered below the root, the identity of the one it
  // was entered from, and its own name.
  std::vector<std::pair<dev_t, ino_t>> ids_;
  std::vector<std::string> names_;
};

}  // namespace

int RootNamePrefix(const WalkRoot& root,
                   const std::vector<std::string>& parts) {
  for (const std::vector<std::string>& name : root.names) {
    if (name.size() <= parts.size() &&
        std::equal(name.begin(), name.end(), parts.begin())) {
      return int(name.size());
    }
  }
  return -1;
}

std::vector<std::string> PathComponents(const std::string& path) {
  std::vector<std::string> parts;
  size_t i = 0;
  while (i < path.size()) {
    size_t j = path.find('/', i);
    if (j == std::string::npos) j = path.size();
    if (j > i && !(j == i + 1 && path[i] == '.')) {
      parts.emplace_back(path, i, j - i);
    }
    i = j + 1;
  }
  // "a/" and "a/." name a directory: a last "." makes the walk enter it
  // rather than open it as the last name.
  if (!parts.empty() && parts.back() != ".." &&
      (path.back() == '/' ||
       (path.size() >= 2 && path.compare(path.size() - 2, 2, "/.") == 0))) {
    parts.push_back(".");
  }
  return parts;
}

void SetWalkStepHookForTesting(WalkStepHook hook) { g_step_hook.store(hook); }

WalkResult WalkBeneath(const WalkRoot& root, const std::string& rel, int flags,
                       const ReadAccess* bits, int want) {
  WalkResult r;
  Walker w(root, bits);
  // The names still to walk, the next one last.
  std::vector<std::string> todo = PathComponents(rel);
  std::reverse(todo.begin(), todo.end());
  int links = 0;
  char target[PATH_MAX];
  for (;;) {
    if (todo.empty() || (todo.size() == 1 && todo.back() == ".")) {
      // The path names the directory the walk is in.
      if (!w.MaySearch()) {
        Walker::Fail(WalkFailure::kDenied, EACCES, &r);
        return r;
      }
      const int fd = openat(w.dir(), ".", flags | O_CLOEXEC);
      if (fd < 0) {
        Walker::Fail(FailureOf(errno), errno, &r);
        return r;
      }
      return w.Finish(fd, want);
    }
    std::string name = std::move(todo.back());
    todo.pop_back();
    if (name == ".") continue;  // "a/./b" (a link's "b/." leaves one)
    if (!w.MaySearch()) {
      Walker::Fail(WalkFailure::kDenied, EACCES, &r);
      return r;
    }
    if (WalkStepHook hook = g_step_hook.load(std::memory_order_relaxed)) {
      hook(w.dir(), name);
    }
    if (name == "..") {
      if (!w.Up(&r)) return r;
      continue;
    }
    ssize_t n;
    if (!todo.empty()) {
      // A directory to go through, or a link to one.
      const int fd = openat(w.dir(), name.c_str(),
                            O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (fd >= 0) {
        if (!w.Enter(fd, std::move(name), &r)) return r;
        continue;
      }
      const int err = errno;
      if (err != ENOTDIR) {
        Walker::Fail(FailureOf(err), err, &r);
        return r;
      }
      n = readlinkat(w.dir(), name.c_str(), target, sizeof(target));
      if (n < 0) {
        // Not a link: a file where a directory is needed.
        Walker::Fail(WalkFailure::kMissing, errno == EINVAL ? ENOTDIR : errno,
                     &r);
        return r;
      }
    } else {
      const int fd =
          openat(w.dir(), name.c_str(), flags | O_NOFOLLOW | O_CLOEXEC);
      if (fd >= 0) {
        struct stat st;
        if (!(flags & O_PATH)) return w.Finish(fd, want);
        // O_PATH | O_NOFOLLOW opens a link itself.
        if (fstat(fd, &st) != 0 || !S_ISLNK(st.st_mode)) {
          return w.Finish(fd, want);
        }
        n = readlinkat(fd, "", target, sizeof(target));
        const int err = errno;
        close(fd);
        if (n < 0) {
          Walker::Fail(FailureOf(err), err, &r);
          return r;
        }
      } else {
        // O_NOFOLLOW meets a link: ELOOP (ENOTDIR with O_DIRECTORY).
        const int err = errno;
        if (err != ELOOP && err != ENOTDIR) {
          Walker::Fail(FailureOf(err), err, &r);
          return r;
        }
        n = readlinkat(w.dir(), name.c_str(), target, sizeof(target));
        if (n < 0) {
          // Not a link after all: the open's own error.
          const int why = errno == EINVAL ? err : errno;
          Walker::Fail(FailureOf(why), why, &r);
          return r;
        }
      }
    }
    // `name` is a link to target[0, n): walk the target in its place.
    if (++links > kMaxLinks) {
      Walker::Fail(WalkFailure::kLoop, ELOOP, &r);
      return r;
    }
    if (n == 0) {  // an empty target names nothing
      Walker::Fail(WalkFailure::kMissing, ENOENT, &r);
      return r;
    }
    if (size_t(n) >= sizeof(target)) {
      Walker::Fail(WalkFailure::kSystem, ENAMETOOLONG, &r);
      return r;
    }
    const std::string text(target, size_t(n));
    std::vector<std::string> parts = PathComponents(text);
    size_t skip = 0;
    if (text[0] == '/') {
      const int prefix = RootNamePrefix(root, parts);
      if (prefix < 0) {
        r.outside = absl::StrCat(w.Here(name), " -> ", text);
        Walker::Fail(WalkFailure::kOutside, EXDEV, &r);
        return r;
      }
      skip = size_t(prefix);
      w.ToRoot();
    }
    todo.insert(todo.end(), parts.rbegin(), parts.rend() - skip);
  }
}

}  // namespace batchd

// Resolving a path beneath a directory in user space, one component at a
// time, where openat2(RESOLVE_BENEATH) cannot (kernels without openat2, and
// absolute links, which RESOLVE_BENEATH refuses even when they name the
// root): the data root's walk (storage/data_file.h).
//
// Every lookup is one openat(O_PATH | O_NOFOLLOW) or readlinkat of one name
// relative to the descriptor the walk holds, starting at the root's, so no
// path string is ever handed to the kernel to resolve and a link swapped in
// the middle changes only what the walk reads next, never where it may go:
//   - a link is read (readlinkat) and its target walked in its place, at
//     most kMaxLinks of them in one walk (a loop ends there);
//   - `..` never goes above the root, and must come back to the directory
//     the walk entered from (same device and inode): one moved elsewhere
//     meanwhile ends the walk. The walk holds one directory's descriptor at
//     a time (and the identities of those above it), whatever the depth;
//   - an absolute target is followed only when it begins with one of the
//     root's names (its resolved path, the path the operator gave), from the
//     root's descriptor; any other leads outside.
//
// Whose rights: every lookup is made by the calling thread with its own
// file credentials; inside an FsCredsScope they are the reader's and the
// kernel checks each step (search on every directory, read on the file).
// With `bits` (a reader the daemon cannot become), the walk checks the same
// by mode bits and ACLs: search on every directory it looks a name up in
// (through every link), and `want` on what it opens.
//
// Thread safety: WalkBeneath is reentrant; the root's descriptor is only
// read.
#ifndef BATCHD_STORAGE_PATH_WALK_H_
#define BATCHD_STORAGE_PATH_WALK_H_

#include <sys/types.h>

#include <string>
#include <vector>

#include "storage/read_access.h"

namespace batchd {

// Links followed in one walk at most (Linux's MAXSYMLINKS).
constexpr int kMaxLinks = 40;

// The directory a walk starts from and may not leave.
struct WalkRoot {
  int fd = -1;  // a descriptor of the root (O_PATH is enough), borrowed
  // Its identity (fstat): `..` must come back to the directory it left.
  dev_t dev = 0;
  ino_t ino = 0;
  // The root's absolute names, each as its components ("/data/in" is
  // {"data", "in"}): an absolute link target beginning with one names a
  // place beneath the root.
  std::vector<std::vector<std::string>> names;
};

// The components of absolute or relative `path`, without empty ones and
// ".": "/a//./b/" is {"a", "b"}; ".." is kept.
std::vector<std::string> PathComponents(const std::string& path);

// Which of the root's names the components of absolute path `parts` begin
// with: how many components that name has, or -1 when none (a place
// outside the root). Lexical: nothing is looked up.
int RootNamePrefix(const WalkRoot& root, const std::vector<std::string>& parts);

enum class WalkFailure {
  kNone,
  kMissing,  // a name missing, or not a directory where one is needed
  kDenied,   // a directory the reader may not search, a file it may not open
  kOutside,  // `..` above the root, or an absolute link naming elsewhere
  kLoop,     // more than kMaxLinks links
  kSystem,   // any other error (EMFILE, ENOMEM, EIO, ENXIO): see `err`
};

struct WalkResult {
  int fd = -1;  // the opened descriptor (the caller closes it), or -1
  WalkFailure failure = WalkFailure::kNone;
  int err = 0;  // the errno of the call that failed
  // For kOutside: the link that led out ("a/out -> /etc/shadow"), or "..".
  std::string outside;
};

// Opens `rel` (relative to the root; "" or "." is the root) with `flags`
// (O_NOFOLLOW is added: a link at the end is followed by the walk, not by
// the kernel). `bits`: null for the kernel's check (the thread's
// credentials), else the reader checked by mode bits, `want`
// (ReadAccess::Want, 0: nothing) on what is opened.
WalkResult WalkBeneath(const WalkRoot& root, const std::string& rel, int flags,
                       const ReadAccess* bits, int want);

// Tests: called before each name is looked up, with the directory the walk
// holds and the name, so that a test can change the tree mid-walk. Null:
// none.
using WalkStepHook = void (*)(int dir_fd, const std::string& name);
void SetWalkStepHookForTesting(WalkStepHook hook);

}  // namespace batchd

#endif  // BATCHD_STORAGE_PATH_WALK_H_

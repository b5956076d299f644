// Reading files; see files.h.
#include "base/files.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace batchd {

absl::StatusOr<std::string> ReadFileToString(const std::string& path) {
  FILE* f = fopen(path.c_str(), "rbe");
  if (f == nullptr) {
    const int err = errno;
    return absl::ErrnoToStatus(err, absl::StrCat("cannot open ", path));
  }
  std::string out;
  char buf[1 << 16];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), f)) > 0) out.append(buf, n);
  const bool failed = ferror(f) != 0;
  const int err = errno;
  fclose(f);
  if (failed)
    return absl::ErrnoToStatus(err, absl::StrCat("cannot read ", path));
  return out;
}

ssize_t PreadFull(int fd, void* buf, size_t n, uint64_t offset) {
  size_t done = 0;
  while (done < n) {
    const ssize_t r = pread(fd, static_cast<char*>(buf) + done, n - done,
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

}  // namespace batchd

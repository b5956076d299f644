// One fastMRI volume file; see volume.h.
#include "workloads/fastmri/volume.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/files.h"
#include "base/format.h"
#include "workloads/fastmri/hdf5_helper.h"
#include "workloads/fastmri/kspace.h"

namespace batchd {
namespace {

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() { close(fd_); }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

int64_t MtimeNs(const struct stat& st) {
  return int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
}

// Reads n bytes at offset, or says why not, naming the file.
absl::Status PreadAll(int fd, char* buf, uint64_t n, uint64_t offset,
                      const std::string& path) {
  const ssize_t got = PreadFull(fd, buf, n, offset);
  if (got < 0) {
    return absl::DataLossError(absl::StrCat(
        "fastmri: cannot read ", Printable(path), ": ", strerror(errno)));
  }
  if (uint64_t(got) < n) {
    return absl::DataLossError(absl::StrCat("fastmri: ", Printable(path),
                                            ": truncated: ends before byte ",
                                            offset + n));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<FastMriVolume> IndexVolume(const DataRoot& root,
                                          const std::string& path) {
  struct stat st;
  absl::StatusOr<int> opened = root.OpenFile(path, &st);
  if (!opened.ok()) return opened.status();
  Fd fd(*opened);
  FastMriVolume v;
  v.path = path;
  v.inode = uint64_t(st.st_ino);
  v.size = uint64_t(st.st_size);
  v.mtime_ns = MtimeNs(st);
  // The owner's helper; what it says is checked again there
  // (ApplyIndexReply): a helper that a crafted file took over must not
  // steer the daemon's reads or allocations.
  absl::Status s = Hdf5Helper::For(root.access())->Index(fd.get(), &v);
  if (!s.ok()) return s;
  return v;
}

absl::Status ReadVolumeSlice(const DataRoot& root, const FastMriVolume& v,
                             uint32_t slice, std::string* bytes) {
  if (slice >= v.slices) {
    return absl::OutOfRangeError(absl::StrCat("fastmri: slice ", slice, " of ",
                                              v.slices, " in ", v.path));
  }
  struct stat st;
  absl::StatusOr<int> opened = root.OpenFile(v.path, &st);
  if (!opened.ok()) return opened.status();
  Fd fd(*opened);
  if (uint64_t(st.st_ino) != v.inode || uint64_t(st.st_size) != v.size ||
      MtimeNs(st) != v.mtime_ns) {
    return absl::DataLossError(absl::StrCat(
        "fastmri: ", Printable(v.path),
        " changed since the stream indexed it (another file, size or "
        "modification time); open the stream again"));
  }
  const uint64_t kbytes = v.KspaceSliceBytes();
  const uint64_t tbytes = FastMriVolume::kTargetSliceBytes;
  bytes->resize(kbytes + tbytes);
  char* buf = &(*bytes)[0];
  if (!v.contiguous) {
    return Hdf5Helper::For(root.access())->Read(fd.get(), v, slice, buf);
  }
  absl::Status s = PreadAll(fd.get(), buf, kbytes,
                            v.kspace_offset + uint64_t(slice) * kbytes, v.path);
  if (!s.ok()) return s;
  return PreadAll(fd.get(), buf + kbytes, tbytes,
                  v.target_offset + uint64_t(slice) * tbytes, v.path);
}

}  // namespace batchd

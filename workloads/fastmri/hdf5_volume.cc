// libhdf5's part of reading a fastMRI volume; see hdf5_volume.h.
#include "workloads/fastmri/hdf5_volume.h"

#include <H5PLpublic.h>
#include <hdf5.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "base/format.h"
#include "workloads/fastmri/kspace.h"

namespace batchd {
namespace {

bool skip_indirection_checks = false;

// An HDF5 identifier, closed on scope exit.
class Hid {
 public:
  Hid(hid_t id, herr_t (*close)(hid_t)) : id_(id), close_(close) {}
  ~Hid() {
    if (id_ >= 0) close_(id_);
  }
  Hid(const Hid&) = delete;
  Hid& operator=(const Hid&) = delete;
  hid_t get() const { return id_; }
  bool ok() const { return id_ >= 0; }
  void reset(hid_t id) {
    if (id_ >= 0) close_(id_);
    id_ = id;
  }

 private:
  hid_t id_;
  herr_t (*close_)(hid_t);
};

// The innermost message of the calling thread's HDF5 error stack that
// says something ("truncated file: eof = ...", "file signature not found").
std::string Hdf5Message() {
  std::string out;
  H5Ewalk2(
      H5E_DEFAULT, H5E_WALK_UPWARD,
      [](unsigned, const H5E_error2_t* e, void* data) -> herr_t {
        auto* s = static_cast<std::string*>(data);
        if (s->empty() && e->desc != nullptr) *s = e->desc;
        return 0;
      },
      &out);
  H5Eclear2(H5E_DEFAULT);
  return out.empty() ? "no detail" : out;
}

absl::Status Bad(const std::string& path, const std::string& what) {
  return absl::DataLossError(
      absl::StrCat("fastmri: ", Printable(path), ": ", what));
}

// libhdf5's file-image callbacks that hand the library our mapping itself
// at every step (the property list's copy, the driver's buffer) and never
// copy, grow or free it: `udata` is the Mapping.
struct Mapping {
  void* data = MAP_FAILED;
  size_t size = 0;
};

void* ImageMalloc(size_t size, H5FD_file_image_op_t op, void* udata) {
  const Mapping* m = static_cast<const Mapping*>(udata);
  const bool handed = op == H5FD_FILE_IMAGE_OP_PROPERTY_LIST_SET ||
                      op == H5FD_FILE_IMAGE_OP_PROPERTY_LIST_COPY ||
                      op == H5FD_FILE_IMAGE_OP_FILE_OPEN;
  return handed && size == m->size ? m->data : nullptr;
}
void* ImageMemcpy(void* dest, const void* src, size_t, H5FD_file_image_op_t,
                  void*) {
  return dest == src ? dest : nullptr;  // only "copies" onto itself
}
void* ImageRealloc(void*, size_t, H5FD_file_image_op_t, void*) {
  return nullptr;  // read-only: never grown
}
herr_t ImageFree(void*, H5FD_file_image_op_t, void*) { return 0; }
void* UdataCopy(void* udata) { return udata; }
herr_t UdataFree(void*) { return 0; }

// Fails every external link libhdf5 would follow.
herr_t RefuseExternalLink(const char*, const char*, const char*, const char*,
                          unsigned*, hid_t, void*) {
  return -1;
}

// A volume open in libhdf5 from its descriptor: mapped read-only, opened
// as a file image under a name of no file (the core driver does not open
// one), closed strongly (every object of it) before the mapping goes.
class Volume {
 public:
  Volume() = default;
  ~Volume() {
    file_.reset(-1);
    fapl_.reset(-1);
    if (map_.data != MAP_FAILED) munmap(map_.data, map_.size);
  }
  Volume(const Volume&) = delete;
  Volume& operator=(const Volume&) = delete;

  absl::Status Open(int fd, uint64_t size, const std::string& path) {
    // HDF5's error stack (and whether it prints) is per thread.
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
    // Plugins are libraries loaded by name; no volume of ours needs one.
    H5PLset_loading_state(0);
    // fstat(2) itself: glibc's fstat is fstatat(2) on a name, which the
    // helper's filter refuses.
    struct stat st;
    if (syscall(SYS_fstat, fd, &st) != 0 || !S_ISREG(st.st_mode)) {
      return Bad(path, "not a regular file the HDF5 helper can read");
    }
    if (uint64_t(st.st_size) != size) {
      return Bad(path, "changed while being read (its size differs)");
    }
    if (size == 0) return Bad(path, "not an HDF5 file (it is empty)");
    void* p = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      return Bad(path, absl::StrCat("cannot be mapped: ", strerror(errno)));
    }
    map_.data = p;
    map_.size = size;
    fapl_.reset(H5Pcreate(H5P_FILE_ACCESS));
    H5FD_file_image_callbacks_t callbacks = {
        ImageMalloc, ImageMemcpy, ImageRealloc, ImageFree,
        UdataCopy,   UdataFree,   &map_};
    if (!fapl_.ok() || H5Pset_fapl_core(fapl_.get(), 1 << 20, false) < 0 ||
        H5Pset_fclose_degree(fapl_.get(), H5F_CLOSE_STRONG) < 0 ||
        H5Pset_file_image_callbacks(fapl_.get(), &callbacks) < 0 ||
        H5Pset_file_image(fapl_.get(), map_.data, map_.size) < 0) {
      return Bad(path, absl::StrCat("libhdf5 refused the file image (",
                                    Hdf5Message(), ")"));
    }
    // A name per open: libhdf5 shares files opened under one name.
    static std::atomic<uint64_t> opened{0};
    const std::string name =
        absl::StrCat("batchd-volume-image-", getpid(), "-", opened++);
    file_.reset(H5Fopen(name.c_str(), H5F_ACC_RDONLY, fapl_.get()));
    if (!file_.ok()) {
      return Bad(path, absl::StrCat("not an HDF5 file HDF5 can open (",
                                    Hdf5Message(), ")"));
    }
    return absl::OkStatus();
  }

  hid_t file() const { return file_.get(); }

 private:
  Mapping map_;
  Hid fapl_{-1, H5Pclose};
  Hid file_{-1, H5Fclose};
};

// Opens the dataset `name` of the volume, which must be stored in the file
// itself (hdf5_volume.h), into *out; its creation property list into
// *dcpl.
absl::Status OpenStored(const Volume& volume, const char* name,
                        const std::string& path, Hid* out, Hid* dcpl) {
  Hid lapl(H5Pcreate(H5P_DATASET_ACCESS), H5Pclose);
  if (!lapl.ok() ||
      (!skip_indirection_checks &&
       H5Pset_elink_cb(lapl.get(), RefuseExternalLink, nullptr) < 0)) {
    return Bad(path, "libhdf5 cannot make an access property list");
  }
  if (H5Lexists(volume.file(), name, lapl.get()) <= 0) {
    H5Eclear2(H5E_DEFAULT);
    return Bad(path, absl::StrCat("no dataset '", name,
                                  "' (a fastMRI volume holds kspace, "
                                  "reconstruction_esc and the attribute "
                                  "max)"));
  }
  H5L_info_t link;
  if (H5Lget_info(volume.file(), name, &link, lapl.get()) < 0) {
    return Bad(path, absl::StrCat("the link '", name, "' cannot be read (",
                                  Hdf5Message(), ")"));
  }
  if (!skip_indirection_checks && link.type != H5L_TYPE_HARD) {
    const char* what = link.type == H5L_TYPE_SOFT ? "a soft link"
                       : link.type == H5L_TYPE_EXTERNAL
                           ? "an external link (to another file)"
                           : "a user-defined link";
    return Bad(path, absl::StrCat("'", name, "' is ", what,
                                  "; batchd reads only datasets stored in "
                                  "the volume itself"));
  }
  out->reset(H5Dopen2(volume.file(), name, lapl.get()));
  if (!out->ok()) {
    return Bad(path, absl::StrCat("'", name, "' is not a dataset (",
                                  Hdf5Message(), ")"));
  }
  dcpl->reset(H5Dget_create_plist(out->get()));
  const H5D_layout_t layout =
      dcpl->ok() ? H5Pget_layout(dcpl->get()) : H5D_LAYOUT_ERROR;
  const int external = dcpl->ok() ? H5Pget_external_count(dcpl->get()) : -1;
  if (layout == H5D_LAYOUT_ERROR || external < 0) {
    return Bad(path, absl::StrCat("the storage of '", name,
                                  "' cannot be read (", Hdf5Message(), ")"));
  }
  if (!skip_indirection_checks && layout == H5D_VIRTUAL) {
    return Bad(path, absl::StrCat("dataset '", name,
                                  "' is a virtual dataset (its data mapped "
                                  "from other datasets and files); batchd "
                                  "reads only data stored in the volume "
                                  "itself"));
  }
  if (!skip_indirection_checks && external != 0) {
    return Bad(path, absl::StrCat("dataset '", name,
                                  "' keeps its data in other files (HDF5 "
                                  "external storage); batchd reads only "
                                  "data stored in the volume itself"));
  }
  if (layout == H5D_CHUNKED) {
    hsize_t chunk[H5S_MAX_RANK];
    const int rank = H5Pget_chunk(dcpl->get(), H5S_MAX_RANK, chunk);
    Hid type(H5Dget_type(out->get()), H5Tclose);
    uint64_t bytes = type.ok() ? H5Tget_size(type.get()) : 0;
    for (int i = 0; i < rank && bytes != 0; ++i) {
      bytes = chunk[i] != 0 && bytes <= kMaxChunkBytes / chunk[i]
                  ? bytes * chunk[i]
                  : kMaxChunkBytes + 1;
    }
    if (rank < 1 || bytes == 0 || bytes > kMaxChunkBytes) {
      return Bad(path, absl::StrCat("dataset '", name, "' is stored in ",
                                    "chunks of more than ",
                                    HumanBytes(double(kMaxChunkBytes)),
                                    " (libhdf5 reads a whole chunk for any "
                                    "part of it)"));
    }
  }
  return absl::OkStatus();
}

// The dataset's dimensions, if it is a dataset of rank 3.
absl::Status Dims3(const std::string& path, hid_t dataset, const char* name,
                   hsize_t dims[3]) {
  Hid space(H5Dget_space(dataset), H5Sclose);
  if (!space.ok() || H5Sget_simple_extent_ndims(space.get()) != 3) {
    return Bad(path, absl::StrCat("dataset '", name,
                                  "' is not 3-dimensional [slices, rows, "
                                  "columns]"));
  }
  H5Sget_simple_extent_dims(space.get(), dims, nullptr);
  return absl::OkStatus();
}

bool IsFloat32(hid_t type) {
  return H5Tget_class(type) == H5T_FLOAT && H5Tget_size(type) == 4;
}

}  // namespace

void SkipIndirectionChecksForTesting(bool skip) {
  skip_indirection_checks = skip;
}

absl::Status Hdf5IndexVolume(int fd, const std::string& path,
                             FastMriVolume* v) {
  Volume volume;
  absl::Status st = volume.Open(fd, v->size, path);
  if (!st.ok()) return st;
  Hid kspace(-1, H5Dclose), target(-1, H5Dclose);
  Hid kplist(-1, H5Pclose), tplist(-1, H5Pclose);
  // Both names exist before either is opened: a volume without its target
  // is named as such.
  for (const char* name : {"kspace", "reconstruction_esc"}) {
    if (H5Lexists(volume.file(), name, H5P_DEFAULT) <= 0) {
      H5Eclear2(H5E_DEFAULT);
      return Bad(path, absl::StrCat("no dataset '", name,
                                    "' (a fastMRI volume holds kspace, "
                                    "reconstruction_esc and the attribute "
                                    "max)"));
    }
  }
  st = OpenStored(volume, "kspace", path, &kspace, &kplist);
  if (st.ok()) {
    st = OpenStored(volume, "reconstruction_esc", path, &target, &tplist);
  }
  if (!st.ok()) return st;
  Hid ktype(H5Dget_type(kspace.get()), H5Tclose);
  bool complex64 = ktype.ok() && H5Tget_class(ktype.get()) == H5T_COMPOUND &&
                   H5Tget_nmembers(ktype.get()) == 2;
  bool little_endian_pairs = complex64 && H5Tget_size(ktype.get()) == 8;
  for (unsigned i = 0; complex64 && i < 2; ++i) {
    Hid member(H5Tget_member_type(ktype.get(), i), H5Tclose);
    complex64 = member.ok() && IsFloat32(member.get());
    little_endian_pairs = little_endian_pairs && complex64 &&
                          H5Tequal(member.get(), H5T_IEEE_F32LE) > 0 &&
                          H5Tget_member_offset(ktype.get(), i) == 4 * i;
  }
  if (!complex64) {
    return Bad(path,
               "dataset 'kspace' is not complex64 (h5py's compound "
               "of two float32)");
  }
  Hid ttype(H5Dget_type(target.get()), H5Tclose);
  if (!ttype.ok() || H5Tget_class(ttype.get()) != H5T_FLOAT) {
    return Bad(path, "dataset 'reconstruction_esc' is not floating point");
  }
  hsize_t kd[3], td[3];
  absl::Status st3 = Dims3(path, kspace.get(), "kspace", kd);
  if (!st3.ok()) return st3;
  st3 = Dims3(path, target.get(), "reconstruction_esc", td);
  if (!st3.ok()) return st3;
  if (kd[1] != hsize_t(kFastMriRows) || kd[2] < hsize_t(kFastMriMinWidth) ||
      kd[2] > hsize_t(kFastMriMaxWidth)) {
    return Bad(path,
               absl::StrCat("kspace is [", kd[0], ", ", kd[1], ", ", kd[2],
                            "]; AlgoPerf's volumes are [slices, ", kFastMriRows,
                            ", columns] with ", kFastMriMinWidth, " to ",
                            kFastMriMaxWidth, " columns"));
  }
  if (td[0] != kd[0] || td[1] != hsize_t(kFastMriCrop) ||
      td[2] != hsize_t(kFastMriCrop)) {
    return Bad(path, absl::StrCat("reconstruction_esc is [", td[0], ", ", td[1],
                                  ", ", td[2], "]; it must be [", kd[0],
                                  ", 320, 320] (one 320 x 320 target "
                                  "per k-space slice)"));
  }
  // A slice is at least a byte of the file (chunks never stored read as
  // fill values: a small file could claim any number of slices).
  if (kd[0] > UINT32_MAX || kd[0] > v->size) {
    return Bad(
        path, absl::StrCat("claims ", kd[0], " slices in ", v->size, " bytes"));
  }
  v->slices = uint32_t(kd[0]);
  v->width = uint32_t(kd[2]);

  if (H5Aexists(volume.file(), "max") > 0) {
    Hid attr(H5Aopen(volume.file(), "max", H5P_DEFAULT), H5Aclose);
    Hid aspace(attr.ok() ? H5Aget_space(attr.get()) : -1, H5Sclose);
    Hid atype(attr.ok() ? H5Aget_type(attr.get()) : -1, H5Tclose);
    double max = 0;
    const bool numeric =
        atype.ok() && (H5Tget_class(atype.get()) == H5T_FLOAT ||
                       H5Tget_class(atype.get()) == H5T_INTEGER);
    if (!aspace.ok() || !numeric ||
        H5Sget_simple_extent_npoints(aspace.get()) != 1 ||
        H5Aread(attr.get(), H5T_NATIVE_DOUBLE, &max) < 0) {
      return Bad(path, "the attribute 'max' is not one number");
    }
    v->volume_max = float(max);
  }
  H5Eclear2(H5E_DEFAULT);

  // Where the two arrays lie, if HDF5 stored them as plain arrays.
  const haddr_t koff = H5Dget_offset(kspace.get());
  const haddr_t toff = H5Dget_offset(target.get());
  H5Eclear2(H5E_DEFAULT);
  v->contiguous = little_endian_pairs &&
                  H5Tequal(ttype.get(), H5T_IEEE_F32LE) > 0 &&
                  H5Pget_layout(kplist.get()) == H5D_CONTIGUOUS &&
                  H5Pget_layout(tplist.get()) == H5D_CONTIGUOUS &&
                  H5Pget_external_count(kplist.get()) == 0 &&
                  H5Pget_external_count(tplist.get()) == 0 &&
                  koff != HADDR_UNDEF && toff != HADDR_UNDEF;
  if (v->contiguous) {
    const uint64_t kbytes = uint64_t(v->slices) * v->KspaceSliceBytes();
    const uint64_t tbytes =
        uint64_t(v->slices) * FastMriVolume::kTargetSliceBytes;
    if (koff > v->size || kbytes > v->size - koff || toff > v->size ||
        tbytes > v->size - toff) {
      return Bad(path, absl::StrCat("truncated: its datasets end past the "
                                    "file's ",
                                    v->size, " bytes"));
    }
    v->kspace_offset = koff;
    v->target_offset = toff;
  }
  return absl::OkStatus();
}

absl::Status Hdf5ReadSlice(int fd, const FastMriVolume& v, uint32_t slice,
                           char* buf) {
  const uint64_t kbytes = v.KspaceSliceBytes();
  Volume volume;
  absl::Status st = volume.Open(fd, v.size, v.path);
  Hid kspace(-1, H5Dclose), target(-1, H5Dclose);
  Hid kplist(-1, H5Pclose), tplist(-1, H5Pclose);
  if (st.ok()) st = OpenStored(volume, "kspace", v.path, &kspace, &kplist);
  if (st.ok()) {
    st = OpenStored(volume, "reconstruction_esc", v.path, &target, &tplist);
  }
  if (!st.ok()) return st;
  Hid ktype(H5Dget_type(kspace.get()), H5Tclose);
  hsize_t kd[3], td[3];
  if (!ktype.ok() || H5Tget_nmembers(ktype.get()) != 2 ||
      !Dims3(v.path, kspace.get(), "kspace", kd).ok() ||
      !Dims3(v.path, target.get(), "reconstruction_esc", td).ok() ||
      kd[0] != v.slices || kd[2] != v.width || td[0] != v.slices) {
    return Bad(v.path, absl::StrCat("is not the volume it was when indexed (",
                                    Hdf5Message(), ")"));
  }
  // The memory type: the file's two members, by their names, as native
  // float32 pairs.
  Hid pair(H5Tcreate(H5T_COMPOUND, 8), H5Tclose);
  for (unsigned i = 0; i < 2; ++i) {
    char* name = H5Tget_member_name(ktype.get(), i);
    if (name == nullptr) return Bad(v.path, "kspace's members have no names");
    H5Tinsert(pair.get(), name, 4 * i, H5T_NATIVE_FLOAT);
    H5free_memory(name);
  }
  struct Part {
    hid_t dataset;
    hid_t type;
    hsize_t rows, cols;
    char* out;
  };
  const Part parts[] = {
      {kspace.get(), pair.get(), hsize_t(kFastMriRows), v.width, buf},
      {target.get(), H5T_NATIVE_FLOAT, hsize_t(kFastMriCrop),
       hsize_t(kFastMriCrop), buf + kbytes}};
  for (const Part& p : parts) {
    Hid fspace(H5Dget_space(p.dataset), H5Sclose);
    const hsize_t start[3] = {slice, 0, 0}, count[3] = {1, p.rows, p.cols};
    const hsize_t flat = p.rows * p.cols;
    Hid mspace(H5Screate_simple(1, &flat, nullptr), H5Sclose);
    if (!fspace.ok() || !mspace.ok() ||
        H5Sselect_hyperslab(fspace.get(), H5S_SELECT_SET, start, nullptr, count,
                            nullptr) < 0 ||
        H5Dread(p.dataset, p.type, mspace.get(), fspace.get(), H5P_DEFAULT,
                p.out) < 0) {
      return Bad(v.path, absl::StrCat("cannot read slice ", slice, " (",
                                      Hdf5Message(), ")"));
    }
  }
  return absl::OkStatus();
}

}  // namespace batchd

// libhdf5's part of reading a fastMRI volume; see hdf5_volume.h.
#include "workloads/fastmri/hdf5_volume.h"

#include <hdf5.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "base/format.h"
#include "workloads/fastmri/kspace.h"

namespace batchd {
namespace {

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

// Opens the file behind `fd` with HDF5, read-only and without file locks;
// on failure, *error says why.
hid_t OpenHdf5(int fd, std::string* error) {
  // HDF5's error stack (and whether it prints) is per thread.
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  Hid fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
  if (!fapl.ok()) return -1;
  H5Pset_file_locking(fapl.get(), false, true);
  const std::string proc = absl::StrCat("/proc/self/fd/", fd);
  const hid_t file = H5Fopen(proc.c_str(), H5F_ACC_RDONLY, fapl.get());
  // Read before closing fapl: every HDF5 call clears the stack.
  if (file < 0) *error = Hdf5Message();
  return file;
}

absl::Status Bad(const std::string& path, const std::string& what) {
  return absl::DataLossError(
      absl::StrCat("fastmri: ", Printable(path), ": ", what));
}

// The dataset `name`'s dimensions, if it is a dataset of rank 3.
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

absl::Status Hdf5IndexVolume(int fd, const std::string& path,
                             FastMriVolume* v) {
  std::string error;
  Hid file(OpenHdf5(fd, &error), H5Fclose);
  if (!file.ok()) {
    return Bad(path,
               absl::StrCat("not an HDF5 file HDF5 can open (", error, ")"));
  }
  for (const char* name : {"kspace", "reconstruction_esc"}) {
    if (H5Lexists(file.get(), name, H5P_DEFAULT) <= 0) {
      H5Eclear2(H5E_DEFAULT);
      return Bad(path, absl::StrCat("no dataset '", name,
                                    "' (a fastMRI volume holds kspace, "
                                    "reconstruction_esc and the attribute "
                                    "max)"));
    }
  }
  Hid kspace(H5Dopen2(file.get(), "kspace", H5P_DEFAULT), H5Dclose);
  Hid target(H5Dopen2(file.get(), "reconstruction_esc", H5P_DEFAULT), H5Dclose);
  if (!kspace.ok() || !target.ok()) {
    return Bad(path, absl::StrCat("kspace or reconstruction_esc is not a "
                                  "dataset (",
                                  Hdf5Message(), ")"));
  }
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
  if (kd[0] > UINT32_MAX) return Bad(path, "too many slices");
  v->slices = uint32_t(kd[0]);
  v->width = uint32_t(kd[2]);

  if (H5Aexists(file.get(), "max") > 0) {
    Hid attr(H5Aopen(file.get(), "max", H5P_DEFAULT), H5Aclose);
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
  Hid kplist(H5Dget_create_plist(kspace.get()), H5Pclose);
  Hid tplist(H5Dget_create_plist(target.get()), H5Pclose);
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
  std::string error;
  Hid file(OpenHdf5(fd, &error), H5Fclose);
  Hid kspace(file.ok() ? H5Dopen2(file.get(), "kspace", H5P_DEFAULT) : -1,
             H5Dclose);
  Hid target(
      file.ok() ? H5Dopen2(file.get(), "reconstruction_esc", H5P_DEFAULT) : -1,
      H5Dclose);
  Hid ktype(kspace.ok() ? H5Dget_type(kspace.get()) : -1, H5Tclose);
  if (!target.ok() || !ktype.ok() || H5Tget_nmembers(ktype.get()) != 2) {
    if (error.empty()) error = Hdf5Message();
    return Bad(v.path, absl::StrCat("cannot be read again (", error, ")"));
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

// The fastmri workload: TF's stateless uniforms, AlgoPerf's mask, the
// k-space transform against a direct DFT, HDF5 volumes as h5py lays them
// out (contiguous and chunked) and hostile ones, splits, options and
// FillItem.
#include "workloads/fastmri/fastmri.h"

#include <hdf5.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <complex>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testutil.h"
#include "workloads/fastmri/hdf5_helper.h"
#include "workloads/fastmri/kspace.h"
#include "workloads/fastmri/volume.h"
#include "workloads/registry.h"

namespace batchd {
namespace {

using ::testing::HasSubstr;
using testutil::TempDir;
using testutil::WriteFile;

std::vector<uint32_t> Bits(const std::vector<float>& v) {
  std::vector<uint32_t> out(v.size());
  memcpy(out.data(), v.data(), 4 * v.size());
  return out;
}

TEST(StatelessUniformTest, IsTensorFlowsBitForBit) {
  // tf.random.stateless_uniform((6,), seed, dtype=tf.float32) on the CPU
  // (TensorFlow 2.x, printed as the floats' bits).
  struct Case {
    int64_t s0, s1;
    std::vector<uint32_t> want;
  };
  const Case cases[] = {
      {0,
       0,
       {0x3e581470, 0x3f34bd12, 0x3f4cd0f4, 0x3f4552a4, 0x3ec6f518,
        0x3f5ecfe0}},
      {123,
       -7,
       {0x3ea27074, 0x3eb61a68, 0x3f2881d6, 0x3f7fa79c, 0x3d461f80,
        0x3e919550}},
      {int64_t(1) << 40,
       5,
       {0x3f6438c4, 0x3f38226c, 0x3f7578b4, 0x3f591922, 0x3f784716,
        0x3f301c60}},
  };
  for (const Case& c : cases) {
    std::vector<float> u(6);
    StatelessUniform(c.s0, c.s1, 6, u.data());
    EXPECT_EQ(Bits(u), c.want) << c.s0 << ", " << c.s1;
  }
  // A prefix of a longer stream is the shorter stream.
  std::vector<float> longer(373);
  StatelessUniform(0, 0, 373, longer.data());
  longer.resize(6);
  EXPECT_EQ(Bits(longer), cases[0].want);
}

TEST(ColumnMaskTest, IsAlgoPerfsCentreAndAcceleration) {
  std::vector<float> u(368);
  StatelessUniform(0, 0, 368, u.data());
  const std::vector<uint8_t> mask = ColumnMask(u.data(), 368);
  // int(368 * 0.08) = 29 centre columns from (368 - 29 + 1) // 2 = 170.
  for (int j = 170; j < 199; ++j) EXPECT_EQ(mask[j], 1) << j;
  int kept = 0;
  for (uint8_t m : mask) kept += m;
  EXPECT_EQ(kept, 97);  // AlgoPerf's eval mask keeps 97 of 368 columns
  // Outside the centre, a column is kept exactly where u < prob.
  const float prob = (368.0f / 4.0f - 29.0f) / (368.0f - 29.0f);
  for (int j = 0; j < 368; ++j) {
    if (j >= 170 && j < 199) continue;
    EXPECT_EQ(mask[j], u[j] < prob ? 1 : 0) << j;
  }
}

TEST(TrainUniformTest, IsOneFixedStreamPerSeedAndSlice) {
  std::vector<float> a(372), b(372), c(372), d(372);
  TrainUniform(7, 3, 372, a.data());
  TrainUniform(7, 3, 372, b.data());
  TrainUniform(7, 4, 372, c.data());
  TrainUniform(8, 3, 372, d.data());
  EXPECT_EQ(Bits(a), Bits(b));
  EXPECT_NE(Bits(a), Bits(c));
  EXPECT_NE(Bits(a), Bits(d));
  // Uniform on [0, 1): over many slices, AlgoPerf's share of kept columns.
  double kept = 0, n = 0, sum = 0;
  for (uint64_t s = 0; s < 200; ++s) {
    TrainUniform(1, s, 372, a.data());
    for (float x : a) {
      ASSERT_GE(x, 0.0f);
      ASSERT_LT(x, 1.0f);
      sum += x;
    }
    for (uint8_t m : ColumnMask(a.data(), 372)) kept += m;
    n += 372;
  }
  EXPECT_NEAR(sum / n, 0.5, 0.01);
  EXPECT_NEAR(kept / n, 0.25, 0.01);  // acceleration 4
}

// The transform re-derived in double precision: the centred orthonormal
// inverse DFT written as its sum, evaluated only at the crop.
void DirectTransform(const std::vector<std::complex<float>>& k, int width,
                     const std::vector<uint8_t>& mask,
                     std::vector<double>* magnitude) {
  const int rows = 640;
  // Centred inverse DFT: x[p] = sum_u X[u] e^{2 pi i (u - n/2)(p - n/2)/n}
  // for even n, with n/2 rounded down for odd n and ifftshift/fftshift's
  // asymmetric halves: index u of the stored array is frequency
  // u - floor(n/2), output index p is position p - floor(n/2) (fftshift of
  // an ifft of an ifftshifted array).
  auto term = [](int n, int u, int p) {
    const double f = double(u - n / 2), x = double(p - n / 2);
    const double a = 2 * M_PI * f * x / n;
    return std::complex<double>(std::cos(a), std::sin(a));
  };
  const int r0 = 160, c0 = (width - 320) / 2;
  // First over rows, for each kept column, at the crop's rows.
  std::vector<std::complex<double>> cols(size_t(width) * 320);
  for (int c = 0; c < width; ++c) {
    if (!mask[c]) continue;
    for (int p = 0; p < 320; ++p) {
      std::complex<double> s = 0;
      for (int u = 0; u < rows; ++u) {
        s += std::complex<double>(k[size_t(u) * width + c]) *
             term(rows, u, p + r0);
      }
      cols[size_t(c) * 320 + p] = s;
    }
  }
  magnitude->assign(320 * 320, 0);
  const double norm = 1.0 / std::sqrt(double(rows) * width);
  for (int p = 0; p < 320; ++p) {
    for (int q = 0; q < 320; ++q) {
      std::complex<double> s = 0;
      for (int c = 0; c < width; ++c) {
        if (mask[c]) s += cols[size_t(c) * 320 + p] * term(width, c, q + c0);
      }
      (*magnitude)[size_t(p) * 320 + q] = std::abs(s) * norm;
    }
  }
}

TEST(TransformSliceTest, MatchesTheCentredInverseDftAtTheCrop) {
  for (int width : {368, 369}) {
    SCOPED_TRACE(width);
    std::mt19937 gen(width);
    std::normal_distribution<float> normal(0, 1e-4f);
    std::vector<std::complex<float>> k(size_t(640) * width);
    for (auto& v : k) v = {normal(gen), normal(gen)};
    std::vector<float> target(320 * 320);
    for (float& t : target) t = std::abs(normal(gen));
    std::vector<float> u(width);
    TrainUniform(5, 9, width, u.data());
    const std::vector<uint8_t> mask = ColumnMask(u.data(), width);
    std::vector<float> inputs(320 * 320), targets(320 * 320);
    SliceOut out{inputs.data(), targets.data()};
    ASSERT_TRUE(TransformSlice(reinterpret_cast<const float*>(k.data()), width,
                               mask.data(), target.data(), &out)
                    .ok());
    std::vector<double> mag;
    DirectTransform(k, width, mask, &mag);
    double mean = 0, var = 0;
    for (double m : mag) mean += m;
    mean /= mag.size();
    for (double m : mag) var += (m - mean) * (m - mean);
    const double sd = std::sqrt(var / mag.size());
    EXPECT_NEAR(out.mean, mean, 1e-5 * mean);
    EXPECT_NEAR(out.std, sd, 1e-5 * sd);
    double worst = 0, worst_target = 0;
    int clipped = 0;
    for (size_t i = 0; i < mag.size(); ++i) {
      const double want = std::clamp((mag[i] - mean) / sd, -6.0, 6.0);
      worst = std::max(worst, std::abs(inputs[i] - want));
      const double want_t = std::clamp((target[i] - mean) / sd, -6.0, 6.0);
      worst_target = std::max(worst_target, std::abs(targets[i] - want_t));
      clipped += std::abs(want_t) == 6.0;
    }
    // float32 FFTs of 640 and ~368 points: relative error a few 1e-7 of
    // the image's scale, a few 1e-6 once divided by its std.
    EXPECT_LT(worst, 2e-5);
    EXPECT_LT(worst_target, 2e-5);
    EXPECT_GT(clipped, 0);  // the clip is exercised
  }
}

TEST(TransformSliceTest, RefusesNonFiniteValuesNamingWhere) {
  std::vector<float> k(size_t(640) * 368 * 2, 1e-3f), target(320 * 320, 0.5f);
  k[2 * (5 * 368 + 7) + 1] = NAN;
  std::vector<uint8_t> mask(368, 1);
  std::vector<float> a(320 * 320), b(320 * 320);
  SliceOut out{a.data(), b.data()};
  absl::Status st =
      TransformSlice(k.data(), 368, mask.data(), target.data(), &out);
  EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(st.message(), HasSubstr("row 5 column 7"));
  k[2 * (5 * 368 + 7) + 1] = 0;
  target[3] = INFINITY;
  EXPECT_THAT(
      TransformSlice(k.data(), 368, mask.data(), target.data(), &out).message(),
      HasSubstr("reconstruction_esc value at row 0 column 3"));
}

// ---------------------------------------------------------------------------
// Volumes written with the HDF5 library as h5py writes them.

struct VolumeSpec {
  int slices = 2;
  int rows = 640;
  int width = 368;
  int target_slices = -1;  // default: slices
  bool chunked = false;
  bool with_target = true;
  bool with_max = true;
  bool max_is_text = false;
  double max = 0.25;
  uint32_t seed = 1;
};

// The k-space values of slice s, column c, row r (deterministic).
std::vector<float> KspaceValues(const VolumeSpec& v) {
  std::vector<float> out(size_t(v.slices) * v.rows * v.width * 2);
  std::mt19937 gen(v.seed);
  std::normal_distribution<float> normal(0, 1e-4f);
  for (float& x : out) x = normal(gen);
  return out;
}

std::vector<float> TargetValues(const VolumeSpec& v, int slices) {
  std::vector<float> out(size_t(slices) * 320 * 320);
  for (size_t i = 0; i < out.size(); ++i) out[i] = float(i % 977) * 1e-6f;
  return out;
}

void WriteVolume(const std::string& path, const VolumeSpec& v) {
  hid_t file = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  ASSERT_GE(file, 0);
  hid_t pair = H5Tcreate(H5T_COMPOUND, 8);
  H5Tinsert(pair, "r", 0, H5T_IEEE_F32LE);
  H5Tinsert(pair, "i", 4, H5T_IEEE_F32LE);
  auto write = [&](const char* name, hid_t type, hsize_t d0, hsize_t d1,
                   hsize_t d2, const void* data) {
    const hsize_t dims[3] = {d0, d1, d2};
    hid_t space = H5Screate_simple(3, dims, nullptr);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    if (v.chunked) {
      const hsize_t chunk[3] = {1, d1 / 4 > 0 ? d1 / 4 : 1, d2};
      H5Pset_chunk(dcpl, 3, chunk);
      H5Pset_deflate(dcpl, 1);
    }
    hid_t ds =
        H5Dcreate2(file, name, type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    H5Dwrite(ds, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data);
    H5Dclose(ds);
    H5Pclose(dcpl);
    H5Sclose(space);
  };
  const std::vector<float> k = KspaceValues(v);
  write("kspace", pair, v.slices, v.rows, v.width, k.data());
  if (v.with_target) {
    const int ts = v.target_slices < 0 ? v.slices : v.target_slices;
    const std::vector<float> t = TargetValues(v, ts);
    write("reconstruction_esc", H5T_IEEE_F32LE, ts, 320, 320, t.data());
  }
  if (v.with_max) {
    hid_t scalar = H5Screate(H5S_SCALAR);
    if (v.max_is_text) {
      hid_t str = H5Tcopy(H5T_C_S1);
      H5Tset_size(str, 4);
      hid_t a = H5Acreate2(file, "max", str, scalar, H5P_DEFAULT, H5P_DEFAULT);
      H5Awrite(a, str, "huge");
      H5Aclose(a);
      H5Tclose(str);
    } else {
      hid_t a = H5Acreate2(file, "max", H5T_IEEE_F64LE, scalar, H5P_DEFAULT,
                           H5P_DEFAULT);
      H5Awrite(a, H5T_NATIVE_DOUBLE, &v.max);
      H5Aclose(a);
    }
    H5Sclose(scalar);
  }
  H5Tclose(pair);
  H5Fclose(file);
}

class VolumeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto root = DataRoot::Open(dir_.path());
    ASSERT_TRUE(root.ok()) << root.status();
    root_ = *root;
  }
  std::string Write(const std::string& name, const VolumeSpec& v) {
    const std::string path = dir_.path() + "/" + name;
    WriteVolume(path, v);
    return path;
  }
  TempDir dir_{"fastmri"};
  std::shared_ptr<const DataRoot> root_;
};

TEST_F(VolumeTest, ContiguousAndChunkedVolumesReadTheSameSlices) {
  VolumeSpec spec;
  spec.slices = 3;
  spec.width = 369;
  const std::string plain = Write("plain.h5", spec);
  spec.chunked = true;
  const std::string packed = Write("packed.h5", spec);
  auto a = IndexVolume(*root_, plain);
  auto b = IndexVolume(*root_, packed);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_TRUE(a->contiguous);   // two pread(2)s
  EXPECT_FALSE(b->contiguous);  // through the HDF5 library
  EXPECT_EQ(a->slices, 3u);
  EXPECT_EQ(a->width, 369u);
  EXPECT_EQ(a->volume_max, 0.25f);
  const std::vector<float> k = KspaceValues(spec);
  const std::vector<float> t = TargetValues(spec, 3);
  const size_t kslice = size_t(640) * 369 * 2;
  for (uint32_t s = 0; s < 3; ++s) {
    std::string x, y;
    ASSERT_TRUE(ReadVolumeSlice(*root_, *a, s, &x).ok());
    ASSERT_TRUE(ReadVolumeSlice(*root_, *b, s, &y).ok());
    ASSERT_EQ(x.size(),
              a->KspaceSliceBytes() + FastMriVolume::kTargetSliceBytes);
    EXPECT_EQ(x, y);
    EXPECT_EQ(memcmp(x.data(), &k[s * kslice], 4 * kslice), 0);
    EXPECT_EQ(memcmp(x.data() + 4 * kslice, &t[size_t(s) * 320 * 320],
                     FastMriVolume::kTargetSliceBytes),
              0);
  }
  std::string z;
  EXPECT_EQ(ReadVolumeSlice(*root_, *a, 3, &z).code(),
            absl::StatusCode::kOutOfRange);
}

TEST_F(VolumeTest, AMissingMaxIsZeroAsAlgoPerfReadsIt) {
  VolumeSpec spec;
  spec.with_max = false;
  auto v = IndexVolume(*root_, Write("nomax.h5", spec));
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->volume_max, 0.0f);
}

TEST_F(VolumeTest, VolumesThatAreNotTheReleasesAreRefusedNamingTheFile) {
  struct Case {
    std::string name;
    VolumeSpec spec;
    std::string says;
  };
  std::vector<Case> cases;
  VolumeSpec s;
  s.with_target = false;
  cases.push_back({"notarget.h5", s, "no dataset 'reconstruction_esc'"});
  s = VolumeSpec();
  s.rows = 600;
  cases.push_back({"rows.h5", s, "kspace is [2, 600, 368]"});
  s = VolumeSpec();
  s.width = 300;
  cases.push_back({"narrow.h5", s, "320 to 2048 columns"});
  s = VolumeSpec();
  s.target_slices = 1;
  cases.push_back({"slices.h5", s, "reconstruction_esc is [1, 320, 320]"});
  s = VolumeSpec();
  s.max_is_text = true;
  cases.push_back({"textmax.h5", s, "attribute 'max' is not one number"});
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string path = Write(c.name, c.spec);
    auto v = IndexVolume(*root_, path);
    ASSERT_FALSE(v.ok());
    EXPECT_EQ(v.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_THAT(v.status().message(), HasSubstr(path));
    EXPECT_THAT(v.status().message(), HasSubstr(c.says));
  }
  // Not HDF5 at all.
  const std::string junk = dir_.path() + "/junk.h5";
  WriteFile(junk, std::string(4096, 'x'));
  auto v = IndexVolume(*root_, junk);
  ASSERT_FALSE(v.ok());
  EXPECT_THAT(v.status().message(), HasSubstr("junk.h5"));
  EXPECT_THAT(v.status().message(), HasSubstr("not an HDF5 file"));
}

TEST_F(VolumeTest, ATruncatedVolumeIsRefusedAtIndexAndAtRead) {
  VolumeSpec spec;
  const std::string path = Write("cut.h5", spec);
  auto whole = IndexVolume(*root_, path);
  ASSERT_TRUE(whole.ok()) << whole.status();
  ASSERT_TRUE(whole->contiguous);
  // Cut inside the k-space of slice 1: indexing sees it from the size.
  ASSERT_EQ(truncate(path.c_str(), off_t(whole->kspace_offset +
                                         whole->KspaceSliceBytes() + 100)),
            0);
  auto cut = IndexVolume(*root_, path);
  ASSERT_FALSE(cut.ok());
  EXPECT_THAT(cut.status().message(), HasSubstr("truncated")) << cut.status();
  // A file cut after the stream indexed it is refused when read.
  std::string bytes;
  absl::Status st = ReadVolumeSlice(*root_, *whole, 1, &bytes);
  EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(st.message(), HasSubstr("changed since the stream indexed it"));
}

// libhdf5 runs in a helper process: what happens to it does not happen to
// this one.
TEST_F(VolumeTest, AHelperKilledBetweenCallsIsStartedAgain) {
  VolumeSpec spec;
  spec.chunked = true;  // read through the library too
  const std::string path = Write("v.h5", spec);
  auto v = IndexVolume(*root_, path);
  ASSERT_TRUE(v.ok()) << v.status();
  const pid_t first = Hdf5Helper::Get().pid_for_testing();
  ASSERT_GT(first, 0);
  EXPECT_NE(first, getpid());
  ASSERT_EQ(kill(first, SIGKILL), 0);
  std::string bytes;
  absl::Status read = ReadVolumeSlice(*root_, *v, 1, &bytes);
  ASSERT_TRUE(read.ok()) << read;
  const pid_t second = Hdf5Helper::Get().pid_for_testing();
  EXPECT_GT(second, 0);
  EXPECT_NE(second, first);
  const std::vector<float> k = KspaceValues(spec);
  EXPECT_EQ(memcmp(bytes.data(), &k[size_t(640) * 368 * 2], 8 * 640 * 368), 0);
}

// A volume that crashes libhdf5 or makes it hang (a test hook stands in for
// a crafted file) fails its call naming the file; the next file is served.
TEST_F(VolumeTest, AVolumeThatCrashesOrHangsTheLibraryFailsOnlyItself) {
  VolumeSpec spec;
  const std::string good = Write("good.h5", spec);
  const std::string crash = Write("batchd-test-hdf5-crash.h5", spec);
  const std::string hang = Write("batchd-test-hdf5-hang.h5", spec);
  setenv("BATCHD_TEST_HOOKS", "1", 1);
  Hdf5Helper::Get().StopForTesting();  // the next helper sees the hook
  Hdf5Helper::Get().set_timeout_for_testing(1000);
  auto crashed = IndexVolume(*root_, crash);
  ASSERT_FALSE(crashed.ok());
  EXPECT_EQ(crashed.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(crashed.status().message(), HasSubstr(crash));
  EXPECT_THAT(crashed.status().message(),
              HasSubstr("ended (signal 6, Aborted) while reading"));
  EXPECT_TRUE(IndexVolume(*root_, good).ok());
  auto hung = IndexVolume(*root_, hang);
  ASSERT_FALSE(hung.ok());
  EXPECT_THAT(hung.status().message(), HasSubstr(hang));
  EXPECT_THAT(hung.status().message(), HasSubstr("did not answer within 1 s"));
  EXPECT_TRUE(IndexVolume(*root_, good).ok());
  unsetenv("BATCHD_TEST_HOOKS");
  Hdf5Helper::Get().set_timeout_for_testing(Hdf5Helper::kCallTimeoutMs);
  Hdf5Helper::Get().StopForTesting();
  // Without the hook the same file is only a file.
  EXPECT_TRUE(IndexVolume(*root_, crash).ok());
}

// ---------------------------------------------------------------------------
// The workload.

class FastMriWorkloadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* d : {"knee_singlecoil_train", "knee_singlecoil_val"}) {
      ASSERT_EQ(mkdir((dir_.path() + "/" + d).c_str(), 0755), 0);
    }
    VolumeSpec v;
    v.slices = 2;
    WriteVolume(dir_.path() + "/knee_singlecoil_train/file1000002.h5", v);
    v.slices = 3;
    v.width = 372;
    v.seed = 2;
    WriteVolume(dir_.path() + "/knee_singlecoil_train/file1000001.h5", v);
    v.slices = 1;
    v.seed = 3;
    for (const char* f :
         {"file2000003.h5", "file2000001.h5", "file2000002.h5"}) {
      v.max += 1;
      WriteVolume(dir_.path() + "/knee_singlecoil_val/" + f, v);
    }
  }
  absl::StatusOr<std::unique_ptr<Workload>> Open(
      const std::string& split,
      std::map<std::string, std::string> options = {}) {
    return CreateWorkload(
        "fastmri",
        testutil::StreamConfig(dir_.path(), split, std::move(options), 4));
  }
  TempDir dir_{"fastmri-set"};
};

TEST_F(FastMriWorkloadTest, SplitsCountSlicesOfTheirVolumes) {
  auto train = Open("train");
  ASSERT_TRUE(train.ok()) << train.status();
  EXPECT_EQ((*train)->num_examples(), 5u);
  EXPECT_TRUE((*train)->shuffle());
  EXPECT_EQ((*train)->tensors().size(), 5u);  // no weights on train
  auto eval_train = Open("eval_train", {{"eval_train_examples", "4"}});
  ASSERT_TRUE(eval_train.ok());
  EXPECT_EQ((*eval_train)->num_examples(), 4u);
  EXPECT_FALSE((*eval_train)->shuffle());
  auto validation = Open("validation", {{"validation_files", "2"}});
  auto test = Open("test", {{"validation_files", "2"}});
  ASSERT_TRUE(validation.ok() && test.ok());
  EXPECT_EQ((*validation)->num_examples(), 2u);
  EXPECT_EQ((*test)->num_examples(), 1u);
  EXPECT_EQ((*test)->tensors().back().name, "weights");
  // All three val volumes are AlgoPerf's first 100: test is then empty.
  EXPECT_THAT(Open("test").status().message(), HasSubstr("has no volumes"));
  EXPECT_THAT(Open("train", {{"validation_file", "2"}}).status().message(),
              HasSubstr("validation_file"));
  EXPECT_FALSE(Open("validation", {{"validation_files", "0"}}).ok());
}

TEST_F(FastMriWorkloadTest, FillsSortedVolumesSlicesInOrderAndPadsWithZeros) {
  auto validation = Open("validation", {{"validation_files", "2"}});
  ASSERT_TRUE(validation.ok()) << validation.status();
  const Workload& w = **validation;
  std::vector<std::vector<uint8_t>> bufs;
  for (const TensorLayout& t : w.tensors()) bufs.emplace_back(t.ExampleBytes());
  std::vector<uint8_t*> out;
  for (auto& b : bufs) out.push_back(b.data());
  auto scalar = [&](int k) {
    float f;
    memcpy(&f, bufs[k].data(), 4);
    return f;
  };
  // Sorted: file2000001 (max 2.25) then file2000002 (3.25).
  const float maxes[] = {2.25f, 3.25f};
  for (uint64_t id = 0; id < 2; ++id) {
    ItemRef item;
    item.valid = true;
    item.id = id;
    ASSERT_TRUE(w.FillItem(item, out.data(), nullptr).ok());
    EXPECT_EQ(scalar(4), maxes[id]);
    EXPECT_EQ(scalar(5), 1.0f);
    EXPECT_GT(scalar(3), 0.0f);
  }
  ItemRef pad;
  pad.valid = false;
  ASSERT_TRUE(w.FillItem(pad, out.data(), nullptr).ok());
  for (auto& b : bufs) {
    EXPECT_EQ(b, std::vector<uint8_t>(b.size(), 0));
  }
}

TEST_F(FastMriWorkloadTest, AVolumeThatIsNotHdf5RefusesTheSplitNamingIt) {
  WriteFile(dir_.path() + "/knee_singlecoil_train/file1000003.h5", "not hdf5");
  auto w = Open("train");
  ASSERT_FALSE(w.ok());
  EXPECT_THAT(w.status().message(), HasSubstr("file1000003.h5"));
  EXPECT_THAT(Open("validation", {{"validation_files", "2"}}).status().code(),
              absl::StatusCode::kOk);  // the val volumes are fine
}

}  // namespace
}  // namespace batchd

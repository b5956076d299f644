// Tests of the imagenet workload: sources (ImageFolder order, TFRecord
// shards), tensors, determinism, padding, decode errors and options.
#include "workloads/imagenet/imagenet.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/test_images.h"
#include "tests/testutil.h"
#include "workloads/common/tfrecord.h"
#include "workloads/imagenet/image_source.h"
#include "workloads/imagenet/python_random.h"
#include "workloads/registry.h"

namespace batchd {
namespace {

using testing_images::EncodeJpeg;
using testing_images::EncodePng;
using testing_images::Picture;
using testutil::WriteFile;

class ImageNetTest : public ::testing::Test {
 protected:
  void Mkdir(const std::string& rel) {
    ASSERT_EQ(mkdir((root_ + "/" + rel).c_str(), 0755), 0) << rel;
  }
  std::string Jpeg(int i) {
    const int w = 200 + 13 * (i % 5), h = 150 + 7 * (i % 3);
    return EncodeJpeg(Picture(w, h, 3, i + 1), w, h, 3);
  }
  // train/ with classes b, a (nested), c and odd names; val/ with 2 classes.
  void MakeTree() {
    Mkdir("train");
    for (const char* d :
         {"train/n02", "train/n01", "train/n01/sub", "train/n01/sub-x",
          "train/n03", "val", "val/n01", "val/n02"}) {
      Mkdir(d);
    }
    int i = 0;
    for (const char* f :
         {"train/n02/b.JPEG", "train/n02/a.jpeg", "train/n02/C.Jpg",
          "train/n01/z.JPEG", "train/n01/sub/a.JPEG", "train/n01/sub-x/a.png",
          "train/n03/x.JPEG", "train/n03/y.JPEG", "val/n01/v1.JPEG",
          "val/n01/v2.JPEG", "val/n02/v3.JPEG"}) {
      WriteFile(root_ + "/" + f, Jpeg(i++));
    }
    WriteFile(root_ + "/train/n02/notes.txt", "not an image");
  }
  // val/'s files as tf.train.Example records, in ImageFolder order.
  void ValRecords(std::vector<std::string>* records) {
    auto folder = OpenImageFolder(root_ + "/val", false);
    ASSERT_TRUE(folder.ok());
    std::string bytes;
    for (uint64_t i = 0; i < (*folder)->size(); ++i) {
      int64_t label;
      ASSERT_TRUE((*folder)->Read(i, &bytes, &label).ok());
      records->push_back(testutil::ImageExample(bytes, label));
    }
  }
  absl::StatusOr<std::unique_ptr<Workload>> Make(
      const std::string& split, std::map<std::string, std::string> opts = {}) {
    WorkloadConfig c;
    c.data_path = root_;
    c.split = split;
    c.seed = 7;
    opts.emplace("progress", "0");
    c.options = opts;
    return CreateWorkload("imagenet", c);
  }

  testutil::TempDir dir_{"imagenet"};
  const std::string root_ = dir_.path();
};

TEST_F(ImageNetTest, ImageFolderOrderIsTorchvisions) {
  MakeTree();
  auto src = OpenImageFolder(root_ + "/train", false);
  ASSERT_TRUE(src.ok()) << src.status();
  // Classes sorted; each class walked with directories in sorted path
  // order ("n01" < "n01/sub" < "n01/sub-x"), files sorted bytewise
  // ("C.Jpg" < "a.jpeg" < "b.JPEG"), non-images skipped.
  const std::vector<std::string> want = {
      "n01/z.JPEG", "n01/sub/a.JPEG", "n01/sub-x/a.png", "n02/C.Jpg",
      "n02/a.jpeg", "n02/b.JPEG",     "n03/x.JPEG",      "n03/y.JPEG"};
  const std::vector<int64_t> labels = {0, 0, 0, 1, 1, 1, 2, 2};
  ASSERT_EQ((*src)->size(), want.size());
  std::string bytes;
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ((*src)->Describe(i), root_ + "/train/" + want[i]);
    int64_t label;
    ASSERT_TRUE((*src)->Read(i, &bytes, &label).ok());
    EXPECT_EQ(label, labels[i]);
  }
  EXPECT_EQ((*src)->classes(), (std::vector<std::string>{"n01", "n02", "n03"}));
}

TEST_F(ImageNetTest, EmptyClassOrNoClassFails) {
  Mkdir("train");
  EXPECT_EQ(OpenImageFolder(root_ + "/train", false).status().code(),
            absl::StatusCode::kNotFound);
  Mkdir("train/n01");
  Mkdir("train/n02");
  WriteFile(root_ + "/train/n01/a.JPEG", Jpeg(0));
  absl::Status st = OpenImageFolder(root_ + "/train", false).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kNotFound);
  EXPECT_NE(st.message().find("n02"), std::string::npos) << st;
}

TEST_F(ImageNetTest, TrainTensorsAndDeterminism) {
  MakeTree();
  auto w = Make("train");
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_TRUE((*w)->shuffle());
  EXPECT_EQ((*w)->num_examples(), 8u);
  ASSERT_EQ((*w)->tensors().size(), 2u);
  EXPECT_EQ((*w)->tensors()[0].name, "inputs");
  EXPECT_EQ((*w)->tensors()[0].example_shape,
            (std::vector<int64_t>{224, 224, 3}));
  EXPECT_EQ((*w)->tensors()[1].name, "targets");
  std::vector<uint8_t> a(224 * 224 * 3), b(a.size());
  int64_t ta, tb;
  WorkloadCounters counters;
  uint8_t* oa[] = {a.data(), reinterpret_cast<uint8_t*>(&ta)};
  uint8_t* ob[] = {b.data(), reinterpret_cast<uint8_t*>(&tb)};
  ItemRef ex{7, 2, 5, 3, true};
  ASSERT_TRUE((*w)->FillItem(ex, oa, &counters).ok());
  ASSERT_TRUE((*w)->FillItem(ex, ob, &counters).ok());
  EXPECT_EQ(a, b);
  EXPECT_EQ(ta, 1);  // n02/C.Jpg
  ex.epoch = 3;      // another epoch: another crop
  ASSERT_TRUE((*w)->FillItem(ex, ob, &counters).ok());
  EXPECT_NE(a, b);
  EXPECT_EQ(counters.decode_errors.load(), 0u);
}

TEST_F(ImageNetTest, NchwIsTheTransposeOfNhwc) {
  MakeTree();
  auto hwc = Make("val");
  auto chw = Make("val", {{"layout", "nchw"}});
  ASSERT_TRUE(hwc.ok() && chw.ok());
  EXPECT_EQ((*chw)->tensors()[0].example_shape,
            (std::vector<int64_t>{3, 224, 224}));
  std::vector<uint8_t> a(224 * 224 * 3), b(a.size());
  int64_t t;
  float wt;
  uint8_t* oa[] = {a.data(), reinterpret_cast<uint8_t*>(&t),
                   reinterpret_cast<uint8_t*>(&wt)};
  uint8_t* ob[] = {b.data(), reinterpret_cast<uint8_t*>(&t),
                   reinterpret_cast<uint8_t*>(&wt)};
  ItemRef ex{7, 0, 1, 1, true};
  ASSERT_TRUE((*hwc)->FillItem(ex, oa, nullptr).ok());
  ASSERT_TRUE((*chw)->FillItem(ex, ob, nullptr).ok());
  for (int c = 0; c < 3; ++c) {
    for (int i = 0; i < 224 * 224; i += 31) {
      ASSERT_EQ(a[i * 3 + c], b[c * 224 * 224 + i]);
    }
  }
}

TEST_F(ImageNetTest, EvalSplitPadsWithZerosAndWeights) {
  MakeTree();
  auto w = Make("validation");  // falls back to val/
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_FALSE((*w)->shuffle());
  EXPECT_EQ((*w)->num_examples(), 3u);
  ASSERT_EQ((*w)->tensors().size(), 3u);
  EXPECT_EQ((*w)->tensors()[2].name, "weights");
  std::vector<uint8_t> img(224 * 224 * 3, 77);
  int64_t t = 99;
  float wt = 5;
  uint8_t* out[] = {img.data(), reinterpret_cast<uint8_t*>(&t),
                    reinterpret_cast<uint8_t*>(&wt)};
  ItemRef pad{7, 0, 3, 0, false};
  ASSERT_TRUE((*w)->FillItem(pad, out, nullptr).ok());
  EXPECT_EQ(wt, 0.0f);
  EXPECT_EQ(t, 0);
  EXPECT_EQ(std::count(img.begin(), img.end(), 0), long(img.size()));
  ItemRef real{7, 0, 2, 2, true};
  ASSERT_TRUE((*w)->FillItem(real, out, nullptr).ok());
  EXPECT_EQ(wt, 1.0f);
  EXPECT_EQ(t, 1);
}

TEST_F(ImageNetTest, DecodeErrorsSubstituteOrFail) {
  MakeTree();
  std::string broken = Jpeg(3);
  broken.resize(broken.size() / 3);
  WriteFile(root_ + "/train/n01/z.JPEG", broken);     // example 0
  WriteFile(root_ + "/train/n03/x.JPEG", "garbage");  // example 6
  auto w = Make("val");
  auto sub = Make("train");
  auto fail = Make("train", {{"on_decode_error", "fail"}});
  ASSERT_TRUE(sub.ok() && fail.ok());
  std::vector<uint8_t> a(224 * 224 * 3), b(a.size());
  int64_t ta, tb;
  uint8_t* oa[] = {a.data(), reinterpret_cast<uint8_t*>(&ta)};
  uint8_t* ob[] = {b.data(), reinterpret_cast<uint8_t*>(&tb)};
  WorkloadCounters counters;
  ItemRef ex{7, 0, 4, 6, true};
  ASSERT_TRUE((*sub)->FillItem(ex, oa, &counters).ok());
  EXPECT_GE(counters.decode_errors.load(), 1u);
  ASSERT_TRUE((*sub)->FillItem(ex, ob, &counters).ok());
  EXPECT_EQ(a, b);  // the same substitute, the same crop
  EXPECT_EQ(ta, tb);
  absl::Status st = (*fail)->FillItem(ex, oa, &counters);
  EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(st.message().find("n03/x.JPEG"), std::string::npos) << st;
}

TEST_F(ImageNetTest, TFRecordShardsGiveTheSamePixels) {
  MakeTree();
  // The val/ tree as two shards, TFDS's names, plus a shard of another
  // split that must be ignored.
  std::vector<std::string> records;
  ValRecords(&records);
  Mkdir("tfds");
  testutil::WriteTfdsShards(root_ + "/tfds", "imagenet2012", "validation",
                            {{records[0], records[1]}, {records[2]}});
  testutil::WriteTfdsShards(root_ + "/tfds", "imagenet2012", "train",
                            {{records[0]}});
  WorkloadConfig c;
  c.data_path = root_ + "/tfds";
  c.split = "validation";
  auto tf = CreateWorkload("imagenet", c);
  ASSERT_TRUE(tf.ok()) << tf.status();
  auto fw = Make("val");
  ASSERT_TRUE(fw.ok());
  ASSERT_EQ((*tf)->num_examples(), 3u);
  std::vector<uint8_t> a(224 * 224 * 3), b(a.size());
  int64_t ta, tb;
  float wa, wb;
  uint8_t* oa[] = {a.data(), reinterpret_cast<uint8_t*>(&ta),
                   reinterpret_cast<uint8_t*>(&wa)};
  uint8_t* ob[] = {b.data(), reinterpret_cast<uint8_t*>(&tb),
                   reinterpret_cast<uint8_t*>(&wb)};
  for (uint64_t i = 0; i < 3; ++i) {
    ItemRef ex{0, 0, i, i, true};
    ASSERT_TRUE((*tf)->FillItem(ex, oa, nullptr).ok());
    ASSERT_TRUE((*fw)->FillItem(ex, ob, nullptr).ok());
    EXPECT_EQ(a, b) << i;
    EXPECT_EQ(ta, tb);
  }
}

TEST_F(ImageNetTest, CorruptTFRecordIsADecodeErrorNamingTheFile) {
  MakeTree();
  std::vector<std::string> records;
  ValRecords(&records);
  const std::string shard = testutil::WriteTfdsShards(
      root_, "imagenet2012", "validation", {records})[0];
  // Flip a byte inside the second record's data.
  std::string data;
  {
    std::ifstream in(shard, std::ios::binary);
    data.assign(std::istreambuf_iterator<char>(in), {});
  }
  const size_t second = 12 + records[0].size() + 4;
  data[second + 12 + 100] ^= 0x20;
  WriteFile(shard, data);
  ASSERT_EQ(system(("rm -rf " + root_ + "/val").c_str()), 0);
  auto fail = Make("validation", {{"on_decode_error", "fail"}});
  ASSERT_TRUE(fail.ok()) << fail.status();
  std::vector<uint8_t> img(224 * 224 * 3);
  int64_t t;
  float wt;
  uint8_t* out[] = {img.data(), reinterpret_cast<uint8_t*>(&t),
                    reinterpret_cast<uint8_t*>(&wt)};
  WorkloadCounters counters;
  EXPECT_TRUE((*fail)->FillItem(ItemRef{0, 0, 0, 0, true}, out, &counters).ok());
  absl::Status st = (*fail)->FillItem(ItemRef{0, 0, 1, 1, true}, out, &counters);
  EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss) << st;
  EXPECT_NE(st.message().find(shard), std::string::npos) << st;
  EXPECT_EQ(counters.decode_errors.load(), 1u);
  auto sub = Make("validation");
  ASSERT_TRUE(sub.ok());
  EXPECT_TRUE((*sub)->FillItem(ItemRef{0, 0, 1, 1, true}, out, &counters).ok());
  EXPECT_EQ(counters.decode_errors.load(), 2u);
}

TEST_F(ImageNetTest, OptionsAndPathsAreChecked) {
  MakeTree();
  EXPECT_EQ(Make("train", {{"colour", "yes"}}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Make("train", {{"layout", "nhcw"}}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Make("train", {{"image_size", "300"}}).status().code(),
            absl::StatusCode::kInvalidArgument);  // > resize_size
  EXPECT_EQ(Make("test").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(Make("../x").status().code(), absl::StatusCode::kInvalidArgument);
  unsetenv("BATCHD_TEST_HOOKS");
  EXPECT_EQ(
      Make("train", {{"debug_fixed_crop", "0,0,10,10,1"}}).status().code(),
      absl::StatusCode::kPermissionDenied);
  setenv("BATCHD_TEST_HOOKS", "1", 1);
  EXPECT_TRUE(Make("train", {{"debug_fixed_crop", "0,0,10,10,1"}}).ok());
  EXPECT_FALSE(Make("train", {{"debug_fixed_crop", "0,0,10"}}).ok());
  unsetenv("BATCHD_TEST_HOOKS");
  auto small = Make("train", {{"image_size", "64"}, {"resize_size", "80"}});
  ASSERT_TRUE(small.ok());
  EXPECT_EQ((*small)->tensors()[0].example_shape,
            (std::vector<int64_t>{64, 64, 3}));
}

// The reference values are CPython 3.11's, printed by
//   python3 -c "import random; r = random.Random(7);
//     print([r.getrandbits(32) for _ in range(3)])
//     x = list(range(20)); random.Random(SEED).shuffle(x); print(x)"
// (tests/python/test_algoperf_contract.py checks the server against a live
// CPython as well).
TEST(PythonRandomTest, EqualsCPythonsGeneratorAndShuffle) {
  PythonRandom r(7);
  EXPECT_EQ(r.NextU32(), 1390851128u);
  EXPECT_EQ(r.NextU32(), 4071050724u);
  EXPECT_EQ(r.NextU32(), 647892279u);
  const std::pair<uint64_t, std::vector<uint64_t>> cases[] = {
      {0,
       {10, 18, 16, 14, 0, 17, 11, 2, 3, 9, 5, 7, 4, 19, 6, 15, 8, 1, 13, 12}},
      {7,
       {17, 15, 11, 18, 7, 6, 19, 3, 14, 0, 9, 5, 16, 8, 13, 2, 1, 12, 4, 10}},
      {(uint64_t(1) << 32) + 3,
       {14, 17, 6, 7, 4, 11, 15, 8, 2, 10, 9, 16, 12, 19, 5, 13, 0, 18, 1, 3}},
  };
  for (const auto& [seed, want] : cases) {
    std::vector<uint64_t> x(20);
    for (uint64_t i = 0; i < 20; ++i) x[i] = i;
    PythonRandom(seed).Shuffle(&x);
    EXPECT_EQ(x, want) << "seed " << seed;
  }
}

TEST_F(ImageNetTest, EvalTrainIsTheSeededSubsetOfTrainWithWeights) {
  MakeTree();  // train/ holds 8 images
  auto w =
      Make("eval_train", {{"with_ids", "1"}, {"eval_train_examples", "5"}});
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_FALSE((*w)->shuffle());
  EXPECT_EQ((*w)->num_examples(), 5u);
  ASSERT_EQ((*w)->tensors().size(), 4u);
  EXPECT_EQ((*w)->tensors()[2].name, "weights");
  std::vector<uint64_t> subset(8);
  for (uint64_t i = 0; i < 8; ++i) subset[i] = i;
  PythonRandom(7).Shuffle(&subset);  // Make() seeds 7
  auto train = OpenImageFolder(root_ + "/train", false);
  ASSERT_TRUE(train.ok());
  std::vector<uint8_t> img(224 * 224 * 3), again(img.size());
  int64_t t, id;
  float wt;
  uint8_t* out[] = {img.data(), reinterpret_cast<uint8_t*>(&t),
                    reinterpret_cast<uint8_t*>(&wt),
                    reinterpret_cast<uint8_t*>(&id)};
  for (uint64_t i = 0; i < 5; ++i) {
    ItemRef ex{7, 0, i, i, true};
    ASSERT_TRUE((*w)->FillItem(ex, out, nullptr).ok());
    EXPECT_EQ(uint64_t(id), subset[i]) << i;
    std::string bytes;
    int64_t label;
    ASSERT_TRUE((*train)->Read(subset[i], &bytes, &label).ok());
    EXPECT_EQ(t, label);
    EXPECT_EQ(wt, 1.0f);
    // The eval transform: no randomness, so another epoch is the same.
    std::vector<uint8_t> first = img;
    ItemRef later{7, 3, i, i, true};
    ASSERT_TRUE((*w)->FillItem(later, out, nullptr).ok());
    EXPECT_EQ(img, first) << i;
  }
  // More than the split holds: all of it.
  auto all = Make("eval_train", {{"eval_train_examples", "100"}});
  ASSERT_TRUE(all.ok());
  EXPECT_EQ((*all)->num_examples(), 8u);
  EXPECT_EQ(Make("eval_train", {{"eval_train_examples", "0"}}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(ImageNetTest, TestFallsBackToImageNetV2InItsTfdsLayout) {
  MakeTree();
  auto folder = OpenImageFolder(root_ + "/val", false);
  ASSERT_TRUE(folder.ok());
  std::vector<std::string> records;
  std::vector<int64_t> labels;
  std::string bytes;
  for (uint64_t i = (*folder)->size(); i-- > 0;) {  // labels out of order
    int64_t label;
    ASSERT_TRUE((*folder)->Read(i, &bytes, &label).ok());
    records.push_back(testutil::ImageExample(
        bytes, label, "ImageNetV2-" + std::to_string(i) + ".jpeg"));
    labels.push_back(label);
  }
  EXPECT_EQ(Make("test").status().code(), absl::StatusCode::kNotFound);
  for (const char* d : {"imagenet_v2", "imagenet_v2/matched-frequency",
                        "imagenet_v2/matched-frequency/3.0.0"}) {
    Mkdir(d);
  }
  testutil::WriteTfdsShards(root_ + "/imagenet_v2/matched-frequency/3.0.0",
                            "imagenet_v2", "test",
                            {{records[0], records[1]}, {records[2]}});
  auto w = Make("test");
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_FALSE((*w)->shuffle());
  ASSERT_EQ((*w)->num_examples(), 3u);
  std::vector<uint8_t> img(224 * 224 * 3);
  int64_t t;
  float wt;
  uint8_t* out[] = {img.data(), reinterpret_cast<uint8_t*>(&t),
                    reinterpret_cast<uint8_t*>(&wt)};
  for (uint64_t i = 0; i < 3; ++i) {
    ItemRef ex{7, 0, i, i, true};
    ASSERT_TRUE((*w)->FillItem(ex, out, nullptr).ok());
    EXPECT_EQ(t, labels[i]) << i;
    EXPECT_EQ(wt, 1.0f);
  }
}

}  // namespace
}  // namespace batchd

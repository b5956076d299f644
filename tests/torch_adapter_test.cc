// The libtorch adapter: tensors view the slot without copying, and the slot
// is released only when the last tensor is gone.
#include <gtest/gtest.h>

#include "batchd/torch.h"
#include "ring/ring.h"
#include "tests/synthetic_stream.h"
#include "tests/test_server.h"

namespace batchd {
namespace {

using testing::TestServer;

// Tests of the adapter on batches of a daemon of the test's own.
class TorchAdapterTest : public ::testing::Test {
 protected:
  // Starts the daemon and opens rank `rank` of `world` of the synthetic
  // stream `stream`: global batch `g` of 100 examples of 16 bytes.
  absl::StatusOr<std::unique_ptr<Loader>> Open(const std::string& stream,
                                               uint64_t g, int world,
                                               int rank) {
    if (!server_.Start()) return absl::UnavailableError("no daemon");
    return Loader::Open(testutil::SyntheticStream(server_.address(), stream, g,
                                                  world, rank, 100, 16));
  }

  TestServer server_{"torch"};
};

TEST_F(TorchAdapterTest, TensorsShareTheSlotAndReleaseItLast) {
  auto loader = Open("t", 8, 2, 1);
  ASSERT_TRUE(loader.ok()) << loader.status();
  // A second mapping of the same ring to watch the releases.
  auto watch = RingReader::Attach((*loader)->info().segment);
  ASSERT_TRUE(watch.ok());
  auto read_pos = [&] { return (*watch)->header()->released.load(); };

  absl::StatusOr<Batch> b = (*loader)->Next();
  ASSERT_TRUE(b.ok()) << b.status();
  const void* ids_ptr = b->tensor("ids")->data;
  std::map<std::string, torch::Tensor> t = ToTorch(std::move(*b));
  ASSERT_EQ(t.count("payload"), 1u);
  EXPECT_EQ(t["ids"].data_ptr(), ids_ptr) << "copied instead of viewed";
  EXPECT_EQ(t["ids"].sizes(), (std::vector<int64_t>{4}));
  EXPECT_EQ(t["payload"].sizes(), (std::vector<int64_t>{4, 16}));
  EXPECT_EQ(t["payload"].dtype(), torch::kUInt8);
  // Rank 1 of step 0 holds positions 4..7.
  EXPECT_EQ(t["positions"][0].item<int64_t>(), 4);

  torch::Tensor keep = t["payload"];
  t.clear();
  EXPECT_EQ(read_pos(), 0u) << "released while a tensor lives";
  keep = torch::Tensor();
  EXPECT_EQ(read_pos(), 1u) << "not released when the last tensor died";
}

TEST_F(TorchAdapterTest, DeviceFeederOnTheCpuHandsOutTheRingsTensors) {
  auto loader = Open("f", 4, 1, 0);
  ASSERT_TRUE(loader.ok()) << loader.status();
  DeviceFeeder feeder(**loader, torch::kCPU);
  EXPECT_FALSE(feeder.pinned());
  for (int64_t step = 0; step < 6; ++step) {  // more than the ring's slots
    auto t = feeder.Next();
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_EQ(t->at("ids").sizes(), (std::vector<int64_t>{4}));
    EXPECT_EQ(t->at("positions")[0].item<int64_t>(), step * 4);
  }
  // Without a CUDA runtime, registering says so instead of failing later.
  absl::Status pinned = (*loader)->RegisterPinned();
  if (!pinned.ok()) {
    EXPECT_TRUE(absl::IsFailedPrecondition(pinned)) << pinned;
  }
}

TEST_F(TorchAdapterTest, NormalizesImagesLikeTorchvision) {
  torch::Tensor img = torch::full({1, 2, 2, 3}, 128, torch::kUInt8);
  torch::Tensor x = NormalizeImages(img);
  EXPECT_EQ(x.dtype(), torch::kFloat32);
  EXPECT_NEAR(x[0][0][0][0].item<float>(), (128 / 255.0 - 0.485) / 0.229,
              1e-4);
  EXPECT_NEAR(x[0][1][1][2].item<float>(), (128 / 255.0 - 0.406) / 0.225,
              1e-4);
}

}  // namespace
}  // namespace batchd

// docs/workloads.md followed for a workload that reads files (sections 1-5):
// a small "filebytes" workload whose examples are the files of its split's
// directory, built only from what that page names (the interface, an
// ExampleSource read through the FillContext, an entry declaring its
// splits and options, the data root the prologue opens), opened through
// the registry and served by the engine to 2 ranks with read-ahead off,
// on, and on over storage that answers at once: every batch holds exactly
// the files' bytes, in the sampler's order.
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "gtest/gtest.h"
#include "server/engine.h"
#include "server/readahead.h"
#include "storage/data_file.h"
#include "tests/readahead_testutil.h"
#include "tests/testutil.h"
#include "workloads/options.h"
#include "workloads/registry.h"
#include "workloads/workload.h"
#include "workloads/workload_entry.h"

namespace batchd {
namespace {

constexpr int64_t kBytes = 16;  // the first bytes of a file, zero-padded

// 5.1 The source: the files of the split's directory, read through the data
// root, none larger than max_file_bytes.
class Files : public ExampleSource {
 public:
  Files(std::shared_ptr<const DataRoot> root, std::vector<std::string> paths,
        uint64_t max_file_bytes)
      : root_(std::move(root)),
        paths_(std::move(paths)),
        max_file_bytes_(max_file_bytes) {}
  absl::Status Read(const ExampleKey& key, std::string* bytes,
                    int64_t* label) const override {
    *label = 0;
    if (key.id >= paths_.size()) {
      return absl::OutOfRangeError(
          absl::StrCat("filebytes: example ", key.id, " of ", paths_.size()));
    }
    return ReadFileCapped(*root_, paths_[key.id], max_file_bytes_, bytes);
  }
  std::string Describe(const ExampleKey& key) const override {
    return key.id < paths_.size() ? paths_[key.id]
                                  : absl::StrCat("example ", key.id);
  }
  uint64_t size() const { return paths_.size(); }

 private:
  const std::shared_ptr<const DataRoot> root_;
  const std::vector<std::string> paths_;
  const uint64_t max_file_bytes_;
};

// 1. The interface: each example writes its file's first kBytes bytes and
// its length (and, for evaluation, its weight).
class FileBytesWorkload : public Workload {
 public:
  FileBytesWorkload(Files files, bool train)
      : files_(std::move(files)), train_(train) {
    tensors_ = {{"bytes", DType::kUInt8, {kBytes}},
                {"length", DType::kInt64, {}}};
    if (!train_) tensors_.push_back({"weights", DType::kFloat32, {}});
  }
  uint64_t num_examples() const override { return files_.size(); }
  bool shuffle() const override { return train_; }
  const std::vector<TensorLayout>& tensors() const override { return tensors_; }
  const ExampleSource* source() const override { return &files_; }

  // 5.2 Reading through the context.
  absl::Status FillItem(FillContext& ctx, uint8_t* const* out) const override {
    const ItemRef& item = ctx.item();
    memset(out[0], 0, kBytes);  // every byte of every tensor
    int64_t length = 0;
    float weight = 0;
    if (item.valid) {
      std::string bytes;
      int64_t label = 0;
      absl::Status st = ctx.Read(ctx.key(), &bytes, &label);
      if (!st.ok()) return st;  // pending included: returned unchanged
      memcpy(out[0], bytes.data(), std::min<size_t>(bytes.size(), kBytes));
      length = int64_t(bytes.size());
      weight = 1;
    }
    memcpy(out[1], &length, 8);
    if (!train_) memcpy(out[2], &weight, 4);
    return absl::OkStatus();
  }

 private:
  const Files files_;
  const bool train_;
  std::vector<TensorLayout> tensors_;
};

// The regular files of `dir` (beneath the root), sorted.
absl::StatusOr<std::vector<std::string>> ListFiles(const DataRoot& root,
                                                   const std::string& dir) {
  std::vector<std::string> paths;
  absl::Status listed = root.ForEachEntry(dir, [&](const dirent& e) {
    if (e.d_type == DT_REG) paths.push_back(dir + "/" + e.d_name);
    return true;
  });
  if (!listed.ok()) return listed;
  std::sort(paths.begin(), paths.end());
  if (paths.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("filebytes: ", dir, " holds no files"));
  }
  return paths;
}

// 3. The entry: the factory is handed the options and split, parsed, and
// the data root, opened.
absl::StatusOr<std::unique_ptr<Workload>> CreateFileBytes(
    const WorkloadContext& c) {
  absl::StatusOr<std::vector<std::string>> paths = ListFiles(
      *c.root,
      c.data_path() + (c.split == Split::kTrain ? "/train" : "/validation"));
  if (!paths.ok()) return paths.status();
  return std::unique_ptr<Workload>(new FileBytesWorkload(
      Files(c.root, *std::move(paths), c.options.Uint("max_file_bytes")),
      c.split == Split::kTrain));
}

constexpr OptionSpec kFileBytesOptions[] = {MaxFileBytes()};
constexpr Split kFileBytesSplits[] = {Split::kTrain, Split::kValidation};
const WorkloadEntry kFileBytesWorkload = {
    "filebytes",      "the first bytes of each file, for the file test",
    kFileBytesSplits, kFileBytesOptions,
    CreateFileBytes,
};

// The daemon's table and one line more.
std::vector<WorkloadEntry> Table() {
  std::vector<WorkloadEntry> table(Workloads().begin(), Workloads().end());
  table.push_back(kFileBytesWorkload);
  return table;
}

using readahead_testutil::Reading;
using readahead_testutil::ReadingOptions;

class FileWorkloadTest : public ::testing::Test {
 protected:
  static constexpr uint64_t kFiles = 37;
  static constexpr uint64_t kGlobal = 8;

  void SetUp() override {
    for (const char* split : {"train", "validation"}) {
      const std::string dir = data_ + "/" + split;
      ASSERT_EQ(mkdir(dir.c_str(), 0755), 0);
      for (uint64_t i = 0; i < kFiles; ++i) {
        std::ofstream(absl::StrFormat("%s/%03d.bin", dir, i))
            << Contents(split, i);
      }
    }
  }

  // File i of `split`: 5 to 40 bytes that name it.
  static std::string Contents(const std::string& split, uint64_t i) {
    std::string s = absl::StrCat(split, " file ", i, ":");
    s.resize(5 + (i * 7) % 36, char('a' + i % 26));
    return s;
  }

  // What item `id` of `split` writes: bytes (zero-padded) and length.
  static std::string Expected(const std::string& split, uint64_t id) {
    const std::string c = Contents(split, id);
    std::string out(kBytes, '\0');
    memcpy(&out[0], c.data(), std::min<size_t>(c.size(), kBytes));
    const int64_t length = int64_t(c.size());
    out.append(reinterpret_cast<const char*>(&length), 8);
    return out;
  }

  // `steps` global batches of `split`, served through the engine to two
  // ranks: per step, each item's bytes and length, rank 0's then rank 1's.
  std::vector<std::vector<std::string>> Serve(const std::string& split,
                                              Reading reading, int steps) {
    absl::StatusOr<std::unique_ptr<Workload>> w = CreateWorkload(
        "filebytes", testutil::StreamConfig(data_, split, {}, 4), Table());
    EXPECT_TRUE(w.ok()) << w.status();
    if (!w.ok()) return {};
    const uint32_t world = 2;
    ReadAhead ra(ReadingOptions(reading, 1 << 20));
    testutil::ServedStream served("files", *std::move(w), kGlobal, world, 4,
                                  &ra);
    if (!served.ok()) return {};
    EXPECT_EQ(served.stream().readahead != nullptr, reading != Reading::kOff);
    std::vector<std::vector<std::string>> got;
    for (const auto& step : served.NextSteps(steps)) {
      got.emplace_back();
      for (const testutil::RankBatch& batch : step) {
        for (uint64_t i = 0; i < kGlobal / world; ++i) {
          got.back().push_back(batch.tensors[0].substr(kBytes * i, kBytes) +
                               batch.tensors[1].substr(8 * i, 8));
        }
      }
    }
    if (served.stream().readahead != nullptr) {
      stats_ = served.stream().readahead->stats();
    }
    EXPECT_TRUE(served.Stop());
    return got;
  }

  testutil::TempDir tmp_{"files"};
  const std::string data_ = tmp_.path();
  ReadAheadStats stats_;
};

TEST_F(FileWorkloadTest, TrainBatchesAreTheFilesBytesWithReadAheadOnAndOff) {
  const int steps = 12;  // two epochs and a half
  auto sampler = Sampler::Create(kFiles, kGlobal, 1, 4, true);
  ASSERT_TRUE(sampler.ok());
  std::vector<std::vector<std::string>> want(steps);
  for (int s = 0; s < steps; ++s) {
    const RankSlice slice = sampler->Slice(s, 0);
    for (uint64_t i = 0; i < kGlobal; ++i) {
      want[s].push_back(Expected(
          "train", sampler->ExampleId(slice.epoch, slice.first_position + i)));
    }
  }
  EXPECT_EQ(Serve("train", Reading::kOff, steps), want);
  EXPECT_EQ(Serve("train", Reading::kAhead, steps), want);
  EXPECT_GT(stats_.reads_issued + stats_.sync_reads, 0u);
  EXPECT_EQ(stats_.failed_reads, 0u);
  EXPECT_EQ(Serve("train", Reading::kInline, steps), want);
}

TEST_F(FileWorkloadTest, AnEvalPassIsTheFilesInOrderWithReadAheadOnAndOff) {
  const int steps = 5;  // 37 files: 4 full batches of 8 and one padded
  std::vector<std::vector<std::string>> want(steps);
  for (uint64_t k = 0; k < steps * kGlobal; ++k) {
    want[k / kGlobal].push_back(k < kFiles ? Expected("validation", k)
                                           : std::string(kBytes + 8, '\0'));
  }
  EXPECT_EQ(Serve("validation", Reading::kOff, steps), want);
  EXPECT_EQ(Serve("validation", Reading::kAhead, steps), want);
  EXPECT_EQ(Serve("validation", Reading::kInline, steps), want);
}

TEST_F(FileWorkloadTest, TheRegistryKnowsTheWorkloadAndItsSplits) {
  WorkloadConfig config;
  config.data_path = data_;
  config.split = "test";
  EXPECT_NE(CreateWorkload("filebytes", config, Table())
                .status()
                .message()
                .find("filebytes: unknown split 'test'"),
            std::string::npos);
  EXPECT_NE(WorkloadHelp(Table()).find("filebytes"), std::string::npos);
}

}  // namespace
}  // namespace batchd

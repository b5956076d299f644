// criteo1tb served by the engine (docs/workloads.md section 5): its blocks
// are the stored examples, read only through the items' FillContext, so
// the batches of every split are the same bytes with read-ahead off, on,
// and on over storage that answers at once, and every block a batch parses
// comes through the workload's ExampleSource (counted here).
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "server/engine.h"
#include "server/readahead.h"
#include "tests/readahead_testutil.h"
#include "tests/testutil.h"
#include "workloads/criteo1tb/criteo1tb.h"
#include "workloads/workload.h"

namespace batchd {
namespace {

using readahead_testutil::Reading;
using readahead_testutil::ReadingOptions;
using testutil::RankBatch;
using testutil::ServedStream;
using testutil::TempDir;
using testutil::WriteFile;

// The workload's source, counting its reads.
class CountingSource : public ExampleSource {
 public:
  explicit CountingSource(const ExampleSource* inner) : inner_(inner) {}
  absl::Status Read(const ExampleKey& key, std::string* bytes,
                    int64_t* label) const override {
    reads_.fetch_add(1);
    return inner_->Read(key, bytes, label);
  }
  std::string Describe(const ExampleKey& key) const override {
    return inner_->Describe(key);
  }
  uint64_t reads() const { return reads_.load(); }

 private:
  const ExampleSource* const inner_;
  mutable std::atomic<uint64_t> reads_{0};
};

// criteo1tb as it is, but for its source, which counts.
class Counted : public Workload {
 public:
  explicit Counted(std::unique_ptr<Workload> inner)
      : inner_(std::move(inner)), source_(inner_->source()) {}
  std::unique_ptr<Schedule> MakeSchedule(
      const Sampler& sampler) const override {
    return inner_->MakeSchedule(sampler);
  }
  const ExampleSource* source() const override { return &source_; }
  uint64_t num_examples() const override { return inner_->num_examples(); }
  bool shuffle() const override { return inner_->shuffle(); }
  const std::vector<TensorLayout>& tensors() const override {
    return inner_->tensors();
  }
  absl::Status FillItem(FillContext& ctx, uint8_t* const* out) const override {
    return inner_->FillItem(ctx, out);
  }
  const CountingSource& counting() const { return source_; }

 private:
  const std::unique_ptr<Workload> inner_;
  const CountingSource source_;
};

// A line of 40 fields, distinct per (file, i).
std::string Line(int file, int i) {
  std::string s = absl::StrCat(i % 3 == 0 ? "1" : "0");
  for (int d = 0; d < 13; ++d)
    absl::StrAppend(&s, "\t", (i * 7 + d + file) % 97);
  for (int c = 0; c < 26; ++c) {
    absl::StrAppend(&s, "\t",
                    absl::Hex(uint32_t(i * 2654435761u + c * 40503u + file),
                              absl::kZeroPad8));
  }
  return s;
}

class CriteoReadAheadTest : public ::testing::Test {
 protected:
  static constexpr uint64_t kGlobal = 256;
  static constexpr uint32_t kWorld = 2;

  void SetUp() override {
    // Two train files of several 64 KiB blocks; validation of two files.
    for (const auto& [name, lines] :
         std::vector<std::pair<std::string, int>>{{"day_0_00", 1500},
                                                  {"day_1_00", 900},
                                                  {"day_23_19", 1100},
                                                  {"day_23_20", 300}}) {
      std::string text;
      for (int i = 0; i < lines; ++i) {
        absl::StrAppend(&text, Line(int(name.size() + name.back()), i), "\n");
      }
      WriteFile(dir_.Path(name), text);
    }
  }

  // `steps` global batches of `split` served to two ranks: per step, each
  // row's bytes (inputs, targets, weights), rank 0's then rank 1's.
  std::vector<std::string> Serve(const std::string& split, Reading reading,
                                 int steps) {
    absl::StatusOr<std::unique_ptr<Workload>> inner =
        CreateWorkload(kCriteo1TbWorkload,
                       testutil::StreamConfig(
                           dir_.path(), split,
                           {{"block_kib", "64"}, {"window_blocks", "2"}}, 9));
    EXPECT_TRUE(inner.ok()) << inner.status();
    if (!inner.ok()) return {};
    auto counted = std::make_unique<Counted>(*std::move(inner));
    const Counted* c = counted.get();
    ReadAhead ra(ReadingOptions(reading, 8 << 20));
    ServedStream served("criteo", std::move(counted), kGlobal, kWorld, 9, &ra);
    if (!served.ok()) return {};
    EXPECT_EQ(served.stream().readahead != nullptr, reading != Reading::kOff);
    std::vector<std::string> got;
    for (std::vector<RankBatch>& step : served.NextSteps(steps)) {
      for (RankBatch& batch : step) {
        for (std::string& t : batch.tensors) got.push_back(std::move(t));
      }
    }
    if (served.stream().readahead != nullptr) {
      stats_ = served.stream().readahead->stats();
    }
    reads_ = c->counting().reads();
    EXPECT_TRUE(served.Stop());
    return got;
  }

  TempDir dir_{"criteo_ra"};
  ReadAheadStats stats_;
  uint64_t reads_ = 0;
};

TEST_F(CriteoReadAheadTest, TrainBatchesAreTheSameWithReadAheadOnAndOff) {
  const int steps = 20;  // 2400 lines: two epochs and more
  const std::vector<std::string> off = Serve("train", Reading::kOff, steps);
  ASSERT_EQ(off.size(), size_t(steps * kWorld * 3));
  EXPECT_GT(reads_, 0u);  // every parsed block came through the source
  EXPECT_EQ(Serve("train", Reading::kAhead, steps), off);
  EXPECT_GT(reads_, 0u);
  EXPECT_GT(stats_.reads_issued, 0u);  // blocks read ahead of the workers
  EXPECT_GT(stats_.hits, 0u);          // and decoded from those bytes
  EXPECT_EQ(stats_.failed_reads, 0u);
  EXPECT_EQ(Serve("train", Reading::kInline, steps), off);
}

TEST_F(CriteoReadAheadTest, AnEvalPassIsTheSameWithReadAheadOnAndOff) {
  const int steps = 6;  // 1400 lines: 5 full batches and one padded
  const std::vector<std::string> off =
      Serve("validation", Reading::kOff, steps);
  ASSERT_EQ(off.size(), size_t(steps * kWorld * 3));
  EXPECT_GT(reads_, 0u);
  EXPECT_EQ(Serve("validation", Reading::kAhead, steps), off);
  EXPECT_GT(stats_.reads_issued, 0u);
  EXPECT_GT(stats_.hits, 0u);
  EXPECT_EQ(Serve("validation", Reading::kInline, steps), off);
}

// FillItem reads only through its context: a context whose reads are
// pending gets the pending status back unchanged, nothing counted; one
// whose source fails fails the item with that error.
TEST_F(CriteoReadAheadTest, FillReadsOnlyThroughTheContext) {
  for (const char* split : {"train", "validation"}) {
    absl::StatusOr<std::unique_ptr<Workload>> w = CreateWorkload(
        kCriteo1TbWorkload,
        testutil::StreamConfig(dir_.path(), split, {{"block_kib", "64"}}));
    ASSERT_TRUE(w.ok()) << w.status();
    ASSERT_NE((*w)->source(), nullptr);
    if (std::string(split) == "train") {
      // Rows exist once the schedule counted the epoch.
      auto sampler = Sampler::Create((*w)->num_examples(), 8, 1, 0, true);
      ASSERT_TRUE(sampler.ok());
      std::unique_ptr<Schedule> schedule = (*w)->MakeSchedule(*sampler);
      absl::Status ready;
      for (int i = 0; i < 2000; ++i) {
        ready = schedule->Ready(0);
        if (!absl::IsUnavailable(ready)) break;
        usleep(5000);
      }
      ASSERT_TRUE(ready.ok()) << ready;
    }
    struct Pending : ExampleReader {
      absl::Status Read(const ExampleKey&, std::string*, int64_t*) override {
        ++reads;
        return ReadPendingError();
      }
      int reads = 0;
    } pending;
    std::vector<uint8_t> inputs(39 * 4), target(4), weight(4);
    uint8_t* out[3] = {inputs.data(), target.data(), weight.data()};
    WorkloadCounters counters;
    FillContext ctx(ItemRef{0, 0, 0, 0, true}, &counters, (*w)->source(),
                    &pending);
    const absl::Status st = (*w)->FillItem(ctx, out);
    EXPECT_TRUE(IsReadPending(st)) << split << ": " << st;
    EXPECT_EQ(pending.reads, 1) << split;
    EXPECT_EQ(counters.decode_errors.load(), 0u) << split;

    struct Failing : ExampleSource {
      absl::Status Read(const ExampleKey& key, std::string*,
                        int64_t*) const override {
        return absl::PermissionDeniedError(absl::StrCat("block ", key.id));
      }
    } failing;
    FillContext ctx2(ItemRef{0, 0, 0, 0, true}, &counters, &failing);
    EXPECT_TRUE(absl::IsPermissionDenied((*w)->FillItem(ctx2, out))) << split;
  }
}

}  // namespace
}  // namespace batchd

// Read-ahead of WMT TFDS records: packed train rows and eval pairs are the
// same with and without it; the pairs of steps after the one being decoded
// are read ahead (every one of them, with room in the budget); a read ahead
// that fails is read again, and a damaged shard fails a step exactly as
// without read-ahead. No test depends on timing: WaitIdleForTest waits
// until no read can be issued.
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "server/engine.h"
#include "server/readahead.h"
#include "tests/readahead_testutil.h"
#include "tests/testutil.h"
#include "tests/wmt_fixture.h"
#include "workloads/common/tf_example.h"
#include "workloads/common/tfrecord.h"
#include "workloads/wmt/sentencepiece_model.h"
#include "workloads/wmt/wmt.h"

namespace batchd {
namespace {

namespace fs = std::filesystem;

constexpr size_t kTrainPairs = 600;
constexpr uint64_t kGlobalBatch = 4;  // rows or pairs; 2 ranks of 2
constexpr int kShards = 3;

using readahead_testutil::Budget;
using wmt_test::MakePairs;
using wmt_test::Pair;

void WriteTfds(const std::string& dir, const std::string& split,
               const std::vector<Pair>& pairs) {
  wmt_test::WriteTfds(dir, split, pairs, kShards);
}

// What one run of rank 0's batches gave.
struct StreamRun {
  std::vector<std::string> batches;  // every tensor's bytes, per step
  absl::Status status;               // the first failure
  uint64_t failed_step = 0;
  ReadAheadStats stats;
  uint64_t pairs_of_step0 = 0;  // ExamplesOf's keys: read by the workers
  uint64_t pairs_after = 0;     // ... of the later steps
};

class WmtReadAheadTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = new std::string(testutil::MakeTempDir("wmtra"));
    std::string corpus;
    for (const Pair& p : MakePairs(kTrainPairs, 1)) {
      corpus += p.de + "\n" + p.en + "\n";
    }
    wmt_test::TrainTestModel(*root_, corpus, 60);
  }
  static void TearDownTestSuite() { testutil::RemoveTree(*root_); }

  // A fresh data directory: the model, train and validation shards.
  static std::string NewDataDir() {
    const std::string d = *root_ + "/data" + std::to_string(dirs_++);
    fs::create_directories(d);
    fs::copy_file(*root_ + "/spm.model", d + "/wmt_sentencepiece_model");
    WriteTfds(d, "train", MakePairs(kTrainPairs, 1));
    WriteTfds(d, "validation", MakePairs(90, 2));
    return d;
  }

  // plain_ and ahead_: `split` of a fresh data directory, opened twice, to
  // be filled without read-ahead and with it.
  void OpenTwice(const std::string& split) {
    const std::string d = NewDataDir();
    plain_ = Create(d, split);
    ahead_ = Create(d, split);
    ASSERT_TRUE(plain_ && ahead_);
  }

  static std::unique_ptr<Workload> Create(const std::string& data,
                                          const std::string& split) {
    auto w = CreateWorkload(
        kWmtWorkload,
        testutil::StreamConfig(data, split, {{"index_threads", "2"}}));
    EXPECT_TRUE(w.ok()) << w.status();
    return w.ok() ? std::move(*w) : nullptr;
  }

  // Rank 0's batches of steps [0, steps), filled item by item as the
  // engine fills them. With `ra`, the workload reads through a read-ahead
  // stream over `read` (default: its own reader); before each step the
  // stage runs until idle, the lane is told that the step is decoded, and
  // the stage runs until idle again.
  // The lane begins at step 1, so that step 0 is read by the worker alone
  // and every later step is read ahead first.
  // `before_decoding` runs once step 0 is located, before anything is read
  // (the lane begins after it).
  static StreamRun Fill(Workload& w, uint64_t steps, ReadAhead* ra,
                        ExampleReadFn read = nullptr,
                        std::function<void()> before_decoding = nullptr) {
    StreamRun run;
    auto sampler =
        Sampler::Create(w.num_examples(), kGlobalBatch, 2, 7, w.shuffle());
    EXPECT_TRUE(sampler.ok()) << sampler.status();
    std::unique_ptr<Schedule> schedule = w.MakeSchedule(*sampler);
    std::shared_ptr<ReadAheadStream> stream;
    ReadAhead::LaneId lane = 0;
    if (ra != nullptr) {
      stream =
          read ? ra->AddStream("wmt", read)
               : ra->AddStream("wmt", std::shared_ptr<const ExampleSource>(
                                          std::shared_ptr<void>(), w.source()));
      EXPECT_TRUE(stream != nullptr);
    }
    // The lane is added once step 0 is located and `before_decoding` has
    // run, so that nothing is read ahead of what that hook changes.
    auto add_lane = [&] {
      lane = ra->AddLane(
          stream,
          [&schedule](uint64_t step, std::vector<ReadAheadKey>* keys) {
            return schedule->ExamplesOf(step, 0, keys);
          },
          1);
    };
    const std::vector<TensorLayout>& tensors = w.tensors();
    for (uint64_t step = 0; step < steps; ++step) {
      absl::Status ready;
      while (absl::IsUnavailable(ready = schedule->Ready(step))) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      if (absl::IsOutOfRange(ready)) break;  // the eval pass ended
      if (!ready.ok()) {
        ADD_FAILURE() << ready;
        break;
      }
      // Read-ahead reads the steps whose rows are known; while the length
      // pass runs, the schedule learns them a few steps ahead of the one
      // served, in the background. Wait for the next one, so that what is
      // counted below does not depend on that race.
      while (step + 1 < steps &&
             absl::IsUnavailable(schedule->Ready(step + 1))) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      if (step == 0 && before_decoding) before_decoding();
      if (step == 0 && ra != nullptr) add_lane();
      std::vector<ReadAheadKey> keys;
      EXPECT_TRUE(schedule->ExamplesOf(step, 0, &keys));
      (step == 0 ? run.pairs_of_step0 : run.pairs_after) += keys.size();
      if (ra != nullptr) {
        // What was read ahead while step - 1 was decoded lands first.
        ra->WaitIdleForTest();
        ra->Decoding(lane, step);
        ra->WaitIdleForTest();
      }
      absl::StatusOr<StepItems> items = schedule->Locate(step, 0);
      if (!items.ok()) {
        ADD_FAILURE() << items.status();
        break;
      }
      std::vector<std::string> out(tensors.size());
      for (size_t k = 0; k < tensors.size(); ++k) {
        out[k].resize(tensors[k].ExampleBytes() * items->count);
      }
      std::vector<uint8_t*> ptrs(tensors.size());
      WorkloadCounters counters;
      for (uint64_t i = 0; i < items->count && run.status.ok(); ++i) {
        for (size_t k = 0; k < tensors.size(); ++k) {
          ptrs[k] = reinterpret_cast<uint8_t*>(out[k].data()) +
                    i * tensors[k].ExampleBytes();
        }
        FillContext ctx(schedule->Item(*items, i), &counters, w.source(),
                        stream.get());
        run.status = w.FillItem(ctx, ptrs.data());
      }
      if (!run.status.ok()) {
        run.failed_step = step;
        break;
      }
      std::string batch;
      for (const std::string& t : out) batch += t;
      run.batches.push_back(std::move(batch));
    }
    if (ra != nullptr) {
      run.stats = stream->stats();
      if (lane != 0) ra->RemoveLane(lane);
    }
    return run;
  }

  std::unique_ptr<Workload> plain_, ahead_;
  static std::string* root_;
  static int dirs_;
};

std::string* WmtReadAheadTest::root_;
int WmtReadAheadTest::dirs_ = 0;

TEST_F(WmtReadAheadTest, TextSourcesAreNotReadAhead) {
  const std::string d = *root_ + "/text";
  fs::create_directories(d);
  fs::copy_file(*root_ + "/spm.model", d + "/wmt_sentencepiece_model");
  for (const char* side : {"de", "en"}) {
    testutil::WriteFile(d + "/train." + side, "ein Satz\nnoch einer\n");
  }
  std::unique_ptr<Workload> w = Create(d, "train");
  ASSERT_NE(w, nullptr);
  EXPECT_TRUE(w->source() == nullptr);
}

TEST_F(WmtReadAheadTest, TrainRowsReadAheadAreTheRowsReadSynchronously) {
  ASSERT_NO_FATAL_FAILURE(OpenTwice("train"));
  ASSERT_TRUE(ahead_->source() != nullptr);
  constexpr uint64_t kSteps = 6;
  const StreamRun want = Fill(*plain_, kSteps, nullptr);
  ASSERT_TRUE(want.status.ok()) << want.status;
  ASSERT_EQ(want.batches.size(), kSteps);

  ReadAhead ra(Budget(8 << 20, 2));
  const StreamRun got = Fill(*ahead_, kSteps, &ra);
  ASSERT_TRUE(got.status.ok()) << got.status;
  EXPECT_EQ(got.batches, want.batches);
  // Reads were issued only for steps after the one decoded, and with room
  // in the budget every pair of the later steps came from them: the
  // schedule named exactly the pairs FillRow reads.
  EXPECT_GT(got.stats.reads_issued, 0u);
  EXPECT_GE(got.stats.min_steps_ahead, 1u);
  EXPECT_GT(got.pairs_after, kSteps);  // several pairs a row
  EXPECT_EQ(got.stats.hits, got.pairs_after);
  EXPECT_EQ(got.stats.sync_reads, got.pairs_of_step0);
  EXPECT_EQ(got.stats.failed_reads, 0u);
  EXPECT_LE(ra.max_total_held_bytes(), uint64_t(8) << 20);
}

// Through the engine, a packed row's pairs are read (or found read ahead)
// by the engine and handed in the context: FillItem reads none of them
// back through the read-ahead, and the rows are the rows read without it.
TEST_F(WmtReadAheadTest, TheEngineHandsARowsPairsInTheContext) {
  ASSERT_NO_FATAL_FAILURE(OpenTwice("train"));
  constexpr uint64_t kSteps = 5;
  const StreamRun want = Fill(*plain_, kSteps, nullptr);
  ASSERT_TRUE(want.status.ok()) << want.status;
  ASSERT_EQ(want.batches.size(), kSteps);

  ReadAhead ra(Budget(8 << 20, 2));
  std::vector<std::string> got;
  ReadAheadStats stats;
  uint64_t reader_reads = 0;
  {
    testutil::ServedStream served("wmt", std::move(ahead_), kGlobalBatch, 2, 7,
                                  &ra);
    ASSERT_TRUE(served.ok());
    ASSERT_TRUE(served.stream().readahead != nullptr);
    for (const auto& step : served.NextSteps(kSteps)) {
      // Fill's batch: rank 0's tensors' rows, in order.
      got.push_back(absl::StrJoin(step[0].tensors, ""));
    }
    stats = served.stream().readahead->stats();
    reader_reads = served.stream().counters.reader_reads.load();
    EXPECT_TRUE(served.Stop());
  }
  EXPECT_EQ(got, want.batches);
  EXPECT_GT(stats.hits + stats.sync_reads, kSteps);  // several pairs a row
  EXPECT_EQ(reader_reads, 0u);
}

TEST_F(WmtReadAheadTest, TheBudgetBoundsTheDepthAndKeepsTheRows) {
  ASSERT_NO_FATAL_FAILURE(OpenTwice("train"));
  constexpr uint64_t kSteps = 6;
  const StreamRun want = Fill(*plain_, kSteps, nullptr);
  // A budget of one byte holds one pair at a time (a lane may always hold
  // one): the first pair of the step after the one decoded, no more.
  ReadAhead ra(Budget(1, 2));
  const StreamRun got = Fill(*ahead_, kSteps, &ra);
  ASSERT_TRUE(got.status.ok()) << got.status;
  EXPECT_EQ(got.batches, want.batches);
  EXPECT_EQ(got.stats.hits, kSteps - 1);
  EXPECT_EQ(got.stats.hits + got.stats.sync_reads,
            got.pairs_of_step0 + got.pairs_after);
  EXPECT_EQ(got.stats.min_steps_ahead, 1u);
  EXPECT_EQ(got.stats.max_steps_ahead, 1u);
}

TEST_F(WmtReadAheadTest, EvalPairsReadAheadAreThePairsReadSynchronously) {
  ASSERT_NO_FATAL_FAILURE(OpenTwice("validation"));
  const StreamRun want = Fill(*plain_, 1000, nullptr);
  ASSERT_TRUE(want.status.ok()) << want.status;
  ReadAhead ra(Budget(8 << 20, 2));
  const StreamRun got = Fill(*ahead_, 1000, &ra);
  ASSERT_TRUE(got.status.ok()) << got.status;
  EXPECT_EQ(got.batches.size(), want.batches.size());
  EXPECT_EQ(got.batches, want.batches);
  EXPECT_EQ(got.stats.hits, got.pairs_after);
  EXPECT_EQ(got.stats.sync_reads, got.pairs_of_step0);
  EXPECT_GE(got.stats.min_steps_ahead, 1u);
}

TEST_F(WmtReadAheadTest, AFailedReadAheadIsReadAgainByTheWorker) {
  ASSERT_NO_FATAL_FAILURE(OpenTwice("train"));
  const StreamRun want = Fill(*plain_, 4, nullptr);
  // Every read ahead (on an I/O thread) fails; the worker's (this
  // thread's) succeed.
  const std::thread::id worker = std::this_thread::get_id();
  const ExampleSource* source = ahead_->source();
  ExampleReadFn flaky = [&](uint64_t id, std::string* bytes, int64_t* label) {
    if (std::this_thread::get_id() != worker) {
      return absl::UnavailableError("the storage hiccuped");
    }
    return source->Read({0, 0, id}, bytes, label);
  };
  ReadAhead ra(Budget(8 << 20, 2));
  const StreamRun got = Fill(*ahead_, 4, &ra, flaky);
  ASSERT_TRUE(got.status.ok()) << got.status;
  EXPECT_EQ(got.batches, want.batches);
  EXPECT_EQ(got.stats.hits, 0u);
  EXPECT_GE(got.stats.failed_reads, got.pairs_after);
  EXPECT_EQ(got.stats.sync_reads, got.pairs_of_step0 + got.pairs_after);
}

TEST_F(WmtReadAheadTest, ATruncatedShardFailsTheStepAsWithoutReadAhead) {
  const std::string d = NewDataDir();
  std::unique_ptr<Workload> plain = Create(d, "train");
  ASSERT_TRUE(plain);
  // Once the pairs are indexed (step 0 located), a shard loses its tail:
  // the reads of its records fail, ahead and again in the worker.
  const std::string shard = d +
                            "/wmt17_translate/de-en/1.0.0/"
                            "wmt17_translate-train.tfrecord-00001-of-00003";
  const uint64_t size = fs::file_size(shard);
  const std::string copy = d + "/shard.bak";
  fs::copy_file(shard, copy);
  auto truncate_shard = [&] { fs::resize_file(shard, size / 3); };
  const StreamRun want = Fill(*plain, 6, nullptr, nullptr, truncate_shard);
  ASSERT_FALSE(want.status.ok());
  fs::copy_file(copy, shard, fs::copy_options::overwrite_existing);
  ASSERT_EQ(fs::file_size(shard), size);
  std::unique_ptr<Workload> ahead = Create(d, "train");
  ASSERT_TRUE(ahead);
  ReadAhead ra(Budget(8 << 20, 2));
  const StreamRun got = Fill(*ahead, 6, &ra, nullptr, truncate_shard);
  EXPECT_EQ(got.status, want.status);
  EXPECT_EQ(got.failed_step, want.failed_step);
  EXPECT_EQ(got.batches, want.batches);
  EXPECT_GT(got.stats.failed_reads, 0u)
      << "failed step " << got.failed_step << ", reads issued "
      << got.stats.reads_issued << ", hits " << got.stats.hits
      << ", read on demand " << got.stats.sync_reads;
}

}  // namespace
}  // namespace batchd

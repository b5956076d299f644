// Streams of the same content sharing their fills through the engine
// (server/fill_share.h): every stream gets exactly its lone run's bytes and
// counts, whatever its world size, start and pace; each item is filled once
// once the streams run side by side; a stream that does not read holds
// nobody, and the window stays within its budget and empties when the
// streams that wanted its fills go. No test depends on timing: readers wait
// for batches (with a deadline that fails the test), and the window is
// looked at when the engine has nothing left to do.
#include "server/fill_share.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "base/clock.h"
#include "server/engine.h"
#include "server/readahead.h"
#include "tests/testutil.h"

namespace batchd {
namespace {

constexpr uint64_t kExamples = 37;
constexpr uint64_t kGlobalBatch = 8;
constexpr uint64_t kSeed = 5;
constexpr uint32_t kSlots = 3;
constexpr int kPayload = 48;

// How often each item (epoch, position) was filled, over every stream.
struct FillLog {
  std::mutex mu;
  std::map<std::pair<uint64_t, uint64_t>, int> fills;
  int Count(uint64_t epoch, uint64_t position) {
    std::lock_guard<std::mutex> lock(mu);
    auto it = fills.find({epoch, position});
    return it == fills.end() ? 0 : it->second;
  }
};

// Examples that write their id and a payload derived from (seed, epoch,
// position, id); every fifth example counts a decode error (as a corrupt
// file replaced by its substitute would). With `fail_position`, the fill
// of that position of epoch 0 fails.
class LoggedWorkload : public Workload {
 public:
  LoggedWorkload(bool train, FillLog* log, int64_t fail_position = -1)
      : train_(train), log_(log), fail_position_(fail_position) {
    tensors_ = {{"ids", DType::kUInt64, {}},
                {"payload", DType::kUInt8, {kPayload}}};
    if (!train) tensors_.push_back({"weights", DType::kFloat32, {}});
  }
  uint64_t num_examples() const override { return kExamples; }
  bool shuffle() const override { return train_; }
  const std::vector<TensorLayout>& tensors() const override { return tensors_; }
  absl::Status FillItem(FillContext& ctx, uint8_t* const* out) const override {
    const ItemRef& item = ctx.item();
    if (item.valid && item.epoch == 0 &&
        int64_t(item.position) == fail_position_) {
      return absl::DataLossError("the test's unreadable item");
    }
    {
      std::lock_guard<std::mutex> lock(log_->mu);
      ++log_->fills[{item.epoch, item.position}];
    }
    const uint64_t id = item.valid ? item.id : 0;
    memcpy(out[0], &id, sizeof(id));
    for (int i = 0; i < kPayload; ++i) {
      out[1][i] = item.valid ? uint8_t(item.seed * 31 + item.epoch * 7 +
                                       item.position * 3 + id + i)
                             : 0;
    }
    if (!train_) {
      const float w = item.valid ? 1.0f : 0.0f;
      memcpy(out[2], &w, sizeof(w));
    }
    if (item.valid && id % 5 == 0 && ctx.counters() != nullptr) {
      ctx.counters()->decode_errors.fetch_add(1);
    }
    return absl::OkStatus();
  }

 private:
  const bool train_;
  FillLog* const log_;
  const int64_t fail_position_;
  std::vector<TensorLayout> tensors_;
};

// One job: a stream of W ranks started at `start`, its rings and readers.
struct Job {
  std::shared_ptr<StreamSetup> stream;
  std::unique_ptr<testutil::ServedRanks> ranks;
  uint32_t world = 0;
  uint64_t next = 0;  // the step the readers take next
};

// Makes the job's stream (joined to `share`'s group of `key` when given)
// and its rings; Start adds its ranks to the engine.
std::unique_ptr<Job> MakeJob(FillLog* log, uint32_t w, uint64_t start,
                             bool train, FillShare* share,
                             const std::string& key = "same content",
                             int64_t fail_position = -1) {
  auto job = std::make_unique<Job>();
  auto workload = std::make_unique<LoggedWorkload>(train, log, fail_position);
  absl::StatusOr<Sampler> sampler =
      Sampler::Create(kExamples, kGlobalBatch, w, kSeed, train);
  EXPECT_TRUE(sampler.ok()) << sampler.status();
  BatchLayout layout =
      *BatchLayout::Make(workload->tensors(), kGlobalBatch / w);
  job->stream =
      std::make_shared<StreamSetup>("s", std::move(workload), *sampler, layout);
  if (share != nullptr) {
    std::vector<uint64_t> bytes;
    for (const BatchLayout::Entry& e : layout.entries) {
      bytes.push_back(e.example_bytes);
    }
    job->stream->share = share->Join(key, bytes);
    EXPECT_NE(job->stream->share, nullptr);
  }
  job->ranks =
      std::make_unique<testutil::ServedRanks>(job->stream, w, start, kSlots);
  job->world = w;
  job->next = start;
  return job;
}

void Start(Engine& engine, Job& job) { job.ranks->AddTo(engine); }

void Stop(Engine&, Job& job) { job.ranks->Retire(); }

// The job's next global batch: each tensor's bytes, ranks in order; empty
// when the stream ended (or failed: `ended` says which it was).
std::string ReadStep(Job& job, bool* ended = nullptr) {
  const BatchLayout& layout = job.stream->layout;
  std::vector<std::string> tensors(layout.entries.size());
  for (uint32_t r = 0; r < job.world; ++r) {
    absl::StatusOr<testutil::RankBatch> batch = job.ranks->Next(r, 30.0);
    if (!batch.ok()) {
      if (ended != nullptr) *ended = true;
      if (ended == nullptr) ADD_FAILURE() << batch.status();
      return "";
    }
    EXPECT_EQ(batch->step, job.next);
    for (size_t k = 0; k < layout.entries.size(); ++k) {
      tensors[k] += batch->tensors[k];
    }
  }
  ++job.next;
  std::string out;
  for (const std::string& t : tensors) out += t;
  return out;
}

// Steps [0, steps) of the stream alone (no window), W = 1; and its decode
// errors over them (train: the steps' own, counted from the batches).
std::vector<std::string> LoneRun(bool train, int steps) {
  FillLog log;
  Engine engine(2);
  std::unique_ptr<Job> job = MakeJob(&log, 1, 0, train, nullptr);
  Start(engine, *job);
  std::vector<std::string> out;
  for (int s = 0; s < steps; ++s) {
    bool ended = false;
    std::string b = ReadStep(*job, &ended);
    if (ended) break;
    out.push_back(std::move(b));
  }
  Stop(engine, *job);
  engine.Stop();
  return out;
}

// Waits (up to 30 s) until the window holds `bytes`; false if it never
// does. The engine finishes the fills in flight meanwhile.
bool WindowHolds(const FillShare& share, uint64_t bytes) {
  const uint64_t deadline = MonotonicNanos() + uint64_t(30e9);
  while (share.stats().held_bytes != bytes) {
    if (MonotonicNanos() > deadline) return false;
    usleep(1000);
  }
  return true;
}

// Jobs that share their fills through one window of `budget_bytes`, their
// ranks served by one engine of `threads` workers.
struct SharingNode {
  explicit SharingNode(uint64_t budget_bytes, int threads = 2)
      : share(budget_bytes),
        engine(threads, nullptr, Engine::kDefaultReadStallSeconds, &share) {}
  // A job of this window (see MakeJob); Start adds it to the engine.
  std::unique_ptr<Job> Add(uint32_t w, uint64_t start, bool train,
                           const std::string& key = "same content",
                           int64_t fail_position = -1) {
    return MakeJob(&log, w, start, train, &share, key, fail_position);
  }

  FillLog log;
  FillShare share;
  Engine engine;
};

TEST(FillShareTest, JobsAtOtherWorldSizesAndStartsGetTheirLoneBytes) {
  const std::vector<std::string> lone = LoneRun(true, 24);
  ASSERT_EQ(lone.size(), 24u);
  SharingNode node(uint64_t(64) << 20, 3);
  std::unique_ptr<Job> a = node.Add(2, 0, true);
  std::unique_ptr<Job> b = node.Add(1, 0, true);
  std::unique_ptr<Job> c = node.Add(4, 3, true);  // resumed
  // Each ring fills its slots (3 steps) at once; every later step is made
  // while all three run.
  Start(node.engine, *a);
  Start(node.engine, *b);
  Start(node.engine, *c);
  for (int s = 0; s < 18; ++s) {
    EXPECT_EQ(ReadStep(*a), lone[s]) << "a, step " << s;
    EXPECT_EQ(ReadStep(*b), lone[s]) << "b, step " << s;
    EXPECT_EQ(ReadStep(*c), lone[3 + s]) << "c, step " << 3 + s;
  }
  // Steps 3..17 were read by all three: each of their items was decoded
  // once and copied twice.
  const uint64_t per_epoch = kExamples / kGlobalBatch;  // 4 steps
  for (uint64_t step = 3; step < 18; ++step) {
    for (uint64_t i = 0; i < kGlobalBatch; ++i) {
      const uint64_t epoch = step / per_epoch;
      const uint64_t position = (step % per_epoch) * kGlobalBatch + i;
      EXPECT_EQ(node.log.Count(epoch, position), 1)
          << "step " << step << " item " << i;
    }
  }
  EXPECT_GE(a->stream->share->fills_shared() +
                b->stream->share->fills_shared() +
                c->stream->share->fills_shared(),
            2 * 15 * kGlobalBatch);
  EXPECT_EQ(a->stream->share->group_id(), c->stream->share->group_id());
  EXPECT_EQ(a->stream->share->group_streams(), 3u);
  Stop(node.engine, *a);
  Stop(node.engine, *b);
  Stop(node.engine, *c);
  node.engine.Stop();
}

TEST(FillShareTest, EvalPassesShareAndCountTheirLoneRunsErrors) {
  const std::vector<std::string> lone = LoneRun(false, 100);
  ASSERT_EQ(lone.size(), 5u);  // 37 examples, the last batch padded
  FillLog lone_log;
  uint64_t lone_errors = 0;
  for (uint64_t id = 0; id < kExamples; ++id) lone_errors += id % 5 == 0;
  SharingNode node(uint64_t(64) << 20);
  std::vector<std::unique_ptr<Job>> jobs;
  for (uint32_t w : {2u, 4u, 1u}) {
    jobs.push_back(node.Add(w, 0, false));
  }
  for (auto& j : jobs) Start(node.engine, *j);
  for (int s = 0; s < 5; ++s) {
    for (auto& j : jobs) EXPECT_EQ(ReadStep(*j), lone[s]) << "step " << s;
  }
  for (auto& j : jobs) {
    bool ended = false;
    ReadStep(*j, &ended);
    EXPECT_TRUE(ended);
    // Copied fills bring their counts: every stream counts the pass's
    // decode errors once each, as alone.
    EXPECT_EQ(j->stream->counters.decode_errors.load(), lone_errors);
  }
  // Steps 3 and 4 (13 real items) were made with all three running.
  uint64_t shared = 0;
  for (auto& j : jobs) shared += j->stream->share->fills_shared();
  EXPECT_GE(shared, 2u * 13);
  for (uint64_t position = 24; position < kExamples; ++position) {
    EXPECT_EQ(node.log.Count(0, position), 1) << "position " << position;
  }
  for (auto& j : jobs) Stop(node.engine, *j);
  node.engine.Stop();
}

TEST(FillShareTest, AJobThatDoesNotReadHoldsNobodyAndGetsItsBytesLater) {
  const std::vector<std::string> lone = LoneRun(true, 60);
  ASSERT_EQ(lone.size(), 60u);
  // Room for 5 items: far less than how far the reader runs ahead.
  uint64_t item_bytes = FillShare::kEntryOverheadBytes;
  for (uint64_t n : {uint64_t(8), uint64_t(kPayload)}) {
    item_bytes += (n + 63) / 64 * 64;
  }
  const uint64_t budget = 5 * item_bytes;
  SharingNode node(budget);
  std::unique_ptr<Job> reader = node.Add(1, 0, true);
  std::unique_ptr<Job> paused = node.Add(2, 0, true);
  Start(node.engine, *reader);
  Start(node.engine, *paused);
  EXPECT_EQ(ReadStep(*paused), lone[0]);
  // The paused job's ring is full; the reader goes on without it (a
  // lockstep would leave it waiting here, and the read's deadline fail).
  for (int s = 0; s < 50; ++s) EXPECT_EQ(ReadStep(*reader), lone[s]);
  for (int s = 1; s < 45; ++s) {
    EXPECT_EQ(ReadStep(*paused), lone[s]) << "paused, step " << s;
  }
  const FillShare::Stats stats = node.share.stats();
  EXPECT_LE(stats.max_held_bytes, budget);
  EXPECT_GT(stats.max_held_bytes, 0u);
  // Far behind the window, the paused job filled for itself.
  EXPECT_GT(paused->stream->share->fills_made(), 20 * kGlobalBatch);
  Stop(node.engine, *reader);
  Stop(node.engine, *paused);
  node.engine.Stop();
}

TEST(FillShareTest, AJobThatGoesFreesWhatOnlyItWanted) {
  SharingNode node(uint64_t(64) << 20);
  std::unique_ptr<Job> reader = node.Add(1, 0, true);
  std::unique_ptr<Job> idle = node.Add(1, 0, true);
  Start(node.engine, *reader);
  Start(node.engine, *idle);
  for (int s = 0; s < 20; ++s) ReadStep(*reader);
  // What the reader filled since is kept for the idle job, which is
  // behind it.
  EXPECT_GT(node.share.stats().held_bytes, 0u);
  EXPECT_EQ(node.share.stats().groups_sharing, 1u);
  Stop(node.engine, *idle);  // as when its client is killed
  EXPECT_TRUE(WindowHolds(node.share, 0)) << node.share.stats().held_bytes;
  // Alone again, the reader keeps nothing.
  for (int s = 0; s < 10; ++s) ReadStep(*reader);
  EXPECT_TRUE(WindowHolds(node.share, 0)) << node.share.stats().held_bytes;
  EXPECT_EQ(node.share.stats().groups_sharing, 0u);
  Stop(node.engine, *reader);
  node.engine.Stop();
}

TEST(FillShareTest, AFillThatFailsIsNeverSharedAndHoldsNobody) {
  const std::vector<std::string> lone = LoneRun(true, 12);
  SharingNode node(uint64_t(64) << 20);
  // The failing job's workload cannot fill position 20 of epoch 0 (step
  // 2); the other's can. Same key: they share everything else.
  std::unique_ptr<Job> failing = node.Add(1, 0, true, "same content", 20);
  std::unique_ptr<Job> good = node.Add(2, 0, true);
  Start(node.engine, *failing);
  Start(node.engine, *good);
  for (int s = 0; s < 12; ++s) EXPECT_EQ(ReadStep(*good), lone[s]);
  // The failing job copied that item from the other, or failed on it:
  // what it delivers is its lone bytes either way.
  for (int s = 0; s < 12; ++s) {
    bool ended = false;
    const std::string b = ReadStep(*failing, &ended);
    if (ended) {
      EXPECT_EQ(s, 2);
      break;
    }
    EXPECT_EQ(b, lone[s]) << "step " << s;
  }
  Stop(node.engine, *failing);
  Stop(node.engine, *good);
  node.engine.Stop();
}

// The claim protocol itself, one call at a time: a worker that finds an
// item being filled waits; a claim given up (its fill failed) settles the
// wait, and the waiter then fills the item, which the first one copies.
TEST(FillShareTest, AGivenUpClaimLetsItsWaiterFillTheItem) {
  FillLog log;
  FillShare share(uint64_t(1) << 20);
  std::unique_ptr<Job> a = MakeJob(&log, 1, 0, true, &share);
  std::unique_ptr<Job> b = MakeJob(&log, 1, 0, true, &share);
  ShareMember& ma = *a->stream->share;
  ShareMember& mb = *b->stream->share;
  ma.AddRank(a->ranks->producers()[0].get());
  mb.AddRank(b->ranks->producers()[0].get());
  ItemRef item;
  item.seed = kSeed;
  item.epoch = 1;
  item.position = 9;
  item.id = 4;
  uint64_t id_a = 0, id_b = 0;
  uint8_t payload_a[kPayload] = {}, payload_b[kPayload] = {};
  uint8_t* out_a[] = {reinterpret_cast<uint8_t*>(&id_a), payload_a};
  uint8_t* out_b[] = {reinterpret_cast<uint8_t*>(&id_b), payload_b};
  WorkloadCounters counters_a, counters_b, counted;

  ShareTicket ta, tb;
  ASSERT_EQ(ma.BeginItem(6, item, out_a, &counters_a, &ta),
            ShareMember::Begin::kFill);
  ASSERT_TRUE(ta.claimed());  // b may want step 6
  ASSERT_EQ(mb.BeginItem(6, item, out_b, &counters_b, &tb),
            ShareMember::Begin::kWait);
  EXPECT_FALSE(tb.settled());
  ma.EndItem(&ta, absl::DataLossError("unreadable"), out_a, counted);
  EXPECT_FALSE(ta.claimed());
  EXPECT_TRUE(tb.settled());

  // The waiter runs again: the item is b's to fill now.
  ASSERT_EQ(mb.BeginItem(6, item, out_b, &counters_b, &tb),
            ShareMember::Begin::kFill);
  ASSERT_TRUE(tb.claimed());
  uint64_t seven = 7;
  memcpy(tb.targets()[0], &seven, sizeof(seven));
  memset(tb.targets()[1], 0xab, kPayload);
  counted.decode_errors = 1;
  mb.EndItem(&tb, absl::OkStatus(), out_b, counted);
  EXPECT_EQ(id_b, 7u);  // the window buffer's bytes, now in b's slot
  EXPECT_EQ(payload_b[kPayload - 1], 0xab);

  ASSERT_EQ(ma.BeginItem(6, item, out_a, &counters_a, &ta),
            ShareMember::Begin::kCopied);
  EXPECT_EQ(id_a, 7u);
  EXPECT_EQ(payload_a[0], 0xab);
  EXPECT_EQ(counters_a.decode_errors.load(), 1u);  // the fill's count
  EXPECT_EQ(ma.fills_shared(), 1u);
  EXPECT_EQ(mb.fills_made(), 1u);
  // Both have it: the window lets it go.
  EXPECT_EQ(share.stats().held_bytes, share.stats().max_held_bytes);
  ma.RemoveRank(a->ranks->producers()[0].get());
  mb.RemoveRank(b->ranks->producers()[0].get());
  EXPECT_EQ(share.stats().held_bytes, 0u);
  a->ranks->Retire();  // unlinks the rings; neither joined an engine
  b->ranks->Retire();
}

TEST(FillShareTest, StreamsOfOtherKeysOrAloneShareNothing) {
  const std::vector<std::string> lone = LoneRun(true, 10);
  SharingNode node(uint64_t(64) << 20);
  std::unique_ptr<Job> a = node.Add(1, 0, true, "one owner");
  std::unique_ptr<Job> b = node.Add(1, 0, true, "another");
  EXPECT_NE(a->stream->share->group_id(), b->stream->share->group_id());
  Start(node.engine, *a);
  Start(node.engine, *b);
  for (int s = 0; s < 10; ++s) {
    EXPECT_EQ(ReadStep(*a), lone[s]);
    EXPECT_EQ(ReadStep(*b), lone[s]);
  }
  EXPECT_EQ(a->stream->share->fills_shared(), 0u);
  EXPECT_EQ(b->stream->share->fills_shared(), 0u);
  EXPECT_EQ(node.share.stats().max_held_bytes, 0u);  // the window was not used
  Stop(node.engine, *a);
  Stop(node.engine, *b);
  node.engine.Stop();
  // No budget: nobody joins.
  FillShare off(0);
  EXPECT_EQ(off.Join("k", {8}), nullptr);
}

// A copying stream's read-ahead drops what it read for items it copied
// (ReadAheadStream::Forgo), so that its lane's share is not held by bytes
// nobody will take.
TEST(FillShareTest, ForgoneReadsAheadLeaveTheBuffer) {
  ReadAhead::Options o;
  o.budget_bytes = 1 << 20;
  o.io_threads = 2;
  ReadAhead ra(o);
  auto stream =
      ra.AddStream("s", [](uint64_t id, std::string* bytes, int64_t* label) {
        bytes->assign(1000, char('a' + id % 26));
        *label = 0;
        return absl::OkStatus();
      });
  ASSERT_NE(stream, nullptr);
  const ReadAhead::LaneId lane = ra.AddLane(
      stream,
      [](uint64_t step, std::vector<ReadAheadKey>* keys) {
        for (uint64_t i = 0; i < 4; ++i)
          keys->push_back({0, step * 4 + i, step * 4 + i});
        return step < 3;
      },
      0);
  ra.WaitIdleForTest();
  ASSERT_EQ(stream->stats().bytes_buffered, 12u * 1000);
  ra.Decoding(lane, 0);
  for (uint64_t i = 0; i < 4; ++i) stream->Forgo({0, i, i});
  EXPECT_EQ(stream->stats().bytes_buffered, 8u * 1000);
  ra.RemoveLane(lane);
}

}  // namespace
}  // namespace batchd

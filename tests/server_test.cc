// End to end through a real daemon: which examples each rank gets, that the
// bytes are the same whatever the threads, world size or node split, resume,
// and every bad spec refused with a clear error and nothing left behind.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "batchd/loader.h"
#include "workloads/sampler.h"
#include "tests/synthetic_stream.h"
#include "tests/test_server.h"
#include "workloads/synthetic.h"

namespace batchd {
namespace {

using testing::TestServer;

constexpr uint64_t kExamples = 1000;
constexpr uint64_t kPayload = 40;

LoaderOptions Options(const TestServer& server, const std::string& stream,
                      uint64_t g, int w, int rank, uint64_t seed = 1) {
  LoaderOptions o = testutil::SyntheticStream(server.address(), stream, g, w,
                                              rank, kExamples, kPayload);
  o.seed = seed;
  o.slots = 3;
  o.timeout_seconds = 30;
  return o;
}

std::vector<uint64_t> U64(const Batch& b, const std::string& name) {
  const Tensor* t = b.tensor(name);
  EXPECT_NE(t, nullptr) << name;
  if (t == nullptr) return {};
  std::vector<uint64_t> v(t->nbytes / 8);
  memcpy(v.data(), t->data, t->nbytes);
  return v;
}

// One global batch as the ranks saw it, concatenated in rank order.
struct GlobalBatch {
  uint64_t step = 0;
  std::vector<uint64_t> ids, epochs, positions;
  std::string bytes;  // every tensor's bytes, rank by rank
};

// Opens W loaders (one per rank, in this process) from `opts_for_rank` and
// pulls `steps` global batches.
template <typename F>
std::vector<GlobalBatch> Pull(int w, int steps, F opts_for_rank) {
  std::vector<std::unique_ptr<Loader>> loaders;
  for (int r = 0; r < w; ++r) {
    absl::StatusOr<std::unique_ptr<Loader>> l = Loader::Open(opts_for_rank(r));
    EXPECT_TRUE(l.ok()) << l.status();
    if (!l.ok()) return {};
    loaders.push_back(std::move(*l));
  }
  std::vector<GlobalBatch> out(steps);
  for (int s = 0; s < steps; ++s) {
    for (int r = 0; r < w; ++r) {
      absl::StatusOr<Batch> b = loaders[r]->Next();
      EXPECT_TRUE(b.ok()) << b.status();
      if (!b.ok()) return {};
      GlobalBatch& gb = out[s];
      if (r == 0) gb.step = b->step();
      EXPECT_EQ(b->step(), gb.step) << "rank " << r;
      for (uint64_t v : U64(*b, "ids")) gb.ids.push_back(v);
      for (uint64_t v : U64(*b, "epochs")) gb.epochs.push_back(v);
      for (uint64_t v : U64(*b, "positions")) gb.positions.push_back(v);
      for (const Tensor& t : b->tensors()) {
        gb.bytes.append(static_cast<const char*>(t.data), t.nbytes);
      }
    }
  }
  return out;
}

std::vector<GlobalBatch> PullOne(const TestServer& server,
                                 const std::string& stream, uint64_t g, int w,
                                 int steps, uint64_t seed = 1,
                                 uint64_t start = 0) {
  return Pull(w, steps, [&](int r) {
    LoaderOptions o = Options(server, stream, g, w, r, seed);
    o.start_step = start;
    return o;
  });
}

TEST(ServerTest, RanksGetDisjointCompleteSlicesOfTheGlobalOrder) {
  TestServer server("disjoint");
  ASSERT_TRUE(server.Start());
  const uint64_t g = 48;
  const uint64_t steps_per_epoch = kExamples / g;  // 20; 40 dropped
  for (int w : {1, 2, 3, 4, 8}) {
    SCOPED_TRACE("W=" + std::to_string(w));
    std::vector<GlobalBatch> batches =
        PullOne(server, "dc" + std::to_string(w), g, w,
                int(2 * steps_per_epoch));
    ASSERT_EQ(batches.size(), 2 * steps_per_epoch);
    std::vector<std::set<uint64_t>> per_epoch(2);
    for (uint64_t s = 0; s < batches.size(); ++s) {
      const GlobalBatch& gb = batches[s];
      const uint64_t epoch = s / steps_per_epoch;
      EXPECT_EQ(gb.step, s);
      ASSERT_EQ(gb.ids.size(), g);
      const EpochPermutation perm(kExamples, 1, epoch);
      for (uint64_t i = 0; i < g; ++i) {
        // Exactly positions [sG, (s+1)G) of this epoch's permutation, with
        // rank r holding the r-th run of G/W.
        const uint64_t pos = (s % steps_per_epoch) * g + i;
        EXPECT_EQ(gb.positions[i], pos);
        EXPECT_EQ(gb.epochs[i], epoch);
        EXPECT_EQ(gb.ids[i], perm(pos));
        EXPECT_LT(gb.ids[i], kExamples);
        EXPECT_TRUE(per_epoch[epoch].insert(gb.ids[i]).second)
            << "id " << gb.ids[i] << " twice in epoch " << epoch;
      }
    }
    for (int e = 0; e < 2; ++e) {
      EXPECT_EQ(per_epoch[e].size(), steps_per_epoch * g);  // all but 40
    }
    EXPECT_NE(per_epoch[0], per_epoch[1]);  // another epoch drops others
  }
}

TEST(ServerTest, PayloadBytesAreTheExamplesOwn) {
  TestServer server("payload");
  ASSERT_TRUE(server.Start());
  std::vector<GlobalBatch> batches = PullOne(server, "p", 16, 2, 3, 9);
  ASSERT_EQ(batches.size(), 3u);
  for (const GlobalBatch& gb : batches) {
    // Rank 1's payload tensor follows its ids/epochs/positions.
    for (size_t i = 0; i < gb.ids.size(); ++i) {
      ItemRef ex;
      ex.seed = 9;
      ex.epoch = gb.epochs[i];
      ex.position = gb.positions[i];
      ex.id = gb.ids[i];
      std::string want(kPayload, '\0');
      SyntheticPayload(ex, reinterpret_cast<uint8_t*>(want.data()), kPayload);
      EXPECT_NE(gb.bytes.find(want), std::string::npos) << "example " << i;
    }
  }
}

std::vector<std::string> GlobalBytes(const std::vector<GlobalBatch>& batches,
                                     int w) {
  // Regroup the rank-ordered bytes tensor by tensor so that W=1 and W=4
  // compare: per tensor, rank slices concatenated.
  std::vector<std::string> out;
  for (const GlobalBatch& gb : batches) {
    std::string s;
    for (uint64_t v : gb.ids) s.append(reinterpret_cast<const char*>(&v), 8);
    for (uint64_t v : gb.positions) {
      s.append(reinterpret_cast<const char*>(&v), 8);
    }
    out.push_back(s + "|" + std::to_string(gb.bytes.size()));
  }
  return out;
}

// Every example's payload, keyed by position, so that content compares across
// world sizes whatever the rank split.
std::map<uint64_t, std::string> PayloadByPosition(
    const std::vector<GlobalBatch>& batches, int w) {
  std::map<uint64_t, std::string> out;
  for (const GlobalBatch& gb : batches) {
    const size_t per_rank = gb.ids.size() / w;
    const size_t rank_bytes = gb.bytes.size() / w;
    for (int r = 0; r < w; ++r) {
      // Within a rank: ids, epochs, positions (8 B each), then payloads.
      const size_t payload_at = r * rank_bytes + per_rank * 24;
      for (size_t i = 0; i < per_rank; ++i) {
        const uint64_t pos = gb.epochs[r * per_rank + i] * 1000000 +
                             gb.positions[r * per_rank + i];
        out[pos] = gb.bytes.substr(payload_at + i * kPayload, kPayload);
      }
    }
  }
  return out;
}

TEST(ServerTest, SameBytesAcrossRunsThreadsAndWorldSizes) {
  TestServer one_thread("t1"), four_threads("t4");
  ASSERT_TRUE(one_thread.Start({}, 1));
  ASSERT_TRUE(four_threads.Start({}, 4));
  const int steps = 45;  // crosses two epoch boundaries
  auto a = PullOne(one_thread, "det", 32, 1, steps);
  auto a_again = PullOne(one_thread, "det2", 32, 1, steps);
  auto b = PullOne(four_threads, "det", 32, 4, steps);
  ASSERT_EQ(a.size(), size_t(steps));
  ASSERT_EQ(b.size(), size_t(steps));
  EXPECT_EQ(GlobalBytes(a, 1), GlobalBytes(a_again, 1));
  for (int s = 0; s < steps; ++s) {
    EXPECT_EQ(a[s].ids, b[s].ids) << "step " << s;
    EXPECT_EQ(a[s].bytes, a_again[s].bytes) << "step " << s;
  }
  EXPECT_EQ(PayloadByPosition(a, 1), PayloadByPosition(b, 4));
  auto other_seed = PullOne(four_threads, "det3", 32, 4, 2, /*seed=*/2);
  ASSERT_EQ(other_seed.size(), 2u);
  EXPECT_NE(other_seed[0].ids, b[0].ids);
}

TEST(ServerTest, StartStepResumesExactly) {
  TestServer server("resume");
  ASSERT_TRUE(server.Start());
  auto full = PullOne(server, "full", 40, 2, 30);
  auto resumed = PullOne(server, "resumed", 40, 2, 30 - 17, 1, 17);
  ASSERT_EQ(resumed.size(), 13u);
  for (size_t i = 0; i < resumed.size(); ++i) {
    EXPECT_EQ(resumed[i].step, 17 + i);
    EXPECT_EQ(resumed[i].bytes, full[17 + i].bytes) << "step " << 17 + i;
  }
}

TEST(ServerTest, TwoNodesServeWhatOneServes) {
  TestServer single("single"), node0("node0"), node1("node1");
  ASSERT_TRUE(single.Start());
  ASSERT_TRUE(node0.Start());
  ASSERT_TRUE(node1.Start());
  auto one = PullOne(single, "job", 32, 4, 12);
  auto split = Pull(4, 12, [&](int r) {
    return Options(r < 2 ? node0 : node1, "job", 32, 4, r);
  });
  ASSERT_EQ(split.size(), 12u);
  for (int s = 0; s < 12; ++s) EXPECT_EQ(one[s].bytes, split[s].bytes);
}

TEST(ServerTest, ClosedLoaderFreesItsRingAndTheRankReattaches) {
  TestServer server("detach");
  ASSERT_TRUE(server.Start());
  {
    auto l = Loader::Open(Options(server, "d", 8, 2, 1));
    ASSERT_TRUE(l.ok()) << l.status();
    ASSERT_EQ(server.Segments().size(), 1u);
    // <prefix>.<daemon uid>.<owner uid>.<stream>.<rank>.<64 random bits>:
    // unguessable, so that another user cannot take the name first, and
    // apart from another owner's stream of the same name.
    EXPECT_TRUE(std::regex_match(
        server.Segments()[0],
        std::regex(server.prefix() + "\\." + std::to_string(getuid()) + "\\." +
                   std::to_string(getuid()) + "\\.d\\.1\\.[0-9a-f]{16}")))
        << server.Segments()[0];
    EXPECT_EQ("/" + server.Segments()[0], (*l)->info().segment);
  }
  for (int i = 0; i < 300 && !server.Segments().empty(); ++i) usleep(10000);
  EXPECT_TRUE(server.Segments().empty());
  auto again = PullOne(server, "d", 8, 2, 1);
  EXPECT_EQ(again.size(), 1u);
}

// The loop of batchd/loader.h: one epoch a loop, as the daemon marks it.
std::vector<uint64_t> EpochSteps(Loader& l) {
  std::vector<uint64_t> steps;
  for (bool more = true; more;) {
    absl::StatusOr<Batch> b = l.NextInEpoch();
    if (absl::IsOutOfRange(b.status())) break;
    EXPECT_TRUE(b.ok()) << b.status();
    if (!b.ok()) break;
    more = !b->last_in_epoch();
    steps.push_back(b->step());
  }
  return steps;
}

TEST(ServerTest, EpochLoopsEndAtEachEpochsLastBatch) {
  TestServer server("epochs");
  ASSERT_TRUE(server.Start());
  // 1000 examples, G = 64: train epochs of 15 steps (40 dropped).
  auto l = Loader::Open(Options(server, "ep", 64, 2, 1));
  ASSERT_TRUE(l.ok()) << l.status();
  ASSERT_TRUE((*l)->EpochSteps().ok());
  EXPECT_EQ(*(*l)->EpochSteps(), 15u);
  std::vector<uint64_t> want(15);
  for (uint64_t k = 0; k < 15; ++k) want[k] = k;
  EXPECT_EQ(EpochSteps(**l), want);
  EXPECT_EQ((*l)->State().next_step, 15u);
  for (uint64_t& s : want) s += 15;
  EXPECT_EQ(EpochSteps(**l), want);
  // Next() runs on across epochs; each batch says where its epoch lies.
  absl::StatusOr<Batch> b = (*l)->Next();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->step(), 30u);
  EXPECT_EQ(b->epoch(), 2u);
  EXPECT_EQ(b->epoch_first_step(), 30u);
  EXPECT_EQ(b->epoch_steps(), 15u);
  EXPECT_FALSE(b->last_in_epoch());
  // Evaluation: one epoch of 16 steps, the last padded, then the end.
  LoaderOptions o = Options(server, "ep-eval", 64, 2, 0);
  o.split = "validation";
  auto e = Loader::Open(o);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(*(*e)->EpochSteps(), 16u);
  EXPECT_EQ(EpochSteps(**e).size(), 16u);
  EXPECT_TRUE(EpochSteps(**e).empty());
}

TEST(ServerTest, EvalStreamIsOnePassPaddedWithWeights) {
  TestServer server("eval");
  ASSERT_TRUE(server.Start());
  std::vector<std::unique_ptr<Loader>> loaders;
  for (int r = 0; r < 2; ++r) {
    LoaderOptions o = Options(server, "ev", 64, 2, r);
    o.split = "validation";
    auto l = Loader::Open(o);
    ASSERT_TRUE(l.ok()) << l.status();
    loaders.push_back(std::move(*l));
  }
  // 1000 examples, G=64: 15 full batches and one with 40 real examples.
  std::set<uint64_t> seen;
  for (int s = 0; s < 16; ++s) {
    for (int r = 0; r < 2; ++r) {
      absl::StatusOr<Batch> b = loaders[r]->Next();
      ASSERT_TRUE(b.ok()) << b.status();
      const Tensor* w = b->tensor("weights");
      ASSERT_NE(w, nullptr);
      const float* weights = static_cast<const float*>(w->data);
      std::vector<uint64_t> ids = U64(*b, "ids");
      uint32_t real = 0;
      for (size_t i = 0; i < ids.size(); ++i) {
        if (weights[i] == 1.0f) {
          ++real;
          EXPECT_EQ(ids[i], s * 64 + r * 32 + i);
          seen.insert(ids[i]);
        } else {
          EXPECT_EQ(weights[i], 0.0f);
        }
      }
      EXPECT_EQ(real, b->valid_count());
      if (s == 15) {
        EXPECT_EQ(real, r == 0 ? 32u : 8u);
      }
    }
  }
  EXPECT_EQ(seen.size(), kExamples);
  for (int r = 0; r < 2; ++r) {
    absl::StatusOr<Batch> end = loaders[r]->Next();
    EXPECT_TRUE(absl::IsOutOfRange(end.status())) << end.status();
  }
}

// ------------------------------------------------------------- bad input

class BadInputTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(server_.Start()); }

  // Opens with `o`, expects failure mentioning `words`, then checks that the
  // daemon still serves another stream and left no segment behind.
  void ExpectRefused(const LoaderOptions& o, const std::string& words) {
    const size_t before = server_.Segments().size();
    absl::StatusOr<std::unique_ptr<Loader>> l = Loader::Open(o);
    ASSERT_FALSE(l.ok()) << "accepted a bad spec";
    EXPECT_NE(l.status().message().find(words), std::string::npos)
        << l.status();
    EXPECT_EQ(server_.Segments().size(), before);
    auto good = Loader::Open(Options(server_, "good" + std::to_string(n_++),
                                     8, 1, 0));
    ASSERT_TRUE(good.ok()) << good.status();
    EXPECT_TRUE((*good)->Next().ok());
    // The daemon frees the closed rank's ring when it next looks: wait for
    // it, so that the next call's count before is not taken while it goes.
    good->reset();
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (server_.Segments().size() != before &&
           std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    EXPECT_EQ(server_.Segments().size(), before)
        << "the ring of a closed rank is still there after 60 s";
  }

  TestServer server_{"bad"};
  int n_ = 0;
};

TEST_F(BadInputTest, BatchNotDivisibleByWorld) {
  ExpectRefused(Options(server_, "s", 30, 4, 0), "not divisible by world_size");
}

TEST_F(BadInputTest, RankOutOfRange) {
  ExpectRefused(Options(server_, "s", 32, 4, 4), "rank 4 is out of range");
}

TEST_F(BadInputTest, UnknownWorkload) {
  LoaderOptions o = Options(server_, "s", 32, 1, 0);
  o.workload = "imagenett";
  ExpectRefused(o, "unknown workload 'imagenett'");
}

TEST_F(BadInputTest, DataOutsideRoot) {
  const std::string outside = testing::MakeTempDir();
  mkdir((server_.dir() + "/inside").c_str(), 0755);
  ASSERT_EQ(symlink(outside.c_str(), (server_.dir() + "/escape").c_str()), 0);
  LoaderOptions o = Options(server_, "s", 32, 1, 0);
  o.data = outside;  // absolute, elsewhere
  ExpectRefused(o, "outside the server's --data-root");
  o.data = "inside/../../" + outside.substr(5);  // through ..
  ExpectRefused(o, "outside the server's --data-root");
  o.data = "escape";  // through a symlink
  ExpectRefused(o, "outside the server's --data-root");
  o.data = "inside";  // and a path inside is fine
  EXPECT_TRUE(Loader::Open(o).ok());
}

TEST_F(BadInputTest, SecondSpecDiffers) {
  auto first = Loader::Open(Options(server_, "job", 32, 2, 0, /*seed=*/1));
  ASSERT_TRUE(first.ok()) << first.status();
  ExpectRefused(Options(server_, "job", 32, 2, 1, /*seed=*/2),
                "seed is 2 here but 1 in the existing stream");
}

TEST_F(BadInputTest, SharedMemoryTooSmall) {
  LoaderOptions o = Options(server_, "huge", 64, 1, 0);
  o.options["payload_bytes"] = std::to_string(64 << 20);  // 4 GiB a slot
  o.slots = 1000;
  ExpectRefused(o, "shared memory too small");
}

TEST_F(BadInputTest, SecondDaemonOnTheSameSocketIsRefused) {
  TestServer second("bad", server_.dir());
  std::string err;
  const int status = second.RunExpectingExit(&err);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 1) << status;
  EXPECT_NE(err.find("another batchd (pid " + std::to_string(server_.pid()) +
                     ") already serves"),
            std::string::npos)
      << err;
  // The first still serves.
  auto l = Loader::Open(Options(server_, "still", 8, 1, 0));
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_TRUE((*l)->Next().ok());
}

TEST(ServerTest, SigtermUnlinksEverySegment) {
  TestServer server("term");
  ASSERT_TRUE(server.Start());
  LoaderOptions o0 = Options(server, "t", 8, 2, 0);
  LoaderOptions o1 = Options(server, "t", 8, 2, 1);
  o0.reconnect_seconds = o1.reconnect_seconds = 0;  // no daemon follows
  auto l0 = Loader::Open(o0);
  auto l1 = Loader::Open(o1);
  ASSERT_TRUE(l0.ok() && l1.ok());
  EXPECT_EQ(server.Segments().size(), 2u);
  const int status = server.Stop();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  EXPECT_TRUE(server.Segments().empty());
  // The loaders see the daemon exiting, not a hang, once the published
  // batches are used up.
  absl::Status last;
  for (int i = 0; i < 5 && last.ok(); ++i) last = (*l0)->Next().status();
  EXPECT_FALSE(last.ok());
}

}  // namespace
}  // namespace batchd

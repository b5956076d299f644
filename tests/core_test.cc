// The core without gRPC, in one process: many ranks and streams on a small
// pool, read concurrently. Runs clean under ThreadSanitizer (the gRPC paths
// are covered by server_test).
#include "server/core.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <thread>
#include <vector>

#include "client/process.h"
#include "client/ring.h"

namespace batchd {
namespace {

StreamSpec Spec(const std::string& name, uint32_t w) {
  StreamSpec s;
  s.name = name;
  s.workload = "synthetic";
  s.split = "train";
  s.global_batch_size = 64;
  s.world_size = w;
  s.seed = 3;
  s.slots = 3;
  s.options = {{"examples", "5000"}, {"payload_bytes", "256"}};
  return s;
}

TEST(CoreTest, ManyRanksOfTwoStreamsReadConcurrently) {
  CoreOptions o;
  o.data_root = "/tmp";
  o.shm_prefix = "bdcore" + std::to_string(getpid());
  o.threads = 3;
  auto core = Core::Create(o);
  ASSERT_TRUE(core.ok()) << core.status();
  const int steps = 200;
  std::vector<std::thread> readers;
  std::atomic<int> failures{0};
  for (const char* stream : {"a", "b"}) {
    for (uint32_t r = 0; r < 4; ++r) {
      auto opened = (*core)->OpenStream(Spec(stream, 4), r, getpid());
      ASSERT_TRUE(opened.ok()) << opened.status();
      readers.emplace_back([seg = opened->segment, r, &failures] {
        auto reader = RingReader::Attach(seg);
        if (!reader.ok()) {
          ++failures;
          return;
        }
        for (int s = 0; s < steps; ++s) {
          absl::StatusOr<uint64_t> pos = (*reader)->Acquire(20.0);
          if (!pos.ok() || (*reader)->Slot(*pos)->step != uint64_t(s) ||
              (*reader)->Slot(*pos)->position % 64 != r * 16) {
            ++failures;
            return;
          }
          (*reader)->Release(*pos);
        }
      });
    }
  }
  // Status is read while the workers fill.
  for (int i = 0; i < 20; ++i) {
    ServerStatusData st = (*core)->GetStatus();
    EXPECT_EQ(st.streams.size(), 2u);
    EXPECT_EQ(st.worker_threads, 3u);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  for (std::thread& t : readers) t.join();
  EXPECT_EQ(failures.load(), 0);
  ServerStatusData st = (*core)->GetStatus();
  for (const StreamStatusData& s : st.streams) {
    for (const RankStatusData& r : s.ranks) {
      // Counted across the ring's life, even once the reader let go.
      EXPECT_GE(r.examples, uint64_t(steps) * 16);
    }
  }
}

TEST(CoreTest, DeadRankIsReapedAndCanReattach) {
  CoreOptions o;
  o.data_root = "/tmp";
  o.shm_prefix = "bdcorer" + std::to_string(getpid());
  o.threads = 1;
  auto core = Core::Create(o);
  ASSERT_TRUE(core.ok());
  auto opened = (*core)->OpenStream(Spec("s", 1), 0, getpid());
  ASSERT_TRUE(opened.ok());
  {
    auto reader = RingReader::Attach(opened->segment);
    ASSERT_TRUE(reader.ok());
  }  // let go
  std::vector<std::string> freed = (*core)->ReapDeadClients();
  // The supervisor thread may have got there first.
  EXPECT_TRUE(freed.empty() || freed[0] == opened->segment);
  ServerStatusData st = (*core)->GetStatus();
  ASSERT_EQ(st.streams.size(), 1u);
  EXPECT_FALSE(st.streams[0].ranks[0].attached);
  StreamSpec again = Spec("s", 1);
  again.start_step = 9;  // a re-attaching rank may resume elsewhere
  auto reopened = (*core)->OpenStream(again, 0, getpid());
  ASSERT_TRUE(reopened.ok()) << reopened.status();
  auto reader = RingReader::Attach(reopened->segment);
  ASSERT_TRUE(reader.ok());
  absl::StatusOr<uint64_t> pos = (*reader)->Acquire(10.0);
  ASSERT_TRUE(pos.ok());
  EXPECT_EQ((*reader)->Slot(*pos)->step, 9u);
}

}  // namespace
}  // namespace batchd

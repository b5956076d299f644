// The ring protocol on its own: layout offsets, wrap-around, back-pressure,
// out-of-order release, version check, reservation, liveness across real
// processes.
#include "ring/ring.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"
#include "base/clock.h"
#include "tests/test_server.h"
#include "tests/testutil.h"

namespace batchd {
namespace {

std::string UniqueName(const std::string& what) {
  static int n = 0;
  return "/bdring" + std::to_string(getpid()) + "." + what + "." +
         std::to_string(n++);
}

RingGeometry Geometry(uint32_t slots, uint64_t payload) {
  RingGeometry g;
  g.slot_count = slots;
  g.payload_bytes = payload;
  g.stream_name = "ring-test";
  return g;
}

// Writes `value` as the slot's first payload word and publishes it.
void Produce(RingWriter& w, uint64_t value) {
  uint64_t pos;
  ASSERT_TRUE(w.TryClaim(&pos));
  memcpy(w.SlotBase(pos) + shm::kSlotHeaderBytes, &value, 8);
  w.Slot(pos)->step = value;
  w.Publish(pos);
}

uint64_t Value(RingReader& r, uint64_t pos) {
  uint64_t v;
  memcpy(&v, r.SlotBase(pos) + shm::kSlotHeaderBytes, 8);
  return v;
}

// Tests of one ring, its writer w() and a reader r() attached to it.
class RingTest : public ::testing::Test {
 protected:
  // Makes ring `what` of `slots` slots of 64 bytes; false when it could not.
  bool Make(const std::string& what, uint32_t slots) {
    ring_ = testutil::MakeRing(UniqueName(what), Geometry(slots, 64));
    return ring_.ok();
  }
  RingWriter& w() { return *ring_.writer; }
  RingReader& r() { return *ring_.reader; }

 private:
  testutil::TestRing ring_;
};

TEST(ShmLayoutTest, OffsetsArePinned) {
  // The same numbers as the diagram in shm_layout.h; the static_asserts
  // there pin them at compile time, this pins them for readers of tests.
  EXPECT_EQ(offsetof(shm::RingHeader, layout_version), 8u);
  EXPECT_EQ(offsetof(shm::RingHeader, write_pos), 64u);
  EXPECT_EQ(offsetof(shm::RingHeader, data_futex), 72u);
  EXPECT_EQ(offsetof(shm::RingHeader, data_waiters), 80u);
  EXPECT_EQ(offsetof(shm::RingHeader, server_heartbeat_ns), 128u);
  EXPECT_EQ(offsetof(shm::RingHeader, released), 192u);
  EXPECT_EQ(offsetof(shm::RingHeader, reserved_consumer), 200u);
  EXPECT_EQ(offsetof(shm::RingHeader, client_pid), 256u);
  EXPECT_EQ(offsetof(shm::RingHeader, client_detached), 296u);
  EXPECT_EQ(offsetof(shm::RingHeader, stream_name), 320u);
  EXPECT_EQ(offsetof(shm::SlotHeader, epoch_first_step), 96u);
  EXPECT_EQ(offsetof(shm::SlotHeader, epoch_steps), 104u);
  EXPECT_EQ(offsetof(shm::SlotHeader, tensors), 128u);
  EXPECT_EQ(sizeof(shm::TensorDesc), 128u);
  EXPECT_EQ(shm::kSlotTableOffset, 4096u);
  EXPECT_EQ(offsetof(shm::SlotTable, slot_of), 4096u);
  EXPECT_EQ(shm::kHeaderBytes, 12288u);
  EXPECT_EQ(shm::kLayoutVersion, 2u);
  // Producer and consumer counters on different cache lines.
  EXPECT_GE(offsetof(shm::RingHeader, released) -
                offsetof(shm::RingHeader, write_pos),
            64u);
}

TEST_F(RingTest, WrapsAroundInOrder) {
  ASSERT_TRUE(Make("wrap", 3));
  for (uint64_t i = 0; i < 20; ++i) {
    Produce(w(), 1000 + i);
    absl::StatusOr<uint64_t> pos = r().Acquire(1.0);
    ASSERT_TRUE(pos.ok()) << pos.status();
    EXPECT_EQ(*pos, i);
    EXPECT_EQ(Value(r(), *pos), 1000 + i);
    r().Release(*pos);
  }
  EXPECT_EQ(w().released(), 20u);
}

TEST_F(RingTest, FullRingPushesBack) {
  ASSERT_TRUE(Make("full", 2));
  Produce(w(), 1);
  Produce(w(), 2);
  uint64_t pos;
  EXPECT_FALSE(w().TryClaim(&pos)) << "claimed a slot the client holds";
  absl::StatusOr<uint64_t> a = r().Acquire(1.0);
  ASSERT_TRUE(a.ok());
  EXPECT_FALSE(w().TryClaim(&pos)) << "acquired is not released";
  r().Release(*a);
  EXPECT_TRUE(w().TryClaim(&pos));
  EXPECT_EQ(pos, 2u);
}

TEST_F(RingTest, OutOfOrderReleaseFreesEachSlotAtOnce) {
  ASSERT_TRUE(Make("ooo", 4));
  for (uint64_t i = 0; i < 4; ++i) Produce(w(), i);
  std::vector<uint64_t> held;
  for (int i = 0; i < 4; ++i) held.push_back(*r().Acquire(1.0));
  uint64_t pos;
  EXPECT_FALSE(w().TryClaim(&pos)) << "every slot is held";
  r().Release(held[2]);
  EXPECT_EQ(w().released(), 1u);
  r().Release(held[2]);  // twice is harmless
  EXPECT_EQ(w().released(), 1u);
  // Position 2's slot takes the next batch, though 0 and 1 are still held.
  Produce(w(), 4);
  absl::StatusOr<uint64_t> next = r().Acquire(1.0);
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(*next, 4u);
  EXPECT_EQ(Value(r(), *next), 4u);
  EXPECT_EQ(Value(r(), held[0]), 0u);
  EXPECT_EQ(Value(r(), held[1]), 1u);
  EXPECT_EQ(r().HeldSteps(), (std::vector<uint64_t>{0, 1, 3, 4}));
  EXPECT_EQ(r().SlotBase(held[2]), nullptr) << "released: not ours";
}

TEST_F(RingTest, AKeptBatchNeverStallsTheStream) {
  // Keep slot_count - 1 batches for the whole run: the stream flows through
  // the one slot left, and the kept batches' bytes stay as they were.
  ASSERT_TRUE(Make("kept", 4));
  std::vector<uint64_t> kept;
  for (uint64_t i = 0; i < 3; ++i) {
    Produce(w(), 100 + i);
    kept.push_back(*r().Acquire(1.0));
  }
  for (uint64_t i = 3; i < 200; ++i) {
    Produce(w(), 100 + i);
    absl::StatusOr<uint64_t> pos = r().Acquire(1.0);
    ASSERT_TRUE(pos.ok()) << pos.status();
    EXPECT_EQ(Value(r(), *pos), 100 + i);
    r().Release(*pos);
  }
  for (uint64_t i = 0; i < 3; ++i) EXPECT_EQ(Value(r(), kept[i]), 100 + i);
  EXPECT_EQ(w().released(), 197u);
  EXPECT_EQ(w().published(), 200u);
}

TEST_F(RingTest, AForgedSlotTableIsRefused) {
  ASSERT_TRUE(Make("table", 2));
  Produce(w(), 1);
  auto* table = reinterpret_cast<shm::SlotTable*>(
      reinterpret_cast<uint8_t*>(w().header()) + shm::kSlotTableOffset);
  table->slot_of[0].store(7);  // past the ring's two slots
  absl::StatusOr<uint64_t> pos = r().Acquire(1.0);
  EXPECT_TRUE(absl::IsDataLoss(pos.status())) << pos.status();
}

TEST_F(RingTest, TimesOutWhileServerAlive) {
  ASSERT_TRUE(Make("timeout", 2));
  std::atomic<bool> stop{false};
  std::thread beat([&] {
    while (!stop) {
      w().Heartbeat(MonotonicNanos());
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
  absl::StatusOr<uint64_t> pos = r().Acquire(0.3);
  stop = true;
  beat.join();
  EXPECT_TRUE(absl::IsDeadlineExceeded(pos.status())) << pos.status();
}

TEST_F(RingTest, EndedAndClosedRingsStopTheReader) {
  ASSERT_TRUE(Make("end", 2));
  Produce(w(), 7);
  w().SetState(shm::kStateEnded);
  ASSERT_TRUE(r().Acquire(1.0).ok()) << "published batches come first";
  EXPECT_TRUE(absl::IsOutOfRange(r().Acquire(1.0).status()));
  w().SetState(shm::kStateClosed);
  EXPECT_TRUE(absl::IsCancelled(r().Acquire(1.0).status()));
}

TEST_F(RingTest, OtherLayoutVersionIsRefused) {
  const std::string name = UniqueName("version");
  auto w = RingWriter::Create(name, Geometry(2, 64));
  ASSERT_TRUE(w.ok());
  (*w)->header()->layout_version.store(shm::kLayoutVersion + 1);
  auto r = RingReader::Attach(name);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find(
                absl::StrCat("layout version ", shm::kLayoutVersion + 1)),
            std::string::npos)
      << r.status();
  (*w)->header()->magic = 0;
  r = RingReader::Attach(name);
  EXPECT_NE(r.status().message().find("bad magic"), std::string::npos);
}

TEST_F(RingTest, RefusesWhatDevShmCannotHold) {
  const std::string name = UniqueName("big");
  const uint64_t free_bytes = ShmFreeBytes();
  RingGeometry g = Geometry(4, free_bytes / 2);  // twice what is free
  auto w = RingWriter::Create(name, g);
  ASSERT_FALSE(w.ok());
  EXPECT_TRUE(absl::IsResourceExhausted(w.status()));
  EXPECT_NE(w.status().message().find("needs " +
                                      std::to_string(g.SegmentBytes())),
            std::string::npos)
      << w.status();
  EXPECT_TRUE(testing::ShmEntries(name.substr(1)).empty());
}

TEST_F(RingTest, SegmentIsReservedAndPrivate) {
  const std::string name = UniqueName("reserve");
  auto w = RingWriter::Create(name, Geometry(2, 1 << 20));
  ASSERT_TRUE(w.ok());
  struct stat st;
  ASSERT_EQ(stat(("/dev/shm" + name).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  // Every byte is allocated now, not on first touch.
  EXPECT_GE(uint64_t(st.st_blocks) * 512, (*w)->geometry().SegmentBytes());
}

TEST_F(RingTest, ServerKilledMidStreamIsNamedWithinTheTimeout) {
  const std::string name = UniqueName("kill");
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t server = fork();
  if (server == 0) {
    auto w = RingWriter::Create(name, Geometry(2, 64));
    if (!w.ok()) _exit(1);
    char c = 1;
    if (write(ready[1], &c, 1) != 1) _exit(1);
    for (;;) {
      (*w)->Heartbeat(MonotonicNanos());
      usleep(50000);
    }
  }
  char c;
  ASSERT_EQ(read(ready[0], &c, 1), 1);
  auto r = RingReader::Attach(name);
  ASSERT_TRUE(r.ok()) << r.status();
  std::thread killer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    kill(server, SIGKILL);
    waitpid(server, nullptr, 0);
  });
  const auto t0 = std::chrono::steady_clock::now();
  absl::StatusOr<uint64_t> pos = (*r)->Acquire(-1);  // would wait for ever
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
          .count();
  killer.join();
  ASSERT_TRUE(absl::IsUnavailable(pos.status())) << pos.status();
  EXPECT_NE(pos.status().message().find("batchd (pid " +
                                        std::to_string(server) + ") stopped"),
            std::string::npos)
      << pos.status();
  EXPECT_LT(waited, 3.0);
  // The dead server's segment is stale now, and only now.
  EXPECT_EQ(RemoveStaleSegments(name.substr(1)),
            std::vector<std::string>{name});
}

TEST_F(RingTest, StaleSweepKeepsLiveServersSegments) {
  const std::string name = UniqueName("live");
  auto w = RingWriter::Create(name, Geometry(2, 64));
  ASSERT_TRUE(w.ok());
  EXPECT_TRUE(RemoveStaleSegments(name.substr(1)).empty());
  EXPECT_EQ(testing::ShmEntries(name.substr(1)).size(), 1u);
}

TEST_F(RingTest, ServerSeesKilledClient) {
  const std::string name = UniqueName("client");
  auto w = RingWriter::Create(name, Geometry(2, 64));
  ASSERT_TRUE(w.ok());
  EXPECT_FALSE((*w)->ClientGone(MonotonicNanos(), 1000000000));
  const pid_t client = fork();
  if (client == 0) {
    auto r = RingReader::Attach(name);
    pause();
    _exit(0);
  }
  while ((*w)->client().pid != uint32_t(client)) usleep(1000);
  EXPECT_FALSE((*w)->ClientGone(MonotonicNanos(), 1000000000));
  kill(client, SIGKILL);
  waitpid(client, nullptr, 0);
  EXPECT_TRUE((*w)->ClientGone(MonotonicNanos(), 1000000000));
}

}  // namespace
}  // namespace batchd

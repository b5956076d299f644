// The core without gRPC, in one process: many ranks and streams on a small
// pool, read concurrently. Runs clean under ThreadSanitizer (the gRPC paths
// are covered by server_test).
#include "server/core.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <functional>
#include <map>
#include <optional>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/process.h"
#include "batchd/version.h"
#include "ring/ring.h"

namespace batchd {
namespace {

v1::StreamSpec Spec(const std::string& name, uint32_t w) {
  v1::StreamSpec s;
  s.set_name(name);
  s.set_workload("synthetic");
  s.set_split("train");
  s.set_global_batch_size(64);
  s.set_world_size(w);
  s.set_seed(3);
  s.set_slots(3);
  (*s.mutable_options())["examples"] = "5000";
  (*s.mutable_options())["payload_bytes"] = "256";
  return s;
}

// OpenStream of rank `rank` of `spec` as a client of this release sends
// it, for `caller` (naming `owner_uid`'s stream when given).
absl::StatusOr<v1::OpenStreamResponse> Open(
    Core& core, const v1::StreamSpec& spec, uint32_t rank,
    const Caller& caller, std::optional<uint32_t> owner_uid = std::nullopt) {
  v1::OpenStreamRequest req;
  *req.mutable_spec() = spec;
  req.set_rank(rank);
  req.set_protocol_version(kProtocolVersion);
  if (owner_uid.has_value()) req.set_owner_uid(*owner_uid);
  return core.OpenStream(req, caller);
}

// The same for a process of this machine.
absl::StatusOr<v1::OpenStreamResponse> Open(Core& core,
                                            const v1::StreamSpec& spec,
                                            uint32_t rank, pid_t pid) {
  return Open(core, spec, rank, Caller::Process(uint32_t(pid)));
}

absl::Status Close(Core& core, const std::string& name, const Caller& caller,
                   std::optional<uint32_t> owner_uid = std::nullopt) {
  v1::CloseStreamRequest req;
  req.set_name(name);
  if (owner_uid.has_value()) req.set_owner_uid(*owner_uid);
  return core.CloseStream(req, caller);
}

// A core of one worker thread (unless `tune` says otherwise) on data root
// /tmp, its rings under a prefix of its own; null when it cannot start.
std::unique_ptr<Core> MakeCore(const std::string& tag,
                               std::function<void(CoreOptions*)> tune = {}) {
  CoreOptions o;
  o.data_root = "/tmp";
  o.shm_prefix = "bdcore" + tag + std::to_string(getpid());
  o.threads = 1;
  if (tune) tune(&o);
  auto core = Core::Create(o);
  EXPECT_TRUE(core.ok()) << core.status();
  return core.ok() ? std::move(*core) : nullptr;
}

TEST(CoreTest, ManyRanksOfTwoStreamsReadConcurrently) {
  std::unique_ptr<Core> core =
      MakeCore("many", [](CoreOptions* o) { o->threads = 3; });
  ASSERT_NE(core, nullptr);
  const int steps = 200;
  std::vector<std::thread> readers;
  std::atomic<int> failures{0};
  for (const char* stream : {"a", "b"}) {
    for (uint32_t r = 0; r < 4; ++r) {
      auto opened = Open(*core, Spec(stream, 4), r, getpid());
      ASSERT_TRUE(opened.ok()) << opened.status();
      readers.emplace_back([seg = opened->segment(), r, &failures] {
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
    v1::GetStatusResponse st = core->GetStatus();
    EXPECT_EQ(st.streams_size(), 2);
    EXPECT_EQ(st.worker_threads(), 3u);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  for (std::thread& t : readers) t.join();
  EXPECT_EQ(failures.load(), 0);
  v1::GetStatusResponse st = core->GetStatus();
  for (const v1::StreamStatus& s : st.streams()) {
    for (const v1::RankStatus& r : s.ranks()) {
      // Counted across the ring's life, even once the reader let go.
      EXPECT_GE(r.examples(), uint64_t(steps) * 16);
    }
  }
}

TEST(CoreTest, DeadRankIsReapedAndCanReattach) {
  std::unique_ptr<Core> core = MakeCore("reap");
  ASSERT_NE(core, nullptr);
  auto opened = Open(*core, Spec("s", 1), 0, getpid());
  ASSERT_TRUE(opened.ok());
  {
    auto reader = RingReader::Attach(opened->segment());
    ASSERT_TRUE(reader.ok());
  }  // let go
  std::vector<std::string> freed = core->ReapDeadClients();
  // The supervisor thread may have got there first.
  EXPECT_TRUE(freed.empty() || freed[0] == opened->segment());
  v1::GetStatusResponse st = core->GetStatus();
  ASSERT_EQ(st.streams_size(), 1);
  EXPECT_FALSE(st.streams(0).ranks(0).attached());
  v1::StreamSpec again = Spec("s", 1);
  again.set_start_step(9);  // a re-attaching rank may resume elsewhere
  auto reopened = Open(*core, again, 0, getpid());
  ASSERT_TRUE(reopened.ok()) << reopened.status();
  auto reader = RingReader::Attach(reopened->segment());
  ASSERT_TRUE(reader.ok());
  absl::StatusOr<uint64_t> pos = (*reader)->Acquire(10.0);
  ASSERT_TRUE(pos.ok());
  EXPECT_EQ((*reader)->Slot(*pos)->step, 9u);
}

// A caller as the kernel would name a process of `uid` whose pid the daemon
// cannot see (so it holds a ring until the attach timeout).
Caller As(uint32_t uid) {
  Caller c;
  c.known = true;
  c.uid = uid;
  c.gid = uid;
  return c;
}

constexpr uint32_t kUserA = 65534, kUserB = 4242;

// "owner:name" of every stream listed.
std::vector<std::string> Listed(Core& core) {
  std::vector<std::string> out;
  const v1::GetStatusResponse status = core.GetStatus();
  for (const v1::StreamStatus& s : status.streams()) {
    out.push_back(std::to_string(s.owner_uid()) + ":" + s.spec().name());
  }
  return out;
}

TEST(CoreStreamOwnership, EachUidsStreamOfOneNameIsItsOwnWithItsOwnRing) {
  std::unique_ptr<Core> core = MakeCore("own");
  ASSERT_NE(core, nullptr);
  auto a = Open(*core, Spec("train", 2), 0, As(kUserA));
  ASSERT_TRUE(a.ok()) << a.status();
  auto b = Open(*core, Spec("train", 2), 0, As(kUserB));
  ASSERT_TRUE(b.ok()) << b.status() << " (joined A's stream?)";
  EXPECT_NE(a->segment(), b->segment());
  EXPECT_NE(a->segment().find(".65534.train.0."), std::string::npos)
      << a->segment();
  EXPECT_NE(b->segment().find(".4242.train.0."), std::string::npos)
      << b->segment();
  // Another spec under the same name is no conflict across owners.
  auto c = Open(*core, Spec("train", 1), 0, As(0));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(Listed(*core),
            (std::vector<std::string>{"0:train", "4242:train", "65534:train"}));
  const v1::GetStatusResponse st = core->GetStatus();
  ASSERT_EQ(st.uids_size(), 3);
  EXPECT_TRUE(st.uids(0).exempt()) << "root is an administrator";
  EXPECT_EQ(st.uids(2).uid(), kUserA);
  EXPECT_EQ(st.uids(2).streams(), 1u);
  EXPECT_EQ(st.uids(2).ring_bytes(), a->segment_bytes());
}

TEST(CoreStreamOwnership,
     AnotherUidsStreamIsJoinedOnlyByAnAdministratorNamingIt) {
  std::unique_ptr<Core> core = MakeCore("join");
  ASSERT_NE(core, nullptr);
  ASSERT_TRUE(Open(*core, Spec("job", 2), 0, As(kUserA)).ok());
  auto refused = Open(*core, Spec("job", 2), 1, As(kUserB), kUserA);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_NE(refused.status().message().find("of uid 65534"), std::string::npos)
      << refused.status();
  // Without owner_uid root gets its own `job`; with it, A's.
  ASSERT_TRUE(Open(*core, Spec("job", 2), 1, As(0)).ok());
  ASSERT_TRUE(Open(*core, Spec("job", 2), 1, As(0), kUserA).ok());
  uint32_t attached = 0;
  const v1::GetStatusResponse status = core->GetStatus();
  for (const v1::StreamStatus& s : status.streams()) {
    if (s.owner_uid() != kUserA) continue;
    for (const v1::RankStatus& r : s.ranks()) attached += r.attached();
  }
  EXPECT_EQ(attached, 2u);
  EXPECT_EQ(Open(*core, Spec("none", 1), 0, As(0), kUserA).status().code(),
            absl::StatusCode::kNotFound);
  // Naming one's own uid is the same as naming none.
  ASSERT_TRUE(Open(*core, Spec("job", 2), 1, As(kUserB), kUserB).ok());
  EXPECT_EQ(Listed(*core),
            (std::vector<std::string>{"0:job", "4242:job", "65534:job"}));
}

TEST(CoreStreamOwnership,
     CloseTakesTheCallersOwnOrANamedOwnersForAdministrators) {
  std::unique_ptr<Core> core = MakeCore("close");
  ASSERT_NE(core, nullptr);
  ASSERT_TRUE(Open(*core, Spec("s", 1), 0, As(kUserA)).ok());
  ASSERT_TRUE(Open(*core, Spec("s", 1), 0, As(0)).ok());
  ASSERT_TRUE(Open(*core, Spec("only", 1), 0, As(kUserA)).ok());
  // B has no `s` and may not close another's.
  absl::Status s = Close(*core, "s", As(kUserB));
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
  EXPECT_EQ(Close(*core, "s", As(kUserB), kUserA).code(),
            absl::StatusCode::kPermissionDenied);
  // A closes its own; root's `s` stays.
  ASSERT_TRUE(Close(*core, "s", As(kUserA)).ok());
  EXPECT_EQ(Listed(*core), (std::vector<std::string>{"0:s", "65534:only"}));
  // Root closes A's only by naming A; by name alone it is told how.
  s = Close(*core, "only", As(0));
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
  EXPECT_NE(s.message().find("--owner 65534"), std::string::npos) << s;
  ASSERT_TRUE(Close(*core, "only", As(0), kUserA).ok());
  EXPECT_EQ(Listed(*core), (std::vector<std::string>{"0:s"}));
}

// The spec is compared in one place (FirstDifference), field by field of
// the proto: a field added to StreamSpec must be named here, saying how a
// later rank's spec may differ in it, and is then refused when it does.
TEST(CoreSpecs, ALaterRankWhoseSpecDiffersInAnyFieldIsRefusedNamingIt) {
  std::unique_ptr<Core> core = MakeCore("diff");
  ASSERT_NE(core, nullptr);
  const v1::StreamSpec base = Spec("d", 2);
  ASSERT_TRUE(Open(*core, base, 0, getpid()).ok());
  using Change = std::function<void(v1::StreamSpec*)>;
  const std::map<std::string, Change> change = {
      {"workload", [](v1::StreamSpec* s) { s->set_workload("imagenet"); }},
      {"data", [](v1::StreamSpec* s) { s->set_data("elsewhere"); }},
      {"split", [](v1::StreamSpec* s) { s->set_split("eval"); }},
      {"global_batch_size",
       [](v1::StreamSpec* s) { s->set_global_batch_size(128); }},
      {"world_size", [](v1::StreamSpec* s) { s->set_world_size(4); }},
      {"seed", [](v1::StreamSpec* s) { s->set_seed(4); }},
      {"start_step", [](v1::StreamSpec* s) { s->set_start_step(1); }},
      {"slots", [](v1::StreamSpec* s) { s->set_slots(5); }},
      {"options",
       [](v1::StreamSpec* s) { (*s->mutable_options())["examples"] = "4000"; }},
      {"start_cursor",
       [](v1::StreamSpec* s) { s->mutable_start_cursor()->set_row(1); }},
  };
  const google::protobuf::Descriptor* d = v1::StreamSpec::descriptor();
  for (int i = 0; i < d->field_count(); ++i) {
    const std::string field = d->field(i)->name();
    if (field == "name") continue;  // the stream's key
    const auto it = change.find(field);
    ASSERT_NE(it, change.end())
        << "StreamSpec." << field << " is new: compare it in FirstDifference "
        << "and say here how a later rank's spec may differ in it";
    v1::StreamSpec other = base;
    it->second(&other);
    // Rank 1 never attached: every field counts, start_step too.
    auto refused = Open(*core, other, 1, getpid());
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition)
        << field << ": " << refused.status();
    EXPECT_NE(refused.status().message().find(field + " is "),
              std::string::npos)
        << refused.status();
  }
  EXPECT_TRUE(Open(*core, base, 1, getpid()).ok());
}

TEST(CoreQuotas, StreamsPerUidStopOneUidNotAnotherNorAdministrators) {
  std::unique_ptr<Core> core =
      MakeCore("sq", [](CoreOptions* o) { o->max_streams_per_uid = 2; });
  ASSERT_NE(core, nullptr);
  ASSERT_TRUE(Open(*core, Spec("a", 2), 0, As(kUserA)).ok());
  ASSERT_TRUE(Open(*core, Spec("b", 1), 0, As(kUserA)).ok());
  auto third = Open(*core, Spec("c", 1), 0, As(kUserA));
  EXPECT_EQ(third.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(
      third.status().message().find(
          "uid 65534 owns 2 streams, its quota (--max-streams-per-uid 2)"),
      std::string::npos)
      << third.status();
  // A further rank of one of A's streams is no new stream.
  EXPECT_TRUE(Open(*core, Spec("a", 2), 1, As(kUserA)).ok());
  EXPECT_TRUE(Open(*core, Spec("a", 1), 0, As(kUserB)).ok());
  for (const char* name : {"x", "y", "z"}) {
    EXPECT_TRUE(Open(*core, Spec(name, 1), 0, As(0)).ok()) << name;
  }
}

TEST(CoreQuotas, RingBytesPerUidStopOneUidNotAnother) {
  uint64_t ring = 0;
  {
    std::unique_ptr<Core> probe = MakeCore("rp");
    ASSERT_NE(probe, nullptr);
    auto r = Open(*probe, Spec("p", 2), 0, As(kUserA));
    ASSERT_TRUE(r.ok()) << r.status();
    ring = r->segment_bytes();
  }
  std::unique_ptr<Core> core = MakeCore("rq", [ring](CoreOptions* o) {
    o->max_ring_bytes_per_uid = ring * 3 / 2;
  });
  ASSERT_NE(core, nullptr);
  ASSERT_TRUE(Open(*core, Spec("r", 2), 0, As(kUserA)).ok());
  auto second = Open(*core, Spec("r", 2), 1, As(kUserA));
  EXPECT_EQ(second.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(second.status().message().find(
                absl::StrCat("uid 65534 holds ", ring, " ring bytes")),
            std::string::npos)
      << second.status();
  EXPECT_NE(second.status().message().find(
                absl::StrCat("--max-ring-bytes-per-uid ", ring * 3 / 2)),
            std::string::npos)
      << second.status();
  EXPECT_TRUE(Open(*core, Spec("r", 2), 0, As(kUserB)).ok());
  // Administrators are exempt.
  EXPECT_TRUE(Open(*core, Spec("r", 2), 0, As(0)).ok());
  EXPECT_TRUE(Open(*core, Spec("r", 2), 1, As(0)).ok());
  EXPECT_EQ(core->GetStatus().max_ring_bytes_per_uid(), ring * 3 / 2);
}

TEST(CoreQuotas, AutoRingBytesPerUidIsAQuarterOfTheTotal) {
  std::unique_ptr<Core> core = MakeCore(
      "auto", [](CoreOptions* o) { o->max_total_bytes = uint64_t(400) << 20; });
  ASSERT_NE(core, nullptr);
  EXPECT_EQ(core->options().max_ring_bytes_per_uid, uint64_t(100) << 20);
}

TEST(CoreQuotas, AGhostStreamLeavesWithItsRingAnAttachedOneStaysForItsRank) {
  std::unique_ptr<Core> core = MakeCore("ghost", [](CoreOptions* o) {
    o->attach_timeout_seconds = 0.2;
    o->max_streams = 2;
  });
  ASSERT_NE(core, nullptr);
  // Mapped once and let go: kept so that a restarted rank re-attaches.
  auto kept = Open(*core, Spec("kept", 1), 0, getpid());
  ASSERT_TRUE(kept.ok()) << kept.status();
  { ASSERT_TRUE(RingReader::Attach(kept->segment()).ok()); }
  ASSERT_TRUE(Open(*core, Spec("ghost", 1), 0, As(kUserA)).ok());
  bool gone = false;
  for (int i = 0; i < 600 && !gone; ++i) {  // 60 s at most
    gone = Listed(*core) ==
           std::vector<std::string>{std::to_string(getuid()) + ":kept"};
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_TRUE(gone) << "the ghost kept its slot past the attach timeout";
  EXPECT_TRUE(Open(*core, Spec("next", 1), 0, As(kUserB)).ok());
}

TEST(CoreQuotas, AutoStreamsPerUidIsAQuarterOfMaxStreams) {
  std::unique_ptr<Core> core =
      MakeCore("autos", [](CoreOptions* o) { o->max_streams = 8; });
  ASSERT_NE(core, nullptr);
  EXPECT_EQ(core->options().max_streams_per_uid, 2u);
  std::unique_ptr<Core> one =
      MakeCore("autos1", [](CoreOptions* o) { o->max_streams = 3; });
  ASSERT_NE(one, nullptr);
  EXPECT_EQ(one->options().max_streams_per_uid, 1u);
}

// A world size costs a seat per rank that attaches, not per rank it
// names; ranks that attach one after another keep at most 64 idle seats,
// and status lists at most 64 rows a stream with totals over all.
TEST(CoreTest, SeatsAreMadeAsRanksAttachAndIdleOnesAreBounded) {
  std::unique_ptr<Core> core =
      MakeCore("seat", [](CoreOptions* o) { o->client_stale_seconds = 3600; });
  ASSERT_NE(core, nullptr);
  v1::StreamSpec wide = Spec("wide", 65536);
  wide.set_global_batch_size(65536);
  wide.set_slots(1);
  (*wide.mutable_options())["examples"] = "100000";
  (*wide.mutable_options())["payload_bytes"] = "8";
  auto first = Open(*core, wide, 0, getpid());
  ASSERT_TRUE(first.ok()) << first.status();
  auto held = RingReader::Attach(first->segment());
  ASSERT_TRUE(held.ok());
  v1::GetStatusResponse st = core->GetStatus();
  ASSERT_EQ(st.streams_size(), 1);
  EXPECT_EQ(st.streams(0).ranks_size(), 1);
  EXPECT_EQ(st.streams(0).attached_ranks(), 1u);
  EXPECT_EQ(st.streams(0).ranks_not_listed(), 0u);
  // 100 more ranks, each mapped and let go in turn.
  for (uint32_t r = 1; r <= 100; ++r) {
    auto opened = Open(*core, wide, r, getpid());
    ASSERT_TRUE(opened.ok()) << opened.status();
    { ASSERT_TRUE(RingReader::Attach(opened->segment()).ok()); }
    core->ReapDeadClients();
  }
  st = core->GetStatus();
  const v1::StreamStatus& s = st.streams(0);
  EXPECT_EQ(s.attached_ranks(), 1u);
  ASSERT_EQ(s.ranks_size(), 64);
  EXPECT_EQ(s.ranks(0).rank(), 0u);  // attached first
  EXPECT_TRUE(s.ranks(0).attached());
  EXPECT_EQ(s.ranks_not_listed(), 1u);  // 1 attached + 64 idle seats
  // A rank whose seat was forgotten re-attaches as one that attached
  // before: it may resume at another step.
  v1::StreamSpec later = wide;
  later.set_start_step(5);
  auto again = Open(*core, later, 1, getpid());
  EXPECT_TRUE(again.ok()) << again.status();
}

}  // namespace
}  // namespace batchd

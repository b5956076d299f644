// Streams, ranks and their rings; see stream_registry.h.
#include "server/stream_registry.h"

#include <sys/random.h>
#include <unistd.h>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "base/clock.h"
#include "base/log.h"
#include "base/process.h"
#include "batchd/version.h"
#include "server/core_options.h"
#include "server/protocol.h"
#include "server/share_key.h"

namespace batchd {

uint64_t AttachedRingBytes(const Stream& stream) {
  uint64_t bytes = 0;
  for (const auto& [rank, rs] : stream.ranks) {
    if (rs.producer != nullptr) {
      bytes += rs.producer->ring().geometry().SegmentBytes();
    }
  }
  return bytes;
}

uint32_t AttachedRanks(const Stream& stream) {
  uint32_t attached = 0;
  for (const auto& [rank, rs] : stream.ranks) {
    attached += rs.producer != nullptr;
  }
  return attached;
}

void AddToUsage(const Stream& stream, v1::UidUsage* usage) {
  usage->set_exempt(usage->exempt() || stream.exempt);
  usage->set_streams(usage->streams() + 1);
  usage->set_model_bytes(usage->model_bytes() +
                         stream.setup->workload->resident_bytes());
  usage->set_ring_bytes(usage->ring_bytes() + AttachedRingBytes(stream));
}

std::string StreamRegistry::SegmentName(uint32_t owner_uid,
                                        const std::string& stream,
                                        uint32_t rank) const {
  // /dev/shm is world-writable: a predictable name could be taken first by
  // another user (OpenStream would fail) or planted with a forged header.
  // 64 random bits make the name unguessable; the client learns it from
  // OpenStream.
  uint64_t nonce = 0;
  if (getrandom(&nonce, sizeof(nonce), 0) != ssize_t(sizeof(nonce))) {
    nonce = MonotonicNanos() ^ (uint64_t(getpid()) << 40);
  }
  // The daemon's uid first (it owns the file; a restarted daemon removes
  // the stale segments of its uid and prefix), then the stream's owner, so
  // that two owners' streams of one name never share a name.
  const std::string owner =
      owner_uid == kAnonymousUid ? std::string("tcp") : absl::StrCat(owner_uid);
  return absl::StrCat("/", options_.shm_prefix, ".", getuid(), ".", owner, ".",
                      stream, ".", rank, ".",
                      absl::Hex(nonce, absl::kZeroPad16));
}

absl::StatusOr<v1::OpenStreamResponse> StreamRegistry::Open(
    const StreamKey& key, const v1::StreamSpec& spec, uint32_t rank,
    const Caller& caller, const v1::Resume* resume, const MakeSetup& make,
    bool* made) {
  if (made != nullptr) *made = false;
  {
    absl::MutexLock lock(&mu_);
    auto it = streams_.find(key);
    if (it != streams_.end()) {
      return OpenRank(key, *it->second, spec, rank, caller, resume);
    }
    // Refused before anything is made when it could not be kept.
    if (absl::Status s = CheckNewStream(key, caller); !s.ok()) return s;
  }
  // Made without the lock: opening a data set reads storage (a model, an
  // index, a listing), and no other caller's request waits for that.
  absl::StatusOr<std::shared_ptr<StreamSetup>> setup = make();
  if (!setup.ok()) return setup.status();
  // Declared before the lock: what is not kept goes after it is released
  // (a schedule waits for its counting task when it goes).
  std::unique_ptr<Stream> dropped;
  absl::MutexLock lock(&mu_);
  if (*setup == nullptr) {
    // Made by another call meanwhile.
    auto it = streams_.find(key);
    if (it == streams_.end()) {
      return absl::UnavailableError(absl::StrCat(
          "stream '", key.second,
          "' was closed while this rank joined it; open it again"));
    }
    return OpenRank(key, *it->second, spec, rank, caller, resume);
  }
  bool created = false;
  absl::StatusOr<Stream*> stream =
      FindOrCreateStream(key, spec, caller, *setup, &created);
  if (!stream.ok()) return stream.status();
  absl::StatusOr<v1::OpenStreamResponse> opened =
      OpenRank(key, **stream, spec, rank, caller, resume);
  if (!opened.ok() && created) {
    auto it = streams_.find(key);
    dropped = std::move(it->second);
    streams_.erase(it);
  }
  if (made != nullptr) *made = created && opened.ok();
  return opened;
}

absl::Status StreamRegistry::CheckNewStream(const StreamKey& key,
                                            const Caller& caller) const {
  if (key.first != OwnerOf(caller)) {
    return absl::NotFoundError(
        absl::StrCat(DescribeOwner(key.first), " has no stream '", key.second,
                     "' to join (owner_uid joins a stream its owner opened)"));
  }
  if (draining_) {
    return absl::UnavailableError(
        "batchd is draining: it serves the streams it has and takes no "
        "new ones");
  }
  if (absl::Status s = budget_.CheckStreamCount(streams_.size()); !s.ok()) {
    return s;
  }
  return budget_.CheckStreamQuota(UsageOf(key.first), access_.IsAdmin(caller));
}

absl::StatusOr<Stream*> StreamRegistry::FindOrCreateStream(
    const StreamKey& key, const v1::StreamSpec& spec, const Caller& caller,
    const std::shared_ptr<StreamSetup>& setup, bool* created) {
  auto it = streams_.find(key);
  if (it != streams_.end()) return it->second.get();  // made meanwhile
  // Again: other streams may have been made while this one was.
  if (absl::Status s = CheckNewStream(key, caller); !s.ok()) return s;
  const bool exempt = access_.IsAdmin(caller);
  if (absl::Status s = budget_.CheckModelQuota(
          UsageOf(key.first), exempt, setup->workload->resident_bytes());
      !s.ok()) {
    return s;
  }
  auto made = std::make_unique<Stream>();
  made->spec = spec;
  made->owner = caller;
  made->exempt = exempt;
  made->setup = setup;
  made->created_ns = MonotonicNanos();
  if (FillShare* share = engine_.share()) {
    // Before its first rank: the streams of the same content share fills.
    made->setup->share = JoinShare(*share, spec, caller, *setup);
  }
  *created = true;
  return streams_.emplace(key, std::move(made)).first->second.get();
}

absl::StatusOr<std::shared_ptr<Schedule>> StreamRegistry::ScheduleFor(
    const Stream& stream, const v1::Resume* resume) const {
  if (resume == nullptr) return SharedSchedule(stream.setup);
  std::shared_ptr<Schedule> schedule;
  if (resume->has_cursor()) {
    const v1::Cursor& cursor = resume->cursor();
    const uint64_t cursor_step =
        cursor.has_step() ? cursor.step() : resume->step();
    if (cursor_step > resume->step()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "resume at step ", resume->step(), " names the cursor of step ",
          cursor_step, ", a later one"));
    }
    // Anchored where this rank resumes, so that ranks a step or two apart
    // each find their own batches without replaying earlier epochs.
    schedule = OwnSchedule(stream.setup);
    if (absl::Status s =
            schedule->Anchor(cursor_step, CursorOf(cursor), true);
        !s.ok()) {
      return absl::Status(s.code(),
                          absl::StrCat("the resume's cursor: ", s.message()));
    }
  } else {
    schedule = SharedSchedule(stream.setup);
  }
  if (absl::Status s = schedule->CheckReachable(resume->step()); !s.ok()) {
    return s;
  }
  return schedule;
}

absl::StatusOr<v1::OpenStreamResponse> StreamRegistry::OpenRank(
    const StreamKey& key, Stream& stream, const v1::StreamSpec& spec,
    uint32_t rank, const Caller& caller, const v1::Resume* resume) {
  if (absl::Status s = TakeSeat(stream, spec, rank, caller); !s.ok()) return s;
  absl::StatusOr<std::shared_ptr<Schedule>> schedule =
      ScheduleFor(stream, resume);
  if (!schedule.ok()) return schedule.status();
  const uint64_t start_step =
      resume != nullptr ? resume->step() : spec.start_step();
  const StreamSetup& sc = *stream.setup;
  RingGeometry geometry;
  geometry.slot_count = spec.slots();
  geometry.payload_bytes = sc.layout.payload_bytes;
  geometry.rank = rank;
  geometry.world_size = spec.world_size();
  geometry.stream_name = spec.name();
  if (absl::Status s = CheckRingLimits(key, stream, geometry.SegmentBytes());
      !s.ok()) {
    return s;
  }
  const std::string segment = SegmentName(key.first, spec.name(), rank);
  // The ring is the caller's uid's alone (an ACL entry when that is not
  // the daemon's uid); an anonymous TCP caller's is the daemon's uid's.
  absl::StatusOr<std::unique_ptr<RingWriter>> ring = RingWriter::Create(
      segment, geometry, caller.known ? int64_t(caller.uid) : -1);
  if (!ring.ok()) return ring.status();
  const bool forgotten =
      rank < stream.forgotten_ranks.size() && stream.forgotten_ranks[rank];
  RankSeat& rs = stream.ranks[rank];  // made now, as the rank attaches
  if (rs.ever_attached || forgotten) ++rs.reattaches;
  rs.ever_attached = true;
  rs.holder = caller;
  rs.attached_ns = MonotonicNanos();
  stream.idle_since_ns = 0;
  rs.producer = std::make_shared<RankProducer>(
      stream.setup, rank, start_step, std::move(*ring), *std::move(schedule));
  heartbeat_.Add(rs.producer);
  engine_.Add(rs.producer);
  ForgetIdleSeats(stream);

  v1::OpenStreamResponse r;
  r.set_segment(segment);
  r.set_segment_bytes(geometry.SegmentBytes());
  r.set_slots(geometry.slot_count);
  r.set_slot_bytes(geometry.SlotBytes());
  r.set_examples_per_epoch(sc.sampler.num_examples());
  // Packed epochs hold as many steps as their rows allow: 0, not known.
  r.set_steps_per_epoch(sc.schedule->steps_per_epoch());
  TensorsToProto(sc.layout, r.mutable_tensors());
  r.set_server_pid(uint32_t(getpid()));
  r.set_start_step(start_step);
  r.set_protocol_version(ServerProtocolVersion());
  r.set_server_version(kBatchdVersion);
  r.set_cursor_resume(rs.producer->schedule().resumes_by_cursor());
  return r;
}

absl::Status StreamRegistry::TakeSeat(Stream& stream,
                                      const v1::StreamSpec& spec,
                                      uint32_t rank, const Caller& caller) {
  auto seat = stream.ranks.find(rank);
  const bool attached_before =
      (seat != stream.ranks.end() && seat->second.ever_attached) ||
      (rank < stream.forgotten_ranks.size() && stream.forgotten_ranks[rank]);
  // Ranks that never attached must agree on everything; a rank re-attaching
  // after its client died may ask for another start step.
  std::string detail;
  const std::string field =
      FirstDifference(stream.spec, spec, !attached_before, &detail);
  if (!field.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "stream '", spec.name(), "' exists with another spec: ", detail));
  }
  if (absl::Status s =
          stream.setup->schedule->CheckReachable(spec.start_step());
      !s.ok()) {
    return s;
  }
  if (seat == stream.ranks.end() || seat->second.producer == nullptr) {
    return absl::OkStatus();
  }
  RankSeat& rs = seat->second;
  // Only the process that holds the rank may take it again while it lives;
  // who the caller is comes from the kernel, not the request.
  if (HolderAlive(rs, MonotonicNanos()) && !rs.holder.SameProcess(caller)) {
    const RingWriter::ClientInfo c = rs.producer->ring().client();
    return absl::AlreadyExistsError(absl::StrCat(
        "rank ", rank, " of stream '", spec.name(), "' is already attached by ",
        c.pid != 0 ? absl::StrCat("pid ", c.pid) : rs.holder.Describe()));
  }
  Detach(stream, rs);  // its old client is gone, or it is us again
  return absl::OkStatus();
}

absl::Status StreamRegistry::CheckRingLimits(const StreamKey& key,
                                             const Stream& stream,
                                             uint64_t bytes) const {
  return budget_.CheckRing(key, stream.exempt, AttachedRingBytes(stream),
                           UsageOf(key.first).ring_bytes(), RingBytesInUse(),
                           bytes);
}

void StreamRegistry::Detach(Stream& stream, RankSeat& rs) {
  if (rs.producer == nullptr) return;
  // A client stamps its pid when it maps the ring and leaves it there.
  if (rs.producer->ring().client().pid != 0) stream.ever_mapped = true;
  engine_.Retire(rs.producer);
  heartbeat_.Remove(rs.producer);
  rs.examples_before += rs.producer->examples.load();
  rs.bytes_before += rs.producer->bytes.load();
  // The segment is unlinked now so that the name is free for a re-attaching
  // rank; workers still filling a slot keep the mapping alive until done.
  rs.producer->ring().Unlink();
  rs.producer.reset();
  rs.detached_ns = MonotonicNanos();
}

void StreamRegistry::ForgetIdleSeats(Stream& stream) {
  size_t idle = stream.ranks.size() - AttachedRanks(stream);
  while (idle > Stream::kMaxIdleSeats) {
    auto oldest = stream.ranks.end();
    for (auto it = stream.ranks.begin(); it != stream.ranks.end(); ++it) {
      if (it->second.producer != nullptr) continue;
      if (oldest == stream.ranks.end() ||
          it->second.detached_ns < oldest->second.detached_ns) {
        oldest = it;
      }
    }
    const RankSeat& rs = oldest->second;
    stream.forgotten_examples += rs.examples_before;
    stream.forgotten_bytes += rs.bytes_before;
    if (rs.ever_attached) {
      if (stream.forgotten_ranks.empty()) {
        stream.forgotten_ranks.resize(stream.spec.world_size());
      }
      stream.forgotten_ranks[oldest->first] = true;
    }
    stream.ranks.erase(oldest);
    --idle;
  }
}

bool StreamRegistry::ClientGone(const RankSeat& rs, uint64_t now) const {
  // The holder as the kernel named it, not the pid the client wrote.
  const bool visible = rs.holder.known && rs.holder.pid != 0;
  return rs.producer->ring().ClientGone(
      now, uint64_t(options_.client_stale_seconds * 1e9),
      visible ? rs.holder.pid : 0, visible ? rs.holder.start_ticks : 0);
}

bool StreamRegistry::HolderAlive(const RankSeat& rs, uint64_t now) const {
  const RingWriter& ring = rs.producer->ring();
  if (ring.client().pid != 0) {
    // Mapped: the client's own stamps (pid, start time, pid namespace and
    // heartbeat) say whether it lives.
    return !ClientGone(rs, now);
  }
  // Asked for, not mapped yet: the requester's process as the kernel named
  // it, with its start time, so that a reused pid is not taken for it.
  // One the daemon cannot see lives until the attach timeout frees it.
  if (rs.holder.known && rs.holder.pid != 0) {
    return ProcessAlive(rs.holder.pid, rs.holder.start_ticks,
                        SelfPidNamespace());
  }
  return true;
}

uint64_t StreamRegistry::RingBytesInUse() const {
  uint64_t total = 0;
  for (const auto& [key, stream] : streams_) {
    total += AttachedRingBytes(*stream);
  }
  return total;
}

v1::UidUsage StreamRegistry::UsageOf(uint32_t owner) const {
  v1::UidUsage u;
  u.set_uid(owner);
  u.set_known(owner != kAnonymousUid);
  for (auto it = streams_.lower_bound(StreamKey{owner, ""});
       it != streams_.end() && it->first.first == owner; ++it) {
    AddToUsage(*it->second, &u);
  }
  return u;
}

absl::Status StreamRegistry::Close(const StreamKey& key) {
  std::unique_ptr<Stream> closed;
  {
    absl::MutexLock lock(&mu_);
    auto it = streams_.find(key);
    if (it == streams_.end()) {
      return absl::NotFoundError(absl::StrCat(
          DescribeOwner(key.first), " has no stream named '", key.second,
          "'"));
    }
    for (auto& [rank, rs] : it->second->ranks) Detach(*it->second, rs);
    it->second->setup->Cancel();
    closed = std::move(it->second);
    streams_.erase(it);
  }
  // Destroyed without the lock: a packed schedule may finish counting an
  // epoch first, and no other stream waits for that.
  closed.reset();
  return absl::OkStatus();
}

std::vector<uint32_t> StreamRegistry::OwnersNamedIfMissing(
    const StreamKey& key) const {
  std::vector<uint32_t> owners;
  absl::MutexLock lock(&mu_);
  if (streams_.count(key) != 0) return owners;
  for (const auto& [other, stream] : streams_) {
    if (other.second == key.second) owners.push_back(other.first);
  }
  return owners;
}

bool StreamRegistry::Has(const StreamKey& key) const {
  absl::MutexLock lock(&mu_);
  return streams_.count(key) != 0;
}

void StreamRegistry::CloseAll() {
  std::map<StreamKey, std::unique_ptr<Stream>> closed;
  {
    absl::MutexLock lock(&mu_);
    for (auto& [key, stream] : streams_) {
      for (auto& [rank, rs] : stream->ranks) {
        // Not closed: the stream goes on, on the daemon that follows.
        if (rs.producer != nullptr) {
          rs.producer->ring().SetState(shm::kStateExiting);
        }
        Detach(*stream, rs);
      }
      stream->setup->Cancel();
    }
    closed.swap(streams_);
  }
  closed.clear();
}

uint32_t StreamRegistry::Drain() {
  absl::MutexLock lock(&mu_);
  if (!draining_) drain_started_ns_ = MonotonicNanos();
  draining_ = true;
  uint32_t attached = 0;
  for (const auto& [name, stream] : streams_) {
    attached += AttachedRanks(*stream);
  }
  return attached;
}

void StreamRegistry::SetOnDrained(std::function<void()> on_drained) {
  absl::MutexLock lock(&mu_);
  on_drained_ = std::move(on_drained);
}

bool StreamRegistry::draining() const {
  absl::MutexLock lock(&mu_);
  return draining_;
}

void StreamRegistry::ForEachStream(
    const std::function<void(const StreamKey&, const Stream&)>& visit) const {
  absl::MutexLock lock(&mu_);
  for (const auto& [key, stream] : streams_) visit(key, *stream);
}

std::vector<std::string> StreamRegistry::ReapDeadClients() {
  std::vector<std::string> freed;
  absl::MutexLock lock(&mu_);
  // Read under the lock: a caller that waited for it would otherwise hold a
  // time older than the idle marks the previous holder set.
  const uint64_t now = MonotonicNanos();
  for (auto& [key, stream] : streams_) {
    for (auto& [rank, rs] : stream->ranks) {
      if (rs.producer == nullptr) continue;
      RingWriter& ring = rs.producer->ring();
      bool dead = ClientGone(rs, now);
      if (!dead && ring.client().pid == 0) {
        // Asked for but never mapped: its requester died, or it is past
        // the attach timeout (a request naming no process that will ever
        // map it must not hold the ring, a stream slot or a drain).
        dead = !HolderAlive(rs, now) ||
               now - rs.attached_ns >
                   uint64_t(options_.attach_timeout_seconds * 1e9);
      }
      if (dead) {
        freed.push_back(ring.name());
        Detach(*stream, rs);
      }
    }
    ForgetIdleSeats(*stream);
  }
  const bool past_deadline =
      options_.drain_timeout_seconds > 0 &&
      now - drain_started_ns_ > uint64_t(options_.drain_timeout_seconds * 1e9);
  if (draining_ && on_drained_ && (RingBytesInUse() == 0 || past_deadline)) {
    if (RingBytesInUse() != 0) {
      uint32_t attached = 0;
      for (const auto& [k, stream] : streams_) {
        attached += AttachedRanks(*stream);
      }
      Log(LogLevel::kWarn, "drain_deadline",
          {{"attached_ranks", absl::StrCat(attached)},
           {"drain_timeout_seconds",
            absl::StrCat(options_.drain_timeout_seconds)}});
    }
    std::function<void()> done = std::move(on_drained_);
    on_drained_ = nullptr;
    done();
  }
  ForgetIdleStreams(now);
  return freed;
}

void StreamRegistry::ForgetIdleStreams(uint64_t now) {
  const uint64_t idle = uint64_t(options_.idle_stream_seconds * 1e9);
  for (auto it = streams_.begin(); it != streams_.end();) {
    Stream& st = *it->second;
    const bool any = AttachedRanks(st) != 0;
    // A ghost goes with its last ring; a stream whose ranks attached and
    // died is kept for idle_stream_seconds, so a restarted rank re-attaches.
    const char* why = nullptr;
    if (any) {
      st.idle_since_ns = 0;
    } else if (!st.ever_mapped) {
      why = "no rank ever attached; its rings were freed";
    } else if (st.idle_since_ns == 0) {
      st.idle_since_ns = now;
    } else if (now > st.idle_since_ns && now - st.idle_since_ns > idle) {
      why = "idle";
    }
    if (why == nullptr) {
      ++it;
      continue;
    }
    Log(LogLevel::kInfo, "stream_forgotten",
        {{"stream", it->first.second},
         {"owner", DescribeOwner(it->first.first)},
         {"why", why}});
    st.setup->Cancel();
    it = streams_.erase(it);
  }
}

}  // namespace batchd

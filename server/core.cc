// Streams, ranks and their rings; see core.h. Specs and stream creation
// are in core_spec.cc, authorization, limits and quotas in core_access.cc.
#include "server/core.h"

#include <limits.h>
#include <sched.h>
#include <stdlib.h>
#include <sys/random.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <sys/statvfs.h>

#include <system_error>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/clock.h"
#include "base/log.h"
#include "base/paths.h"
#include "base/process.h"
#include "batchd/version.h"

namespace batchd {

namespace {

int DefaultThreads() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    return std::max(1, CPU_COUNT(&set));
  }
  return std::max(1L, sysconf(_SC_NPROCESSORS_ONLN));
}

// Inode of /proc/<pid>/ns/pid; 0 when it cannot be read (another user's
// process and no CAP_SYS_PTRACE).
uint64_t PidNamespaceOf(uint32_t pid) {
  char link[64];
  const std::string path = absl::StrCat("/proc/", pid, "/ns/pid");
  const ssize_t n = readlink(path.c_str(), link, sizeof(link) - 1);
  if (n <= 0) return 0;
  link[n] = '\0';
  const char* open = strchr(link, '[');
  return open == nullptr ? 0 : strtoull(open + 1, nullptr, 10);
}

}  // namespace

bool Caller::SameProcess(const Caller& other) const {
  return known && other.known && pid != 0 && pid == other.pid &&
         start_ticks == other.start_ticks && pid_ns == other.pid_ns;
}

std::string Caller::Describe() const {
  if (!known) return "an anonymous TCP caller";
  return pid == 0 ? absl::StrCat("uid ", uid, " (pid not visible)")
                  : absl::StrCat("pid ", pid, " (uid ", uid, ")");
}

Caller Caller::Process(uint32_t pid) {
  Caller c;
  c.known = true;
  c.pid = pid;
  c.start_ticks = ProcessStartTicks(int(pid));
  c.pid_ns = PidNamespaceOf(pid);
  std::ifstream status(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(status, line)) {
    std::istringstream in(line.substr(line.find(':') + 1));
    if (line.rfind("Uid:", 0) == 0) {
      in >> c.uid;  // the real uid, as SO_PEERCRED gives the effective one
      in >> c.uid;
    } else if (line.rfind("Gid:", 0) == 0) {
      in >> c.gid;
      in >> c.gid;
    } else if (line.rfind("Groups:", 0) == 0) {
      uint32_t g;
      while (in >> g) c.groups.push_back(g);
    }
  }
  return c;
}

absl::StatusOr<std::unique_ptr<Core>> Core::Create(const CoreOptions& options) {
  CoreOptions o = options;
  char resolved[PATH_MAX];
  if (realpath(o.data_root.c_str(), resolved) == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("--data-root ", o.data_root, " does not exist"));
  }
  o.data_root = resolved;
  if (o.threads <= 0) o.threads = DefaultThreads();
  if (o.index_threads <= 0) {
    o.index_threads = std::min(DefaultThreads(), Executor::kMaxThreads);
  }
  struct statvfs shm;
  const uint64_t shm_bytes = statvfs("/dev/shm", &shm) == 0
                                 ? uint64_t(shm.f_blocks) * shm.f_frsize
                                 : 0;
  if (o.max_total_bytes == CoreOptions::kAutoRingBytes) {
    o.max_total_bytes = shm_bytes / 2;
  }
  if (o.max_ring_bytes_per_uid == CoreOptions::kAutoRingBytes) {
    // A quarter of what all rings may take: four users at their full quota.
    o.max_ring_bytes_per_uid =
        (o.max_total_bytes != 0 ? o.max_total_bytes : shm_bytes) / 4;
  }
  if (o.default_slots == 0) o.default_slots = 4;
  if (o.shm_prefix.empty() || o.shm_prefix.find('/') != std::string::npos ||
      o.shm_prefix.find('.') != std::string::npos) {
    return absl::InvalidArgumentError(
        "--shm-prefix must be a non-empty name without '/' or '.'");
  }
  // The workers start first (Core's constructor), then the pool workloads
  // index and count on: started here, once, so that a limit on the
  // daemon's tasks is an error now, not a crash later.
  std::unique_ptr<Core> core(new Core(o));
  if (!core->engine_->status().ok()) return core->engine_->status();
  ExecutorOptions eo;
  eo.serving_threads = eo.background_threads = o.index_threads;
  absl::StatusOr<std::unique_ptr<Executor>> executor = Executor::Create(eo);
  if (!executor.ok()) {
    return absl::Status(executor.status().code(),
                        absl::StrCat("--index-threads ", o.index_threads, ": ",
                                     executor.status().message()));
  }
  core->executor_ = *std::move(executor);
  core->shared_work_ = std::make_unique<SharedWork>(o.max_model_bytes);
  if (absl::Status s = core->Start(); !s.ok()) return s;
  return core;
}

namespace {
std::atomic<int> abandoned_threads{0};
}  // namespace

int AbandonedThreads() { return abandoned_threads.load(); }

Core::Core(const CoreOptions& options)
    : options_(options),
      start_ns_(MonotonicNanos()),
      last_throughput_ns_(start_ns_) {
  ReadAhead::Options ra;
  ra.budget_bytes = options_.readahead_bytes;
  ra.io_threads = options_.readahead_threads;
  readahead_ = std::make_unique<ReadAhead>(ra);
  engine_ = std::make_unique<Engine>(options_.threads, readahead_.get(),
                                     options_.read_stall_seconds);
}

absl::Status Core::Start() {
  if (!engine_->status().ok()) return engine_->status();
  try {
    heartbeat_thread_ = std::thread([this] { HeartbeatLoop(); });
    supervisor_thread_ = std::thread([this] { SupervisorLoop(); });
  } catch (const std::system_error& e) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "cannot start the ", heartbeat_thread_.joinable() ? "supervisor"
                                                          : "heartbeat",
        " thread: ", e.what(),
        " (the daemon is at its thread limit: systemd's TasksMax, "
        "RLIMIT_NPROC or the kernel's threads-max)"));
  }
  return absl::OkStatus();
}

Core::~Core() {
  stop_.store(true);
  if (heartbeat_thread_.joinable()) heartbeat_thread_.join();
  if (supervisor_thread_.joinable()) supervisor_thread_.join();
  // Workers and I/O threads stuck in storage that does not answer are not
  // waited for past the bound: they are left (with what they use) to end
  // with the process.
  const uint64_t deadline =
      MonotonicNanos() + uint64_t(options_.stop_wait_seconds * 1e9) + 1;
  const bool workers_stopped = engine_->Stop(deadline);
  CloseAll();
  if (!workers_stopped) {
    abandoned_threads.fetch_add(1);
    engine_.release();  // never destroyed: its stuck workers use it
  }
  if (!readahead_->Stop(deadline)) {
    abandoned_threads.fetch_add(1);
    readahead_.release();  // never destroyed: its stuck threads use it
  }
  // Passes still running (they outlive their streams) stop and store what
  // they learnt.
  if (executor_ != nullptr) executor_->Shutdown();
}

std::string Core::SegmentName(uint32_t owner_uid, const std::string& stream,
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

void Core::HeartbeatLoop() {
  // Does nothing else, so that a busy server never looks dead.
  while (!stop_.load()) {
    const uint64_t now = MonotonicNanos();
    {
      std::lock_guard<std::mutex> lock(beat_mu_);
      for (const auto& p : beating_) p->ring().Heartbeat(now);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

void Core::SupervisorLoop() {
  while (!stop_.load()) {
    for (const std::string& seg : ReapDeadClients()) {
      Log(LogLevel::kInfo, "client_gone",
          {{"segment", seg}, {"msg", "ring freed; the rank may re-attach"}});
    }
    const uint64_t now = MonotonicNanos();
    if (options_.throughput_log_seconds > 0 &&
        now - last_throughput_ns_ >=
            uint64_t(options_.throughput_log_seconds * 1e9)) {
      LogThroughput(now);
    }
    ReportIndexing(now);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

namespace {

constexpr double kIndexingLogSeconds = 5;

// "indexing wmt lengths 1200/5900 pairs (20%), 300/s, ETA 16 s".
std::string IndexingText(const IndexProgress& p) {
  std::string text = absl::StrCat("indexing ", p.what, " ", p.done, "/",
                                  p.total, " ", p.unit);
  if (p.total > 0) {
    absl::StrAppend(&text, " (", p.done * 100 / p.total, "%)");
  }
  if (p.rate > 0) {
    absl::StrAppend(&text, ", ", uint64_t(p.rate), "/s, ETA ",
                    uint64_t(p.eta_seconds + 0.5), " s");
  }
  return text;
}

}  // namespace

void Core::ReportIndexing(uint64_t now) {
  const bool log_now =
      now - last_indexing_log_ns_ >= uint64_t(kIndexingLogSeconds * 1e9);
  bool logged = false;
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [key, stream] : streams_) {
    const std::optional<IndexProgress> p = stream->setup->workload->progress();
    const std::string text = p.has_value() ? IndexingText(*p) : "";
    for (const RankSeat& rs : stream->ranks) {
      if (rs.producer != nullptr) rs.producer->ring().SetWaitReason(text);
    }
    if (p.has_value() && log_now) {
      Log(LogLevel::kInfo, "indexing",
          {{"stream", key.second},
           {"owner", DescribeOwner(key.first)},
           {"what", p->what},
           {"done", std::to_string(p->done)},
           {"total", std::to_string(p->total)},
           {"unit", p->unit},
           {"rate", absl::StrCat(uint64_t(p->rate))},
           {"eta_s", absl::StrCat(uint64_t(p->eta_seconds + 0.5))}});
      logged = true;
    }
  }
  if (logged) last_indexing_log_ns_ = now;
}

void Core::LogThroughput(uint64_t now) {
  const double span = double(now - last_throughput_ns_) / 1e9;
  last_throughput_ns_ = now;
  std::map<StreamKey, std::pair<uint64_t, uint64_t>> totals;
  for (const StreamStatusData& st : GetStatus().streams) {
    uint64_t examples = 0, bytes = 0;
    int attached = 0;
    for (const RankStatusData& r : st.ranks) {
      examples += r.examples;
      bytes += r.bytes;
      attached += r.attached;
    }
    const StreamKey key{st.owner_uid, st.spec.name};
    totals[key] = {examples, bytes};
    const auto last = last_totals_.find(key);
    const uint64_t de = last == last_totals_.end() ? examples
                                                   : examples - last->second.first;
    const uint64_t db = last == last_totals_.end() ? bytes
                                                   : bytes - last->second.second;
    Log(LogLevel::kInfo, "throughput",
        {{"stream", st.spec.name},
         {"owner", DescribeOwner(st.owner_uid)},
         {"attached_ranks", std::to_string(attached)},
         {"examples_per_s", absl::StrCat(int64_t(double(de) / span))},
         {"bytes_per_s", absl::StrCat(int64_t(double(db) / span))},
         {"decode_errors", std::to_string(st.decode_errors)},
         {"skipped", std::to_string(st.skipped_examples)}});
  }
  last_totals_ = std::move(totals);
}

uint32_t Core::Drain() {
  std::lock_guard<std::mutex> lock(mu_);
  draining_ = true;
  uint32_t attached = 0;
  for (const auto& [name, stream] : streams_) {
    for (const RankSeat& rs : stream->ranks) attached += rs.producer != nullptr;
  }
  return attached;
}

absl::StatusOr<uint32_t> Core::Drain(const Caller& caller) {
  if (absl::Status s = CheckAdmin(caller, "Drain"); !s.ok()) return s;
  return Drain();
}

void Core::SetOnDrained(std::function<void()> on_drained) {
  std::lock_guard<std::mutex> lock(mu_);
  on_drained_ = std::move(on_drained);
}

bool Core::HolderAlive(const RankSeat& rs, uint64_t now) const {
  const RingWriter& ring = rs.producer->ring();
  if (ring.client().pid != 0) {
    // Mapped: the client's own stamps (pid, start time, pid namespace and
    // heartbeat) say whether it lives.
    return !ring.ClientGone(now,
                            uint64_t(options_.client_stale_seconds * 1e9));
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

absl::StatusOr<std::shared_ptr<Schedule>> Core::ScheduleFor(
    const Stream& stream, const RankResume* resume) const {
  if (resume == nullptr) return SharedSchedule(stream.setup);
  std::shared_ptr<Schedule> schedule;
  if (resume->has_cursor) {
    if (resume->cursor_step > resume->step) {
      return absl::InvalidArgumentError(absl::StrCat(
          "resume at step ", resume->step, " names the cursor of step ",
          resume->cursor_step, ", a later one"));
    }
    // Anchored where this rank resumes, so that ranks a step or two apart
    // each find their own batches without replaying earlier epochs.
    schedule = OwnSchedule(stream.setup);
    if (absl::Status s =
            schedule->Anchor(resume->cursor_step, resume->cursor, true);
        !s.ok()) {
      return s;
    }
  } else {
    schedule = SharedSchedule(stream.setup);
  }
  if (absl::Status s = schedule->CheckReachable(resume->step); !s.ok()) {
    return s;
  }
  return schedule;
}

// OpenStream's steps: check the spec, find whose stream it is, find or
// create it (within the limits and the owner's quotas), then the rank: its
// seat, its ring's limits, its ring.
absl::StatusOr<OpenResult> Core::OpenStream(const StreamSpec& in, uint32_t rank,
                                            const Caller& caller,
                                            std::optional<uint32_t> owner_uid,
                                            const RankResume* resume) {
  absl::StatusOr<StreamSpec> spec = CheckedSpec(in, rank);
  if (!spec.ok()) return spec.status();
  std::lock_guard<std::mutex> lock(mu_);
  absl::StatusOr<StreamKey> key = AuthorizeOpen(spec->name, caller, owner_uid);
  if (!key.ok()) return key.status();
  bool created = false;
  absl::StatusOr<Stream*> stream =
      FindOrCreateStream(*key, *spec, caller, &created);
  if (!stream.ok()) return stream.status();
  absl::StatusOr<OpenResult> opened =
      OpenRank(*key, **stream, *spec, rank, caller, resume);
  // A stream this call created and could not open a rank of is not kept.
  if (!opened.ok() && created) streams_.erase(*key);
  return opened;
}

absl::StatusOr<StreamSpec> Core::CheckedSpec(const StreamSpec& in,
                                             uint32_t rank) const {
  StreamSpec spec = in;
  if (spec.slots == 0) spec.slots = options_.default_slots;
  if (spec.split.empty()) spec.split = "train";
  if (absl::Status s = ValidateSpec(spec); !s.ok()) return s;
  if (rank >= spec.world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", rank, " is out of range for world_size ",
                     spec.world_size, " (ranks are 0..", spec.world_size - 1,
                     ")"));
  }
  return spec;
}

absl::StatusOr<Core::Stream*> Core::FindOrCreateStream(const StreamKey& key,
                                                       const StreamSpec& spec,
                                                       const Caller& caller,
                                                       bool* created) {
  auto it = streams_.find(key);
  if (it != streams_.end()) return it->second.get();
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
  if (streams_.size() >= options_.max_streams) {
    return absl::ResourceExhaustedError(
        absl::StrCat("batchd serves ", streams_.size(),
                     " streams, its limit (--max-streams ",
                     options_.max_streams, "); close one first"));
  }
  const bool exempt = IsAdmin(caller);
  if (absl::Status s = CheckStreamQuota(key.first, exempt); !s.ok()) return s;
  absl::StatusOr<std::unique_ptr<Stream>> made = MakeStream(spec);
  if (!made.ok()) return made.status();
  if (absl::Status s = CheckModelQuota(
          key.first, exempt, (*made)->setup->workload->resident_bytes());
      !s.ok()) {
    return s;
  }
  (*made)->owner = caller;
  (*made)->exempt = exempt;
  *created = true;
  return streams_.emplace(key, std::move(*made)).first->second.get();
}

absl::StatusOr<OpenResult> Core::OpenRank(const StreamKey& key, Stream& stream,
                                          const StreamSpec& spec, uint32_t rank,
                                          const Caller& caller,
                                          const RankResume* resume) {
  if (absl::Status s = TakeSeat(stream, spec, rank, caller); !s.ok()) return s;
  absl::StatusOr<std::shared_ptr<Schedule>> schedule =
      ScheduleFor(stream, resume);
  if (!schedule.ok()) return schedule.status();
  const uint64_t start_step = resume != nullptr ? resume->step : spec.start_step;
  const StreamSetup& sc = *stream.setup;
  RingGeometry geometry;
  geometry.slot_count = spec.slots;
  geometry.payload_bytes = sc.layout.payload_bytes;
  geometry.rank = rank;
  geometry.world_size = spec.world_size;
  geometry.stream_name = spec.name;
  if (absl::Status s = CheckRingLimits(key, stream, geometry.SegmentBytes());
      !s.ok()) {
    return s;
  }
  const std::string segment = SegmentName(key.first, spec.name, rank);
  absl::StatusOr<std::unique_ptr<RingWriter>> ring =
      RingWriter::Create(segment, geometry, options_.shm_group);
  if (!ring.ok()) return ring.status();
  RankSeat& rs = stream.ranks[rank];
  if (rs.ever_attached) ++rs.reattaches;
  rs.ever_attached = true;
  rs.holder = caller;
  rs.attached_ns = MonotonicNanos();
  stream.idle_since_ns = 0;
  rs.producer = std::make_shared<RankProducer>(
      stream.setup, rank, start_step, std::move(*ring), *std::move(schedule));
  {
    std::lock_guard<std::mutex> beat(beat_mu_);
    beating_.push_back(rs.producer);
  }
  engine_->Add(rs.producer);

  OpenResult r;
  r.segment = segment;
  r.segment_bytes = geometry.SegmentBytes();
  r.slots = geometry.slot_count;
  r.slot_bytes = geometry.SlotBytes();
  r.examples_per_epoch = sc.sampler.num_examples();
  // Packed epochs hold as many steps as their rows allow: 0, not known.
  r.steps_per_epoch = sc.schedule->steps_per_epoch();
  for (const BatchLayout::Entry& e : sc.layout.entries) {
    TensorLayout t = e.tensor;
    t.example_shape.insert(t.example_shape.begin(),
                           int64_t(sc.layout.per_rank_batch));
    r.tensors.push_back(std::move(t));
  }
  r.server_pid = uint32_t(getpid());
  r.start_step = start_step;
  r.cursor_resume = rs.producer->schedule().resumes_by_cursor();
  return r;
}

absl::Status Core::TakeSeat(Stream& stream, const StreamSpec& spec,
                            uint32_t rank, const Caller& caller) {
  RankSeat& rs = stream.ranks[rank];
  // Ranks that never attached must agree on everything; a rank re-attaching
  // after its client died may ask for another start step.
  std::string detail;
  const std::string field =
      FirstDifference(stream.spec, spec, !rs.ever_attached, &detail);
  if (!field.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "stream '", spec.name, "' exists with another spec: ", detail));
  }
  if (absl::Status s = stream.setup->schedule->CheckReachable(spec.start_step);
      !s.ok()) {
    return s;
  }
  if (rs.producer == nullptr) return absl::OkStatus();
  // Only the process that holds the rank may take it again while it lives;
  // who the caller is comes from the kernel, not the request.
  if (HolderAlive(rs, MonotonicNanos()) && !rs.holder.SameProcess(caller)) {
    const RingWriter::ClientInfo c = rs.producer->ring().client();
    return absl::AlreadyExistsError(absl::StrCat(
        "rank ", rank, " of stream '", spec.name, "' is already attached by ",
        c.pid != 0 ? absl::StrCat("pid ", c.pid) : rs.holder.Describe()));
  }
  Detach(stream, rs);  // its old client is gone, or it is us again
  return absl::OkStatus();
}

void Core::Detach(Stream& stream, RankSeat& rs) {
  if (rs.producer == nullptr) return;
  // A client stamps its pid when it maps the ring and leaves it there.
  if (rs.producer->ring().client().pid != 0) stream.ever_mapped = true;
  engine_->Retire(rs.producer);
  {
    std::lock_guard<std::mutex> beat(beat_mu_);
    beating_.erase(
        std::remove(beating_.begin(), beating_.end(), rs.producer),
        beating_.end());
  }
  rs.examples_before += rs.producer->examples.load();
  rs.bytes_before += rs.producer->bytes.load();
  // The segment is unlinked now so that the name is free for a re-attaching
  // rank; workers still filling a slot keep the mapping alive until done.
  rs.producer->ring().Unlink();
  rs.producer.reset();
}

std::vector<std::string> Core::ReapDeadClients() {
  std::vector<std::string> freed;
  const uint64_t stale = uint64_t(options_.client_stale_seconds * 1e9);
  std::lock_guard<std::mutex> lock(mu_);
  // Read under the lock: a caller that waited for it would otherwise hold a
  // time older than the idle marks the previous holder set.
  const uint64_t now = MonotonicNanos();
  for (auto& [key, stream] : streams_) {
    for (RankSeat& rs : stream->ranks) {
      if (rs.producer == nullptr) continue;
      RingWriter& ring = rs.producer->ring();
      bool dead = ring.ClientGone(now, stale);
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
  }
  if (draining_ && on_drained_ && RingBytesInUse() == 0) {
    std::function<void()> done = std::move(on_drained_);
    on_drained_ = nullptr;
    done();
  }
  ForgetIdleStreams(now);
  return freed;
}

void Core::ForgetIdleStreams(uint64_t now) {
  const uint64_t idle = uint64_t(options_.idle_stream_seconds * 1e9);
  for (auto it = streams_.begin(); it != streams_.end();) {
    Stream& st = *it->second;
    bool any = false;
    for (const RankSeat& rs : st.ranks) any |= rs.producer != nullptr;
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

absl::Status Core::CloseStream(uint32_t owner_uid, const std::string& name) {
  std::unique_ptr<Stream> closed;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = streams_.find(StreamKey{owner_uid, name});
    if (it == streams_.end()) {
      return absl::NotFoundError(absl::StrCat(
          DescribeOwner(owner_uid), " has no stream named '", name, "'"));
    }
    for (RankSeat& rs : it->second->ranks) Detach(*it->second, rs);
    it->second->setup->Cancel();
    closed = std::move(it->second);
    streams_.erase(it);
  }
  // Destroyed without the lock: a packed schedule may finish counting an
  // epoch first, and no other stream waits for that.
  closed.reset();
  return absl::OkStatus();
}

void Core::CloseAll() {
  std::map<StreamKey, std::unique_ptr<Stream>> closed;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [key, stream] : streams_) {
      for (RankSeat& rs : stream->ranks) {
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

ServerStatusData Core::GetStatus() {
  ServerStatusData s;
  s.pid = uint32_t(getpid());
  s.version = kBatchdVersion;
  const uint64_t now = MonotonicNanos();
  s.uptime_seconds = double(now - start_ns_) / 1e9;
  s.threads = uint32_t(SelfThreadCount());
  s.worker_threads = uint32_t(engine_->threads());
  s.rss_bytes = SelfRssBytes(false);
  s.readahead_bytes = options_.readahead_bytes;
  s.readahead_threads = uint32_t(readahead_->io_threads());
  s.max_streams_per_uid = options_.max_streams_per_uid;
  s.max_ring_bytes_per_uid = options_.max_ring_bytes_per_uid;
  s.max_model_bytes_per_uid = options_.max_model_bytes_per_uid;
  std::lock_guard<std::mutex> lock(mu_);
  s.draining = draining_;
  for (const auto& [key, stream] : streams_) {
    if (s.uids.empty() || s.uids.back().uid != key.first) {
      s.uids.push_back(UsageOf(key.first));
    }
    StreamStatusData st;
    st.spec = stream->spec;
    st.owner_uid = key.first;
    st.owner_known = key.first != kAnonymousUid;
    st.steps_per_epoch = stream->setup->schedule->steps_per_epoch();
    st.decode_errors = stream->setup->counters.decode_errors.load();
    st.skipped_examples = stream->setup->counters.skipped_examples.load();
    st.indexing = stream->setup->workload->progress();
    if (stream->setup->readahead != nullptr) {
      st.readahead = stream->setup->readahead->stats();
    }
    uint64_t examples = 0, bytes = 0;
    for (size_t r = 0; r < stream->ranks.size(); ++r) {
      const RankSeat& rs = stream->ranks[r];
      RankStatusData rd;
      rd.rank = uint32_t(r);
      rd.reattaches = rs.reattaches;
      rd.examples = rs.examples_before;
      rd.bytes = rs.bytes_before;
      if (rs.producer != nullptr) {
        const RankProducer& p = *rs.producer;
        const RingWriter& ring = p.ring();
        const RingWriter::ClientInfo c = ring.client();
        rd.attached = true;
        rd.client_pid = c.pid != 0 ? c.pid : rs.holder.pid;
        const uint64_t published = ring.published();
        const uint64_t released = ring.released();
        rd.produced_step = p.start_step() + published;
        rd.consumed_step = p.start_step() + released;
        rd.ring_fill = uint32_t(published - released);
        rd.ring_slots = ring.geometry().slot_count;
        rd.server_wait_seconds = double(p.server_wait_ns.load()) / 1e9;
        rd.client_wait_seconds = double(c.wait_ns) / 1e9;
        rd.examples += p.examples.load();
        rd.bytes += p.bytes.load();
        s.ring_bytes += ring.geometry().SegmentBytes();
      }
      examples += rd.examples;
      bytes += rd.bytes;
      st.ranks.push_back(rd);
    }
    const double age = double(now - stream->created_ns) / 1e9;
    if (age > 0) {
      st.examples_per_second = double(examples) / age;
      st.bytes_per_second = double(bytes) / age;
    }
    s.streams.push_back(std::move(st));
  }
  return s;
}

}  // namespace batchd

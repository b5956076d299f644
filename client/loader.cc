// The client Loader: its stream opened (client/stream_open.h), then
// batches; a daemon that stops is waited for and the stream reopened at
// this rank's next step (see batchd/loader.h).
#include "batchd/loader.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "base/address.h"
#include "base/clock.h"
#include "batchd/v1/batchd.pb.h"
#include "batchd/version.h"
#include "client/cuda_host.h"
#include "client/preparing.h"
#include "client/stream_open.h"
#include "ring/ring.h"

namespace batchd {

// Owns one acquired slot; the last owner's destructor releases it. Holds the
// reader so that the mapping outlives every tensor, even after the Loader
// (or after the stream was reopened on another ring).
class SlotLease {
 public:
  SlotLease(std::shared_ptr<RingReader> reader, uint64_t pos)
      : reader_(std::move(reader)), pos_(pos) {}
  ~SlotLease() { reader_->Release(pos_); }

 private:
  std::shared_ptr<RingReader> reader_;
  uint64_t pos_;
};

Batch::Batch(Batch&&) noexcept = default;
Batch& Batch::operator=(Batch&&) noexcept = default;
Batch::~Batch() = default;

const Tensor* Batch::tensor(const std::string& name) const {
  for (const Tensor& t : tensors_) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

void Batch::Release() {
  lease_.reset();
  tensors_.clear();
}

namespace {

int64_t EnvInt(const char* name, int64_t def) {
  const char* v = getenv(name);
  int64_t n;
  if (v == nullptr || !absl::SimpleAtoi(v, &n)) return def;
  return n;
}

double Seconds(uint64_t ns) { return double(ns) / 1e9; }

absl::Status CheckStateMatches(const LoaderOptions& o, const LoaderState& st) {
  auto differ = [&](const char* field, const std::string& state,
                    const std::string& spec) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the loader state was saved for ", field, " ", state,
        ", but this Loader asks for ", spec,
        ": resume with the spec the state was saved with"));
  };
  if (st.workload != o.workload) return differ("workload", st.workload, o.workload);
  if (st.data != o.data) return differ("data", "'" + st.data + "'", "'" + o.data + "'");
  if (st.split != o.split) return differ("split", st.split, o.split);
  if (st.global_batch_size != o.global_batch_size) {
    return differ("global_batch_size", absl::StrCat(st.global_batch_size),
                  absl::StrCat(o.global_batch_size));
  }
  if (st.seed != o.seed) {
    return differ("seed", absl::StrCat(st.seed), absl::StrCat(o.seed));
  }
  if (st.options != o.options) {
    auto join = [](const std::map<std::string, std::string>& m) {
      return "{" + absl::StrJoin(m, ", ", absl::PairFormatter("=")) + "}";
    };
    return differ("options", join(st.options), join(o.options));
  }
  return absl::OkStatus();
}

}  // namespace

void ApplyEnvironmentDefaults(LoaderOptions* o) {
  if (o->server.empty()) {
    const char* s = getenv("BATCHD_SERVER");
    o->server = s != nullptr ? s : kDefaultServerAddress;
  }
  if (o->server_uid < 0) o->server_uid = EnvInt("BATCHD_SERVER_UID", -1);
  if (o->world_size < 0) o->world_size = int(EnvInt("WORLD_SIZE", 1));
  if (o->rank < 0) o->rank = int(EnvInt("RANK", EnvInt("LOCAL_RANK", 0)));
}

class Loader::Impl {
 public:
  const pid_t owner_pid = getpid();
  LoaderOptions options;  // as opened: the spec every rank shares
  bool cursor_resume = false;
  std::function<bool()> interrupt;

  // Next()'s thread only.
  Position next;               // where this rank resumes
  bool returned_any = false;   // a batch was returned
  // The epoch in progress: the last batch returned did not end it (it
  // was not known to be its epoch's last). epoch_steps: that epoch's
  // steps, 0 when not known.
  bool epoch_open = false;
  uint64_t epoch = 0;
  uint64_t epoch_steps = 0;
  // A batch of a later epoch that NextInEpoch drew and did not return.
  std::optional<Batch> kept;
  uint64_t waiting_since = 0;  // Next() began waiting for the next batch
  uint64_t progress_at = 0;    // the server last reported progress
  std::string last_reason;     // ... as this wait reason
  uint64_t all_held_since = 0;
  uint32_t reconnects = 0;
  uint64_t reconnect_ns = 0;
  // The uid the first ring belonged to; every later ring must be its.
  int64_t ring_owner = -1;
  void* pinned = nullptr;  // the mapping RegisterPinned registered

  absl::Mutex mu;
  absl::CondVar cv;
  // The heartbeat reads it.
  std::shared_ptr<RingReader> reader ABSL_GUARDED_BY(mu);
  bool stop ABSL_GUARDED_BY(mu) = false;
  std::thread heartbeat;

  std::shared_ptr<RingReader> Reader() {
    absl::MutexLock lock(&mu);
    return reader;
  }
  void SetReader(std::shared_ptr<RingReader> r) {
    absl::MutexLock lock(&mu);
    reader = std::move(r);
  }
  void StartHeartbeat() {
    heartbeat = std::thread([this] {
      absl::MutexLock lock(&mu);
      while (!stop) {
        reader->Heartbeat();
        cv.WaitWithTimeout(&mu, absl::Milliseconds(100));
      }
    });
  }
  bool Interrupted() const { return interrupt && !interrupt(); }

  ~Impl() {
    {
      absl::MutexLock lock(&mu);
      stop = true;
    }
    cv.SignalAll();
    if (heartbeat.joinable()) heartbeat.join();
  }
};

Loader::Loader(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Loader::~Loader() {
  // A forked child has the parent's Impl but not its heartbeat thread, and
  // its mutex and condition variable may be in any state (held, waited on):
  // destroying them could hang. The child keeps its copy until it exits.
  if (impl_ != nullptr && getpid() != impl_->owner_pid) (void)impl_.release();
}

absl::StatusOr<std::unique_ptr<Loader>> Loader::Open(
    const LoaderOptions& in) {
  LoaderOptions o = in;
  ApplyEnvironmentDefaults(&o);
  if (o.stream.empty()) {
    return absl::InvalidArgumentError("LoaderOptions.stream is required");
  }
  if (o.global_batch_size == 0) {
    return absl::InvalidArgumentError(
        "LoaderOptions.global_batch_size is required");
  }
  if (o.world_size < 1 || o.rank < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "bad rank ", o.rank, " / world_size ", o.world_size));
  }
  if (o.owner_uid > int64_t(UINT32_MAX)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "LoaderOptions.owner_uid ", o.owner_uid, " is not a uid"));
  }
  if (o.state.has_value()) {
    if (o.start_step != 0 || o.has_start_cursor) {
      return absl::InvalidArgumentError(
          "pass either a loader state or start_step / start_cursor, not both");
    }
    if (absl::Status s = CheckStateMatches(o, *o.state); !s.ok()) return s;
    o.start_step = o.state->next_step;
    o.has_start_cursor = o.state->has_cursor;
    o.has_start_cursor_step = o.state->has_cursor;
    std::copy(o.state->cursor, o.state->cursor + 3, o.start_cursor);
    o.start_cursor_step = o.state->cursor_step;
  }
  v1::OpenStreamResponse resp;
  int64_t ring_owner = -1;
  absl::StatusOr<std::unique_ptr<RingReader>> reader =
      OpenRingWithin(o, o.connect_timeout_seconds, &resp, &ring_owner);
  if (!reader.ok()) return reader.status();

  auto impl = std::make_unique<Impl>();
  impl->ring_owner = ring_owner;
  impl->options = o;
  impl->cursor_resume = resp.cursor_resume();
  impl->next.step = o.start_step;
  impl->next.has_cursor = o.has_start_cursor;
  std::copy(o.start_cursor, o.start_cursor + 3, impl->next.cursor);
  impl->next.cursor_step =
      o.has_start_cursor_step ? o.start_cursor_step : o.start_step;
  impl->SetReader(std::move(*reader));
  impl->StartHeartbeat();
  std::unique_ptr<Loader> loader(new Loader(std::move(impl)));
  loader->options_ = o;
  StreamInfo& info = loader->info_;
  info.segment = resp.segment();
  info.server_pid = resp.server_pid();
  info.rank = uint32_t(o.rank);
  info.world_size = uint32_t(o.world_size);
  info.examples_per_epoch = resp.examples_per_epoch();
  info.steps_per_epoch = resp.steps_per_epoch();
  info.start_step = resp.start_step();
  info.slots = resp.slots();
  info.slot_bytes = resp.slot_bytes();
  info.cursor_resume = resp.cursor_resume();
  return loader;
}

namespace {

// "steps 4, 5 and 6" for an error message.
std::string StepList(const std::vector<uint64_t>& steps) {
  if (steps.size() == 1) return absl::StrCat("step ", steps[0]);
  std::vector<std::string> s;
  for (uint64_t v : steps) s.push_back(absl::StrCat(v));
  const std::string last = s.back();
  s.pop_back();
  return absl::StrCat("steps ", absl::StrJoin(s, ", "), " and ", last);
}

}  // namespace

absl::StatusOr<Batch> Loader::Next() {
  absl::StatusOr<Batch> b = Take();
  if (b.ok()) Returned(*b);
  return b;
}

absl::StatusOr<Batch> Loader::NextInEpoch() {
  Impl& m = *impl_;
  absl::StatusOr<Batch> b = Take();
  if (!b.ok()) return b;
  if (m.epoch_open && b->epoch() != m.epoch) {
    const uint64_t ended = m.epoch;
    m.kept = *std::move(b);
    m.epoch_open = false;
    return absl::OutOfRangeError(absl::StrCat("epoch ", ended, " of stream ",
                                              options_.stream, " has ended"));
  }
  Returned(*b);
  return b;
}

absl::StatusOr<uint64_t> Loader::EpochSteps() const {
  const Impl& m = *impl_;
  if (info_.steps_per_epoch > 0) return info_.steps_per_epoch;
  if (m.epoch_open && m.epoch_steps > 0) return m.epoch_steps;
  if (!m.epoch_open && m.kept.has_value() && m.kept->epoch_steps() > 0) {
    return m.kept->epoch_steps();
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "stream ", options_.stream,
      " packs rows: its epochs differ in length, "
      "counted by batchd as the stream reaches them; that of the ",
      m.epoch_open ? "epoch in progress is not known yet"
                   : "next epoch is known from its first batch on (each "
                     "batch says: epoch_steps)"));
}

void Loader::Returned(const Batch& b) {
  Impl& m = *impl_;
  m.returned_any = true;
  m.next.step = b.step() + 1;
  m.next.has_cursor = m.cursor_resume;
  m.next.cursor[0] = b.batch_cursor_epoch();
  m.next.cursor[1] = b.batch_cursor_window();
  m.next.cursor[2] = b.batch_cursor_row();
  m.next.cursor_step = b.step();
  m.epoch = b.epoch();
  m.epoch_steps = b.epoch_steps();
  m.epoch_open = !b.last_in_epoch();
}

absl::StatusOr<Batch> Loader::Take() {
  Impl& m = *impl_;
  if (getpid() != m.owner_pid) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "this Loader of stream %s belongs to pid %d, not to its forked child "
        "%d: open a Loader of the child's own (its rank's) instead",
        options_.stream, m.owner_pid, getpid()));
  }
  if (m.kept.has_value()) {
    Batch b = *std::move(m.kept);
    m.kept.reset();
    return b;
  }
  const LoaderOptions& o = options_;
  uint64_t start = MonotonicNanos();
  uint64_t progress_at = start, all_held_since = 0;
  std::string reason;
  for (;;) {
    if (m.Interrupted()) return absl::AbortedError("interrupted");
    std::shared_ptr<RingReader> r = m.Reader();
    absl::StatusOr<uint64_t> pos = r->Acquire(0.1);
    if (pos.ok()) return MakeBatch(r, *pos);
    if (absl::IsUnavailable(pos.status()) && o.reconnect_seconds > 0) {
      if (absl::Status s = Reconnect(pos.status()); !s.ok()) return s;
      // The timeouts are about a live server: they count from now.
      start = progress_at = MonotonicNanos();
      all_held_since = 0;
      reason.clear();
      continue;
    }
    if (!absl::IsDeadlineExceeded(pos.status())) return pos.status();
    const uint64_t now = MonotonicNanos();
    const std::string why = r->WaitReason();
    if (why != reason) {
      reason = why;
      progress_at = now;
    }
    const std::string says = why.empty() ? "" : "; the server says: " + why;
    const std::vector<uint64_t> held = r->HeldSteps();
    const bool timed_out =
        o.timeout_seconds >= 0 && Seconds(now - start) >= o.timeout_seconds;
    if (held.size() < r->slot_count()) {
      all_held_since = 0;
    } else if (all_held_since == 0) {
      all_held_since = now;
    }
    if (all_held_since != 0 &&
        (timed_out || Seconds(now - all_held_since) >= kHeldSeconds)) {
      return absl::DeadlineExceededError(absl::StrFormat(
          "no batch can come: every one of the ring's %u slots holds a batch "
          "this process keeps (%s of stream %s, rank %u); the server writes "
          "the next batch only into a slot given back. Drop the batches you "
          "do not need, copy what you keep (tensor.clone(), numpy.copy), or "
          "open the stream with more slots (slots=%u)",
          r->slot_count(), StepList(held), o.stream, o.rank,
          2 * r->slot_count()));
    }
    if (timed_out) {
      return absl::DeadlineExceededError(absl::StrFormat(
          "no batch from batchd (pid %u) within %.3g s: stream %s, rank %u%s",
          r->header()->server_pid, o.timeout_seconds, o.stream, o.rank, says));
    }
    if (o.stall_timeout_seconds >= 0 &&
        Seconds(now - progress_at) >= o.stall_timeout_seconds) {
      return absl::DeadlineExceededError(absl::StrFormat(
          "no batch from batchd (pid %u) for %.0f s and no progress reported "
          "(stall_timeout %.3g s): stream %s, rank %u%s",
          r->header()->server_pid, Seconds(now - start),
          o.stall_timeout_seconds, o.stream, o.rank, says));
    }
  }
}

absl::StatusOr<Batch> Loader::MakeBatch(std::shared_ptr<RingReader> r,
                                        uint64_t pos) {
  Batch b;
  b.lease_ = std::make_shared<SlotLease>(r, pos);
  const shm::SlotHeader* h = r->Slot(pos);
  b.step_ = h->step;
  b.epoch_ = h->epoch;
  b.position_ = h->position;
  b.valid_count_ = h->valid_count;
  b.cursor_[0] = h->cursor_epoch;
  b.cursor_[1] = h->cursor_window;
  b.cursor_[2] = h->cursor_row;
  b.batch_cursor_[0] = h->batch_cursor_epoch;
  b.batch_cursor_[1] = h->batch_cursor_window;
  b.batch_cursor_[2] = h->batch_cursor_row;
  b.epoch_first_step_ = h->epoch_first_step;
  b.epoch_steps_ = h->epoch_steps;
  absl::StatusOr<std::vector<SlotTensor>> tensors = r->Tensors(pos);
  if (!tensors.ok()) return tensors.status();
  for (SlotTensor& t : *tensors) {
    b.tensors_.push_back(Tensor{std::move(t.name), DType(t.dtype),
                                std::move(t.shape), t.data,
                                size_t(t.nbytes)});
  }
  return b;
}

absl::Status Loader::Reopen(double deadline_seconds) {
  Impl& m = *impl_;
  v1::OpenStreamResponse resp;
  absl::StatusOr<std::unique_ptr<RingReader>> reader =
      OpenRing(m.options, &m.next, deadline_seconds, &resp, &m.ring_owner);
  if (!reader.ok()) return reader.status();
  m.SetReader(std::move(*reader));
  info_.segment = resp.segment();
  info_.server_pid = resp.server_pid();
  info_.start_step = resp.start_step();
  info_.slots = resp.slots();
  info_.slot_bytes = resp.slot_bytes();
  return absl::OkStatus();
}

absl::Status Loader::Reconnect(const absl::Status& why) {
  Impl& m = *impl_;
  const LoaderOptions& o = options_;
  const uint64_t start = MonotonicNanos();
  fprintf(stderr,
          "batchd: stream %s rank %d: %s; reopening it at step %llu on the "
          "daemon at %s (for up to %.0f s)\n",
          o.stream.c_str(), o.rank, std::string(why.message()).c_str(),
          static_cast<unsigned long long>(m.next.step), o.server.c_str(),
          o.reconnect_seconds);
  if (m.ring_owner >= 0) {
    // Whoever answers at the address must hand out a ring of this uid:
    // over TCP it is the only proof that the daemon is the one before.
    fprintf(stderr,
            "batchd: stream %s rank %d: only a ring of uid %lld (the first "
            "daemon's) is accepted from the daemon at %s\n",
            o.stream.c_str(), o.rank, static_cast<long long>(m.ring_owner),
            o.server.c_str());
  }
  absl::Status last = why;
  uint32_t tries = 0;
  // Since the daemon last answered that it prepares the stream (a new
  // daemon whose cache is gone indexes it again), or the first try.
  uint64_t window = start;
  PreparingWatch preparing(o);
  for (double backoff = 0.05;;
       backoff = NextBackoff(backoff, Seconds(MonotonicNanos() - window))) {
    const double left =
        o.reconnect_seconds - Seconds(MonotonicNanos() - window);
    if (left <= 0) break;
    if (m.Interrupted()) return absl::AbortedError("interrupted");
    ++tries;
    last = Reopen(std::min(left, 2.0));
    if (PreparingOf(last).has_value()) {
      if (absl::Status s = preparing.Update(last); !s.ok()) return s;
      window = MonotonicNanos();
      backoff = 0.05;
      continue;
    }
    if (last.ok()) {
      const uint64_t took = MonotonicNanos() - start;
      ++m.reconnects;
      m.reconnect_ns += took;
      fprintf(stderr,
              "batchd: stream %s rank %d reopened at step %llu on batchd "
              "(pid %u) after %.2f s\n",
              o.stream.c_str(), o.rank,
              static_cast<unsigned long long>(m.next.step), info_.server_pid,
              Seconds(took));
      return absl::OkStatus();
    }
    if (!MayReconnect(last)) return last;
    // Sleep in short pieces, so that an interrupt is seen.
    for (double slept = 0; slept < backoff; slept += 0.05) {
      if (m.Interrupted()) return absl::AbortedError("interrupted");
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  return absl::UnavailableError(absl::StrFormat(
      "batchd at %s stopped (stream %s, rank %d: %s) and did not come back: "
      "reopening the stream at step %llu was tried %u times over %.0f s "
      "(reconnect_seconds); last: %s",
      o.server, o.stream, o.rank, why.message(),
      static_cast<unsigned long long>(m.next.step), tries,
      Seconds(MonotonicNanos() - start), last.message()));
}

LoaderState Loader::State() const {
  const Impl& m = *impl_;
  const LoaderOptions& o = options_;
  LoaderState st;
  st.workload = o.workload;
  st.data = o.data;
  st.split = o.split;
  st.global_batch_size = o.global_batch_size;
  st.seed = o.seed;
  st.options = o.options;
  st.world_size = uint32_t(o.world_size);
  st.next_step = m.next.step;
  st.has_cursor = m.cursor_resume && m.next.has_cursor;
  std::copy(m.next.cursor, m.next.cursor + 3, st.cursor);
  st.cursor_step = m.next.cursor_step;
  return st;
}

absl::Status Loader::LoadState(const LoaderState& state) {
  Impl& m = *impl_;
  if (getpid() != m.owner_pid) {
    return absl::FailedPreconditionError(
        "a forked child cannot load a state into its parent's Loader");
  }
  if (m.returned_any) {
    return absl::FailedPreconditionError(absl::StrCat(
        "load_state_dict() is for a Loader that has not returned a batch yet "
        "(stream ", options_.stream, " returned step ", m.next.step - 1,
        "); make a new Loader with the state instead"));
  }
  if (absl::Status s = CheckStateMatches(options_, state); !s.ok()) return s;
  Position before = m.next;
  m.next.step = state.next_step;
  m.next.has_cursor = state.has_cursor;
  std::copy(state.cursor, state.cursor + 3, m.next.cursor);
  m.next.cursor_step = state.cursor_step;
  absl::Status s = Reopen(options_.connect_timeout_seconds);
  if (!s.ok()) m.next = before;
  if (s.ok()) m.kept.reset();  // of the ring before (none: nothing returned)
  return s;
}

void Loader::SetInterruptCheck(std::function<bool()> check) {
  impl_->interrupt = std::move(check);
}

absl::Status Loader::RegisterPinned() {
  void* const address = mapped_address();
  absl::Status s = CudaHostRegister(address, mapped_bytes());
  if (s.ok()) impl_->pinned = address;
  return s;
}

absl::Status Loader::UnregisterPinned() {
  void* const address = impl_->pinned;
  if (address == nullptr) return absl::OkStatus();
  impl_->pinned = nullptr;
  return CudaHostUnregister(address);
}

void* Loader::mapped_address() const { return impl_->Reader()->base(); }
size_t Loader::mapped_bytes() const { return impl_->Reader()->size(); }

double Loader::wait_seconds() const {
  return double(impl_->Reader()->header()->client_wait_ns.load(
             std::memory_order_relaxed)) /
         1e9;
}

uint32_t Loader::reconnects() const { return impl_->reconnects; }
double Loader::reconnect_seconds() const {
  return Seconds(impl_->reconnect_ns);
}

}  // namespace batchd

// Streams being prepared; see stream_preparations.h.
#include "server/stream_preparations.h"

#include <algorithm>
#include <utility>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "base/clock.h"
#include "base/log.h"
#include "base/threads.h"
#include "client/preparing.h"
#include "server/stream_factory.h"

namespace batchd {
namespace {

// A call is answered this long before its deadline at most (a quarter of
// what it has left when that is less), so that the answer reaches its
// client in time on a loaded machine.
constexpr uint64_t kAnswerMarginNs = 3'000'000'000;
// How often a waiting call looks at its caller, and a finished preparation
// at whether it is still wanted.
constexpr uint64_t kCheckNs = 50'000'000;
// A preparation's stack: SentencePiece's trie builder recurses once per
// byte of a piece, as on the pool's threads (base/executor.h).
constexpr size_t kStackBytes = size_t(8) << 20;
// Callers a preparation remembers, for the log's joins.
constexpr size_t kMaxCallers = 64;

std::string Seconds(uint64_t ns) {
  return absl::StrFormat("%.1f", double(ns) / 1e9);
}

}  // namespace

class StreamPreparations::Preparation {
 public:
  enum class State { kQueued, kRunning, kDone };

  // Whether anyone still wants the preparation: a call waits for it, or
  // one was answered less than the grace ago. Shared with the
  // cancellation's `gone`, which a workload may keep longer than the
  // preparation lives (WMT keeps its request's).
  struct Want {
    std::atomic<int> waiters{0};
    std::atomic<uint64_t> until_ns{0};  // MonotonicNanos

    bool Wanted() const {
      return waiters.load(std::memory_order_acquire) > 0 ||
             MonotonicNanos() < until_ns.load(std::memory_order_acquire);
    }
    void ExtendBy(uint64_t ns) {
      const uint64_t until = MonotonicNanos() + ns;
      uint64_t now_until = until_ns.load(std::memory_order_relaxed);
      while (now_until < until &&
             !until_ns.compare_exchange_weak(now_until, until,
                                             std::memory_order_release)) {
      }
    }
  };

  Preparation(const StreamKey& key, const v1::StreamSpec& spec,
              const ReadAccess& access, uint64_t grace_ns)
      : key(key),
        spec(spec),
        access(access),
        started_ns(MonotonicNanos()),
        want(std::make_shared<Want>()),
        cancel(std::make_shared<Cancellation>(
            [want = want] { return !want->Wanted(); }, /*deadline_ns=*/0)),
        progress(std::make_shared<WorkProgress>()) {
    want->ExtendBy(grace_ns);
  }

  // "stream 'x' of uid 1000" for the log.
  LogFields Fields() const {
    return {{"stream", key.second}, {"owner", DescribeOwner(key.first)}};
  }

  // Constant after construction.
  const StreamKey key;
  const v1::StreamSpec spec;
  const ReadAccess access;
  const uint64_t started_ns;
  const std::shared_ptr<Want> want;
  // Its work's: cancelled once nobody wants it (or the daemon stops);
  // finished once a stream was made with it.
  const std::shared_ptr<Cancellation> cancel;
  const std::shared_ptr<WorkProgress> progress;

  absl::Mutex mu;
  absl::CondVar changed;  // done, or taken
  State state ABSL_GUARDED_BY(mu) = State::kQueued;
  absl::StatusOr<std::shared_ptr<StreamSetup>> result ABSL_GUARDED_BY(mu) =
      absl::UnavailableError("not prepared yet");
  // A call took the stream (or was given the error): it may be forgotten.
  bool taken ABSL_GUARDED_BY(mu) = false;
  // A call was answered "still preparing" (logged once).
  bool answered ABSL_GUARDED_BY(mu) = false;
  // The pids of the processes that asked for it (for the log's joins).
  std::vector<uint32_t> callers ABSL_GUARDED_BY(mu);
};

StreamPreparations::Ticket& StreamPreparations::Ticket::operator=(
    Ticket&& other) noexcept {
  if (this != &other) {
    Taken(false);
    from_ = std::move(other.from_);
    setup_ = std::move(other.setup_);
  }
  return *this;
}

void StreamPreparations::Ticket::Taken(bool kept) {
  setup_.reset();
  if (from_ == nullptr) return;
  const std::shared_ptr<Preparation> p = std::move(from_);
  from_ = nullptr;
  // Before the call stops waiting: the preparation is wanted until then,
  // so that its cancellation cannot be cancelled in between.
  if (kept) p->cancel->Finish();
  {
    absl::MutexLock lock(&p->mu);
    p->taken = true;
    p->changed.SignalAll();
  }
  p->want->waiters.fetch_sub(1, std::memory_order_acq_rel);
}

StreamPreparations::StreamPreparations(const Options& options,
                                       PrepareTurns& turns, ExistsFn exists,
                                       MakeFn make)
    : options_(options),
      turns_(turns),
      exists_(std::move(exists)),
      make_(std::move(make)) {
  // A turn given back (a preparation's, or a Plan's) may let the owner's
  // next queued preparation start.
  turns_.SetOnGiven([this](uint64_t owner) {
    Admitted admitted;
    {
      absl::MutexLock lock(&mu_);
      admitted = Admit(owner);
    }
    Start(std::move(admitted));
  });
}

StreamPreparations::~StreamPreparations() {
  Stop(0);
  turns_.SetOnGiven(nullptr);
}

absl::StatusOr<StreamPreparations::Ticket> StreamPreparations::Await(
    const StreamKey& key, const v1::StreamSpec& spec, const ReadAccess& access,
    const Caller& caller, const Cancellation& call) {
  std::shared_ptr<Preparation> p;
  bool started = false, joined = false, exists = false;
  absl::Status refused;
  Admitted admitted;  // started below, whatever this call's answer
  {
    absl::MutexLock lock(&mu_);
    // The owner's queued preparations nobody wants any more leave first.
    admitted = Admit(key.first);
    if (stopping_.load()) {
      refused =
          absl::UnavailableError("batchd is stopping: it prepares no stream");
    } else if (exists_(key)) {
      exists = true;  // made meanwhile: join it
    } else if (auto it = preparations_.find(key); it != preparations_.end()) {
      std::string detail;
      if (FirstDifference(it->second->spec, spec, /*compare_start_step=*/true,
                          &detail)
              .empty()) {
        p = it->second;
      } else {
        refused = absl::FailedPreconditionError(
            absl::StrCat("stream '", spec.name(),
                         "' is being prepared with another spec: ", detail));
      }
    } else if (CountOf(key.first) >= kMaxPerOwner) {
      refused = absl::ResourceExhaustedError(absl::StrCat(
          DescribeOwner(key.first), " has ", kMaxPerOwner,
          " streams being prepared, the limit; open this one once some of "
          "them are ready"));
    } else {
      p = std::make_shared<Preparation>(key, spec, access, options_.grace_ns);
      preparations_.emplace(key, p);
      queued_[key.first].push_back(p);
      started = true;
    }
    if (p != nullptr) {
      p->want->waiters.fetch_add(1, std::memory_order_acq_rel);
      absl::MutexLock plock(&p->mu);
      std::vector<uint32_t>& callers = p->callers;
      if (std::find(callers.begin(), callers.end(), caller.pid) ==
              callers.end() &&
          callers.size() < kMaxCallers) {
        callers.push_back(caller.pid);
        joined = !started;
      }
    }
    if (started) {
      Admitted more = Admit(key.first);
      for (auto& a : more) admitted.push_back(std::move(a));
    }
  }
  Start(std::move(admitted));
  if (!refused.ok()) return refused;
  if (exists) return Ticket();
  if (started || joined) {
    LogFields fields = p->Fields();
    fields.push_back({"caller", caller.Describe()});
    if (started) {
      fields.push_back({"workload", spec.workload()});
      fields.push_back({"data", spec.data()});
      fields.push_back({"split", spec.split()});
    }
    Log(LogLevel::kInfo, started ? "prepare_started" : "prepare_joined",
        fields);
  }
  return Wait(p, call);
}

absl::StatusOr<StreamPreparations::Ticket> StreamPreparations::Wait(
    const std::shared_ptr<Preparation>& p, const Cancellation& call) {
  const uint64_t start = MonotonicNanos();
  const uint64_t deadline = call.deadline_ns();
  uint64_t answer_at = UINT64_MAX;  // no deadline: waits for the stream
  if (deadline != 0) {
    const uint64_t left = deadline > start ? deadline - start : 0;
    const uint64_t margin = std::min(kAnswerMarginNs, left / 4);
    answer_at = start + std::min(options_.answer_ns, left - margin);
  }
  enum class Why { kDone, kAnswer, kGone } why;
  absl::Status failed;
  bool first_answer = false;
  {
    absl::MutexLock lock(&p->mu);
    for (;;) {
      if (p->state == Preparation::State::kDone) {
        why = Why::kDone;
        break;
      }
      const uint64_t now = MonotonicNanos();
      if (call.cancelled()) {
        // Its deadline (gRPC cancels the call then too) is not its caller
        // going: that caller may ask again.
        why = deadline != 0 && now + kAnswerMarginNs / 10 >= deadline
                  ? Why::kAnswer
                  : Why::kGone;
        break;
      }
      if (now >= answer_at) {
        why = Why::kAnswer;
        break;
      }
      p->changed.WaitWithTimeout(
          &p->mu, absl::Nanoseconds(std::min(kCheckNs, answer_at - now)));
    }
    if (why == Why::kDone) {
      if (p->result.ok()) {
        // Still waiting, as far as the preparation knows, until Taken.
        Ticket ticket;
        ticket.from_ = p;
        ticket.setup_ = *p->result;
        return ticket;
      }
      failed = p->result.status();
      p->taken = true;  // its error was given out
      p->changed.SignalAll();
    } else if (why == Why::kAnswer && !p->answered) {
      p->answered = first_answer = true;
    }
  }
  // Wanted for the grace from now on, before the call stops waiting.
  if (why == Why::kAnswer) p->want->ExtendBy(options_.grace_ns);
  p->want->waiters.fetch_sub(1, std::memory_order_acq_rel);
  if (why == Why::kDone) return failed;
  if (why == Why::kGone) return call.status();
  if (first_answer) {
    LogFields fields = p->Fields();
    fields.push_back(
        {"msg", absl::StrCat("answered 'still preparing'; it goes on while "
                             "its callers ask again within ",
                             Seconds(options_.grace_ns), " s")});
    Log(LogLevel::kInfo, "prepare_slow", fields);
  }
  return StillPreparing(*p);
}

v1::Preparing StreamPreparations::Describe(Preparation& p) const {
  v1::Preparing out;
  out.set_stream(p.spec.name());
  out.set_owner_uid(p.key.first);
  bool queued;
  {
    absl::MutexLock lock(&p.mu);
    queued = p.state == Preparation::State::kQueued;
  }
  if (queued) {
    // Its progress is that of the owner's streams ahead of it.
    uint64_t steps = 0, running = 0;
    for (auto it = preparations_.lower_bound(StreamKey{p.key.first, ""});
         it != preparations_.end() && it->first.first == p.key.first; ++it) {
      Preparation& other = *it->second;
      absl::MutexLock olock(&other.mu);
      if (other.state == Preparation::State::kRunning) {
        steps += other.progress->Get().steps;
        ++running;
      }
    }
    out.set_queued(true);
    out.set_what(absl::StrCat("waiting for a turn (",
                              DescribeOwner(p.key.first), " has ", running,
                              " other streams being prepared)"));
    out.set_steps(steps);
  } else {
    const WorkProgress::Snapshot s = p.progress->Get();
    out.set_what(!s.what.empty()
                     ? s.what
                     : absl::StrCat("opening ", p.spec.workload(), " data '",
                                    p.spec.data(), "' split '", p.spec.split(),
                                    "'"));
    out.set_unit(s.unit);
    out.set_done(s.done);
    out.set_total(s.total);
    out.set_steps(s.steps);
  }
  out.set_seconds(double(MonotonicNanos() - p.started_ns) / 1e9);
  out.set_grace_seconds(double(options_.grace_ns) / 1e9);
  return out;
}

std::vector<v1::Preparing> StreamPreparations::List() const {
  std::vector<v1::Preparing> out;
  absl::MutexLock lock(&mu_);
  for (const auto& [key, p] : preparations_) {
    out.push_back(Describe(*p));
  }
  return out;
}

absl::Status StreamPreparations::StillPreparing(Preparation& p) {
  v1::Preparing out;
  {
    absl::MutexLock lock(&mu_);
    out = Describe(p);
  }
  absl::Status status = absl::UnavailableError(
      absl::StrCat("stream '", p.spec.name(), "' is being prepared (",
                   DescribePreparing(out), "); an OpenStream of it within ",
                   Seconds(options_.grace_ns), " s waits for it"));
  status.SetPayload(kPreparingPayload, absl::Cord(out.SerializeAsString()));
  return status;
}

StreamPreparations::Admitted StreamPreparations::Admit(uint64_t owner) {
  Admitted admitted;
  auto q = queued_.find(uint32_t(owner));
  if (q == queued_.end()) return admitted;
  while (!q->second.empty()) {
    const std::shared_ptr<Preparation> p = q->second.front();
    if (stopping_.load() || !p->want->Wanted()) {
      // Nobody waits for it any more: it never starts.
      q->second.pop_front();
      const absl::Status why = absl::UnavailableError(absl::StrCat(
          "the preparation of stream '", p->key.second,
          "' was dropped before it began: nobody asked for it within ",
          Seconds(options_.grace_ns), " s; open it again"));
      {
        absl::MutexLock lock(&p->mu);
        p->state = Preparation::State::kDone;
        p->result = why;
        p->taken = true;
        p->changed.SignalAll();
      }
      p->cancel->Cancel(why);
      Forget(*p);
      LogFields fields = p->Fields();
      fields.push_back(
          {"why", "nobody asked for it while it waited for a turn"});
      Log(LogLevel::kInfo, "prepare_dropped", fields);
      continue;
    }
    PrepareTurns::Turn turn = turns_.TryTake(owner);
    if (!turn.held()) break;  // the next turn given back calls Admit again
    q->second.pop_front();
    {
      absl::MutexLock lock(&p->mu);
      p->state = Preparation::State::kRunning;
    }
    admitted.emplace_back(
        p, std::make_shared<PrepareTurns::Turn>(std::move(turn)));
    ++threads_;
  }
  if (q->second.empty()) queued_.erase(q);
  return admitted;
}

void StreamPreparations::Start(Admitted admitted) {
  for (auto& [p, turn] : admitted) {
    absl::StatusOr<Thread> thread = StartThread(
        absl::StrCat("the preparation thread of stream '", p->key.second,
                     "' of ", DescribeOwner(p->key.first)),
        "", [this, p = p, turn = turn] { Run(p, turn); }, kStackBytes);
    if (thread.ok()) {
      thread->Detach();
      continue;
    }
    // Its callers get the error; the turn goes back (outside the lock: it
    // admits the owner's next).
    {
      absl::MutexLock lock(&p->mu);
      p->state = Preparation::State::kDone;
      p->result = thread.status();
      p->changed.SignalAll();
    }
    {
      absl::MutexLock lock(&mu_);
      Forget(*p);
      --threads_;
      threads_done_.SignalAll();
    }
    *turn = PrepareTurns::Turn();
  }
}

void StreamPreparations::Run(const std::shared_ptr<Preparation>& p,
                             std::shared_ptr<PrepareTurns::Turn> turn) {
  absl::StatusOr<std::shared_ptr<StreamSetup>> made;
  {
    WorkScope work(WorkContext{p->key.first, p->cancel, p->progress});
    made = make_(p->spec, p->access);
  }
  // Given back now (the owner's next may start), not when this thread ends.
  *turn = PrepareTurns::Turn();
  const uint64_t took = MonotonicNanos() - p->started_ns;
  {
    LogFields fields = p->Fields();
    fields.push_back({"seconds", Seconds(took)});
    if (made.ok()) {
      Log(LogLevel::kInfo, "prepare_done", fields);
    } else if (p->cancel->cancelled()) {
      fields.push_back({"why", std::string(p->cancel->status().message())});
      Log(LogLevel::kInfo, "prepare_stopped", fields);
    } else {
      fields.push_back({"error", std::string(made.status().message())});
      Log(LogLevel::kInfo, "prepare_failed", fields);
    }
  }
  bool taken;
  {
    absl::MutexLock lock(&p->mu);
    p->result = made;
    p->state = Preparation::State::kDone;
    p->changed.SignalAll();
    // Kept for a call to take while anyone wants it.
    while (!p->taken && !stopping_.load() && p->want->Wanted()) {
      p->changed.WaitWithTimeout(&p->mu, absl::Nanoseconds(kCheckNs));
    }
    taken = p->taken;
    if (!taken) {
      // A call that finds it now asks again, and starts another.
      p->result = absl::UnavailableError(
          absl::StrCat("the preparation of stream '", p->key.second,
                       "' ended unclaimed (nobody asked for it within ",
                       Seconds(options_.grace_ns), " s); open it again"));
    }
  }
  {
    absl::MutexLock lock(&mu_);
    Forget(*p);
  }
  if (!taken && made.ok()) {
    // Not a stream: what it started (a pass) stops, what it stored stays.
    p->cancel->Cancel(absl::CancelledError(
        absl::StrCat("nobody took stream '", p->key.second, "' within ",
                     Seconds(options_.grace_ns), " s")));
    LogFields fields = p->Fields();
    fields.push_back({"why", "done, but nobody asked for it within the grace"});
    Log(LogLevel::kInfo, "prepare_dropped", fields);
  }
  made = absl::UnavailableError("dropped");  // the setup goes here
  absl::MutexLock lock(&mu_);
  --threads_;
  threads_done_.SignalAll();
}

void StreamPreparations::Forget(const Preparation& p) {
  auto it = preparations_.find(p.key);
  if (it != preparations_.end() && it->second.get() == &p) {
    preparations_.erase(it);
  }
}

size_t StreamPreparations::CountOf(uint32_t owner) const {
  size_t n = 0;
  for (auto it = preparations_.lower_bound(StreamKey{owner, ""});
       it != preparations_.end() && it->first.first == owner; ++it) {
    ++n;
  }
  return n;
}

int StreamPreparations::Stop(uint64_t deadline_ns) {
  std::vector<std::shared_ptr<Preparation>> all;
  {
    absl::MutexLock lock(&mu_);
    stopping_.store(true);
    for (const auto& [key, p] : preparations_) all.push_back(p);
    for (auto& [owner, queue] : queued_) {
      for (const std::shared_ptr<Preparation>& p : queue) {
        absl::MutexLock plock(&p->mu);
        p->state = Preparation::State::kDone;
        p->result = absl::UnavailableError(
            "batchd is stopping: the stream was not prepared");
        p->taken = true;
        p->changed.SignalAll();
      }
      for (const std::shared_ptr<Preparation>& p : queue) Forget(*p);
    }
    queued_.clear();
  }
  for (const std::shared_ptr<Preparation>& p : all) {
    bool taken;
    {
      absl::MutexLock lock(&p->mu);
      taken = p->taken;
      p->changed.SignalAll();
    }
    // One a stream was made with is the stream's: the registry stops it.
    if (!taken) {
      p->cancel->Cancel(absl::UnavailableError("batchd is stopping"));
    }
  }
  absl::MutexLock lock(&mu_);
  while (threads_ > 0) {
    const uint64_t now = MonotonicNanos();
    if (deadline_ns != 0 && now >= deadline_ns) break;
    threads_done_.WaitWithTimeout(&mu_, absl::Nanoseconds(kCheckNs));
  }
  return threads_;
}

size_t StreamPreparations::size() const {
  absl::MutexLock lock(&mu_);
  return preparations_.size();
}

}  // namespace batchd

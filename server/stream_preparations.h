// Streams being prepared. The first OpenStream of a stream that does not
// exist yet starts its preparation (its data listed and indexed, its model
// loaded: StreamFactory::Make) on a thread of its own, where it outlives
// the call. The call waits for it until it is done, or answers, shortly
// before its deadline and at least every answer_ns, that the stream is
// still being prepared: UNAVAILABLE with a v1::Preparing payload
// (client/preparing.h) saying what is being done and how far it got.
// Another OpenStream of the same stream (its owner, name and spec) joins
// the preparation in progress, whether its caller asks again or is another
// rank of the job; one with another spec is refused, as the stream would
// refuse it.
//
// A preparation is wanted while a call waits for it, and for `grace_ns`
// after each "still preparing" answer (or a call's deadline passing), so
// that its caller can ask again. A caller that goes (killed, Ctrl-C) stops
// waiting at once. Once nobody wants it, its cancellation
// (base/work_context.h) stops its work within a check of its loops; what
// it finished is kept (the caches). A finished preparation waits, while
// wanted, for a call to take its stream into the registry (Ticket::Taken);
// only then is it forgotten, so that a rank asking at that moment finds
// either the preparation or the stream, never neither.
//
// Each owner prepares at most its PrepareTurns' worth of streams at once;
// the others wait in its queue without a thread, and leave it when nobody
// wants them any more. An owner has at most kMaxPerOwner preparations
// (queued, running, or done and not yet taken).
//
// A thread of its own, not the indexing pool's: a preparation is the
// caller of its loops (base/executor.h), which holds its thread for as
// long as it runs, so on the pool one owner's long preparations would hold
// every thread of a small pool and another owner's stream would wait for
// them. Their loops' helpers run on the pool, where owners take turns.
//
// Thread safety: thread-safe. Lock order: mu_, then a preparation's mu,
// then what `exists` and `make` take (the registry's lock, the turns').
// No Turn is given back under mu_ (giving one back calls Admit).
#ifndef BATCHD_SERVER_STREAM_PREPARATIONS_H_
#define BATCHD_SERVER_STREAM_PREPARATIONS_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "base/work_context.h"
#include "batchd/v1/batchd.pb.h"
#include "server/access.h"
#include "server/caller.h"
#include "server/prepare_turns.h"
#include "storage/read_access.h"

namespace batchd {

struct StreamSetup;  // server/engine.h

class StreamPreparations {
 public:
  // Preparations one owner may have at once.
  static constexpr size_t kMaxPerOwner = 64;

  // Makes the stream of a checked spec, reading its data with `access`,
  // under the calling thread's work context (StreamFactory::Make).
  using MakeFn = std::function<absl::StatusOr<std::shared_ptr<StreamSetup>>(
      const v1::StreamSpec& spec, const ReadAccess& access)>;
  // Whether the stream `key` exists (in the registry) now.
  using ExistsFn = std::function<bool(const StreamKey& key)>;

  struct Options {
    // How long a preparation waits for its caller to ask again after a
    // "still preparing" answer. Default: 5 s.
    uint64_t grace_ns = 5'000'000'000;
    // A call with a deadline is answered after this long at most, so that
    // its client sees the progress. Default: 10 s.
    uint64_t answer_ns = 10'000'000'000;
  };

  class Preparation;

  // One call's hold on a finished preparation's stream, until the
  // registry has taken it (Taken; the destructor calls Taken(false)).
  // Move-only.
  class Ticket {
   public:
    Ticket() = default;
    Ticket(Ticket&&) noexcept = default;
    Ticket& operator=(Ticket&& other) noexcept;
    Ticket(const Ticket&) = delete;
    Ticket& operator=(const Ticket&) = delete;
    ~Ticket() { Taken(false); }

    // The stream's setup; null: the stream exists now (made by another
    // call meanwhile): join it.
    const std::shared_ptr<StreamSetup>& setup() const { return setup_; }
    // The registry has opened a rank from setup() or refused it; `kept`:
    // the stream was made with it, and its work (a pass it started) is
    // the stream's now (its cancellation is finished, not cancelled). The
    // preparation is forgotten. Idempotent.
    void Taken(bool kept);

   private:
    friend class StreamPreparations;
    std::shared_ptr<Preparation> from_;
    std::shared_ptr<StreamSetup> setup_;
  };

  // `turns` must outlive this; `exists` and `make` are called without
  // the lock of any preparation but with mu_ (exists) or on the
  // preparation's thread (make).
  StreamPreparations(const Options& options, PrepareTurns& turns,
                     ExistsFn exists, MakeFn make);
  ~StreamPreparations();  // Stop(0)
  StreamPreparations(const StreamPreparations&) = delete;
  StreamPreparations& operator=(const StreamPreparations&) = delete;

  // The stream `key` (owner and name) of `spec` (checked), for `caller`
  // whose data rights are `access`: joins its preparation, or starts one,
  // and waits while `call` is not cancelled. Returns
  //  - a Ticket: the preparation's stream, or (setup null) the stream
  //    exists now;
  //  - the preparation's error;
  //  - UNAVAILABLE with a v1::Preparing payload (kPreparingPayload) once
  //    the call must be answered: after answer_ns, or a little before its
  //    deadline (a call without a deadline waits for the stream);
  //  - FAILED_PRECONDITION when `key` is being prepared with another spec;
  //    RESOURCE_EXHAUSTED past kMaxPerOwner; UNAVAILABLE once stopping;
  //  - CANCELLED when `call` was cancelled (its caller gone).
  absl::StatusOr<Ticket> Await(const StreamKey& key, const v1::StreamSpec& spec,
                               const ReadAccess& access, const Caller& caller,
                               const Cancellation& call);

  // Cancels every preparation, refuses new ones and waits until
  // deadline_ns (MonotonicNanos; 0: without bound) for their threads.
  // Returns the threads still running then: they use this object, which
  // must then never be destroyed. Idempotent.
  int Stop(uint64_t deadline_ns);

  // Preparations now: queued, running, or done and not yet taken.
  size_t size() const;
  // What each preparation in progress is doing (GetStatus), in key order.
  std::vector<v1::Preparing> List() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  using Admitted = std::vector<std::pair<std::shared_ptr<Preparation>,
                                         std::shared_ptr<PrepareTurns::Turn>>>;

  // The owner's queued preparations that may start now, each with its
  // turn; the unwanted ones leave the queue, cancelled.
  Admitted Admit(uint64_t owner) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Starts each on a thread of its own (without the lock).
  void Start(Admitted admitted) ABSL_LOCKS_EXCLUDED(mu_);
  // A preparation's thread: makes the stream, keeps it while it is wanted
  // and not taken, then forgets it.
  void Run(const std::shared_ptr<Preparation>& p,
           std::shared_ptr<PrepareTurns::Turn> turn);
  // Waits for `p` on behalf of one call (see Await).
  absl::StatusOr<Ticket> Wait(const std::shared_ptr<Preparation>& p,
                              const Cancellation& call);
  // The "still preparing" answer of `p` now.
  absl::Status StillPreparing(Preparation& p) ABSL_LOCKS_EXCLUDED(mu_);
  // What `p` is doing now (its answer's v1::Preparing).
  v1::Preparing Describe(Preparation& p) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Forgets `p` if the table still holds it.
  void Forget(const Preparation& p) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  size_t CountOf(uint32_t owner) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Options options_;
  PrepareTurns& turns_;
  const ExistsFn exists_;
  const MakeFn make_;
  // Read by preparations' threads without mu_ (the lock order).
  std::atomic<bool> stopping_{false};

  mutable absl::Mutex mu_;
  absl::CondVar threads_done_;  // threads_ dropped
  std::map<StreamKey, std::shared_ptr<Preparation>> preparations_
      ABSL_GUARDED_BY(mu_);
  // Per owner, those waiting for a turn, in the order they came.
  std::map<uint32_t, std::deque<std::shared_ptr<Preparation>>> queued_
      ABSL_GUARDED_BY(mu_);
  int threads_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace batchd

#endif  // BATCHD_SERVER_STREAM_PREPARATIONS_H_

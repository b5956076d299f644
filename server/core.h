// The server's core: streams, their ranks' rings, and the status figures.
// It knows nothing of gRPC: it takes the protocol's request messages
// (batchd/v1/batchd.proto) with the caller the kernel names, and returns
// the response messages and absl::Status; grpc_service.cc only passes them
// through. Core composes one part per job, each given the one
// CoreOptions (core_options.h), and is the ControlPlane (control_plane.h)
// that the gRPC service and the metrics endpoint take:
//
//   caller.h           who a caller is (the kernel's word)
//   access.h           who may do what to whose stream
//   ring_budget.h      the limits and quotas a stream and its rings fit
//   stream_factory.h   specs checked and made into streams
//   stream_registry.h  the streams and their ranks' seats; OpenStream's steps
//   stream_preparations.h  streams being made, joined by their callers
//   prepare_turns.h    how many streams one owner makes at once
//   heartbeat.h        the server's heartbeat in every ring
//   supervisor.h       reaping dead clients, idle streams, progress logs
//   status.h           GetStatus
//
// Thread safety: every public method is thread-safe.
#ifndef BATCHD_SERVER_CORE_H_
#define BATCHD_SERVER_CORE_H_

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "base/executor.h"
#include "batchd/v1/batchd.pb.h"
#include "server/access.h"
#include "server/caller.h"
#include "server/control_plane.h"
#include "server/core_options.h"
#include "server/engine.h"
#include "server/heartbeat.h"
#include "server/prepare_turns.h"
#include "server/ring_budget.h"
#include "server/status.h"
#include "server/stream_factory.h"
#include "server/stream_preparations.h"
#include "server/stream_registry.h"
#include "server/supervisor.h"
#include "workloads/shared_work.h"

namespace batchd {

// Authorization: a stream belongs to the uid that opened it (TCP callers,
// who have no kernel identity, share the owner kAnonymousUid), and streams
// are keyed by (owner, name): two uids' streams of one name are two
// streams with their own rings. A caller opens, joins and closes its own
// streams by name; administrators (root, the daemon's uid, members of
// admin_gid; TCP callers only with anonymous_admin) may join or close
// another uid's stream by naming its owner, and may drain and shut the
// daemon down. A rank held by a live process is only ever given to that
// same process again. Each owner's streams, ring bytes and model bytes are
// held to the quotas per uid unless the owner is an administrator.
class Core : public ControlPlane {
 public:
  static absl::StatusOr<std::unique_ptr<Core>> Create(
      const CoreOptions& options);
  // Stops the workers and unlinks every segment.
  ~Core();

  // The rank req.rank() of req.spec(), for `caller`. req.owner_uid()
  // unset: the caller's own stream named spec.name (created when missing);
  // set to another uid: that uid's existing stream, for administrators
  // only (PermissionDenied naming the owner otherwise). req.resume() set:
  // this rank begins there instead of at the spec's start_step. A client
  // of another protocol is refused first. req.client_pid() is never read:
  // anyone could name another job's pid. A stream that does not exist yet
  // is prepared as its owner's work, beyond this call
  // (server/stream_preparations.h): this call waits for it while `cancel`
  // is not cancelled, and answers UNAVAILABLE with a v1::Preparing payload
  // (client/preparing.h) before its deadline when it is not ready; an
  // OpenStream of the same stream joins it. A call that fails cancels
  // `cancel`, so that what it started itself stops too.
  absl::StatusOr<v1::OpenStreamResponse> OpenStream(
      const v1::OpenStreamRequest& req, const Caller& caller,
      const std::shared_ptr<Cancellation>& cancel) override;
  // The same, never cancelled by its caller (tests, in-process callers).
  absl::StatusOr<v1::OpenStreamResponse> OpenStream(
      const v1::OpenStreamRequest& req, const Caller& caller) {
    return OpenStream(req, caller, std::make_shared<Cancellation>());
  }
  // Closes the caller's own stream req.name(), or with req.owner_uid()
  // that uid's (another uid's for administrators only: PermissionDenied
  // otherwise).
  absl::Status CloseStream(const v1::CloseStreamRequest& req,
                           const Caller& caller) override;
  // OK when `caller` may drain or shut down the daemon; PermissionDenied
  // naming `what` otherwise.
  absl::Status CheckAdmin(const Caller& caller,
                          const std::string& what) const override;
  bool IsAdmin(const Caller& caller) const;
  // What req.spec() would need, without creating anything; the work is
  // the caller's, and stops once `cancel` is cancelled.
  absl::StatusOr<v1::PlanResponse> Plan(
      const v1::PlanRequest& req, const Caller& caller,
      const std::shared_ptr<Cancellation>& cancel) const override;
  // The same, never cancelled by its caller (tests, fuzzers).
  absl::StatusOr<v1::PlanResponse> Plan(const v1::PlanRequest& req,
                                        const Caller& caller) const {
    return Plan(req, caller, std::make_shared<Cancellation>());
  }
  // Refuses new streams from now on; `on_drained` (given to SetOnDrained)
  // runs once no rank is attached. Returns the ranks attached now.
  uint32_t Drain();
  // Drain, for administrators only.
  absl::StatusOr<v1::DrainResponse> Drain(const v1::DrainRequest& req,
                                          const Caller& caller) override;
  void SetOnDrained(std::function<void()> on_drained);
  // `readahead` (may be null) receives each stream's read-ahead figures in
  // the order of the response's streams (zeros for a stream not read
  // ahead), with those the protocol does not carry (oldest_read_seconds).
  v1::GetStatusResponse GetStatus(
      std::vector<ReadAheadStats>* readahead) const override;
  v1::GetStatusResponse GetStatus() const { return GetStatus(nullptr); }
  // Frees the rings of ranks whose clients let go or died, and forgets
  // streams idle for idle_stream_seconds; called ~10x/s by the supervisor
  // thread. Returns the segments freed.
  std::vector<std::string> ReapDeadClients();
  // The daemon exits: ends every ring with kStateExiting (clients reopen
  // their streams on the daemon that follows) and unlinks every segment.
  void CloseAll();

  const CoreOptions& options() const { return options_; }

 private:
  // The read-ahead and the engine (its workers start first, so that a
  // daemon that cannot start threads names --threads).
  explicit Core(const CoreOptions& options);
  // OpenStream's steps, under the stream owner's work context.
  absl::StatusOr<v1::OpenStreamResponse> OpenStreamSteps(
      const v1::OpenStreamRequest& req, const Caller& caller,
      const std::shared_ptr<Cancellation>& cancel);
  // The parts that use `executor`, then the heartbeat and supervisor
  // threads; the error when one of these could not be started.
  absl::Status Start(std::unique_ptr<Executor> executor);

  const CoreOptions options_;
  const uint64_t start_ns_;
  const Access access_;
  const RingBudget budget_;
  // Streams each owner makes at once (preparations, Plan).
  mutable PrepareTurns turns_;
  // What workloads borrow (their indexing and counting work, the models
  // and passes they share); before the streams, which use them until they
  // go. Set by Start.
  std::unique_ptr<Executor> executor_;
  std::unique_ptr<SharedWork> shared_work_;
  // Before engine_ and the streams: both use it until they go. The stop
  // releases (never destroys) either when threads of it are stuck.
  std::unique_ptr<ReadAhead> readahead_;
  // Before engine_ and the streams, whose fills it keeps.
  std::unique_ptr<FillShare> share_;
  std::unique_ptr<Engine> engine_;
  // Set by Start, in this order; each uses those above it.
  std::unique_ptr<StreamFactory> factory_;
  std::unique_ptr<Heartbeat> heartbeat_;
  std::unique_ptr<StreamRegistry> registry_;
  // Stopped first of all: its threads use the factory and the registry.
  std::unique_ptr<StreamPreparations> preparations_;
  std::unique_ptr<StatusReporter> status_;
  std::unique_ptr<Supervisor> supervisor_;
};

}  // namespace batchd

#endif  // BATCHD_SERVER_CORE_H_

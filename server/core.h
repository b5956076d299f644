// The server's core: streams, their ranks' rings, and the status figures.
// It knows nothing of gRPC: it takes the protocol's request messages
// (batchd/v1/batchd.proto) with the caller the kernel names, and returns
// the response messages and absl::Status; grpc_service.cc only passes them
// through. Core composes one part per job:
//
//   caller.h           who a caller is (the kernel's word)
//   access.h           who may do what to whose stream
//   ring_budget.h      the limits and quotas a stream and its rings fit
//   stream_factory.h   specs checked and made into streams
//   stream_registry.h  the streams and their ranks' seats; OpenStream's steps
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
#include "server/engine.h"
#include "server/heartbeat.h"
#include "server/ring_budget.h"
#include "server/status.h"
#include "server/stream_factory.h"
#include "server/stream_registry.h"
#include "server/supervisor.h"
#include "workloads/shared_work.h"

namespace batchd {

struct CoreOptions {
  // Data paths of specs are confined to this directory. Default: cwd.
  std::string data_root = ".";
  // The persistent cache handed to every workload (--cache-dir). Default:
  // none.
  std::shared_ptr<const CacheDir> cache;
  // Segment names are
  // /<shm_prefix>.<daemon uid>.<owner uid or tcp>.<stream>.<rank>.<random>.
  // Default: batchd.
  std::string shm_prefix = "batchd";
  // Worker threads. Default: the cores this process may use.
  int threads = 0;
  // Threads of the executor for indexing and counting work
  // (base/executor.h), in each of its two classes (serving, background);
  // whatever a stream's options ask, no workload starts more. 0: the cores
  // this process may use. At most Executor::kMaxThreads. Default: 0.
  int index_threads = 0;
  // Bytes of SentencePiece models loaded at once over all streams (a model
  // shared by streams counts once); a stream whose model would exceed it
  // is refused. Default: SharedWork::kDefaultMaxModelBytes (1 GiB).
  uint64_t max_model_bytes = uint64_t(1) << 30;
  // Group given read/write access to the rings (-1: owner only).
  gid_t shm_group = gid_t(-1);
  // Ring slots per rank when a spec says 0. Default: 4.
  uint32_t default_slots = 4;
  // A client in another pid namespace whose heartbeat is older than this is
  // taken as dead. Default: 10 s.
  double client_stale_seconds = 10.0;
  // A stream none of whose ranks is attached is forgotten after this long.
  // Default: 300 s.
  double idle_stream_seconds = 300.0;
  // Limits, so that one client cannot exhaust /dev/shm or the server.
  // Streams at once. Default: 64.
  uint32_t max_streams = 64;
  // Ring bytes of one stream (all its ranks on this node); 0: no limit.
  uint64_t max_stream_bytes = 0;
  // Ring bytes of all streams together; 0: no limit (/dev/shm's size is).
  // Default (kAutoRingBytes): half of /dev/shm's size when the core starts,
  // so that no client can fill the node's shared memory.
  uint64_t max_total_bytes = kAutoRingBytes;
  static constexpr uint64_t kAutoRingBytes = uint64_t(-1);
  // A ring that no client has mapped this long after OpenStream is freed,
  // so that a request naming a pid that never attaches cannot hold a slot
  // of --max-streams or block a drain; a stream none of whose rings was
  // ever mapped is forgotten with its last ring. Default: 60 s.
  double attach_timeout_seconds = 60.0;
  // Quotas per owner uid (anonymous TCP callers share one), so that no one
  // user's streams can starve another's. Streams of administrators (see
  // Core) are exempt; the limits above bind everyone.
  // Streams one uid may own at once; 0: no limit. Default: 16.
  uint32_t max_streams_per_uid = 16;
  // Ring bytes of one uid's streams; 0: no limit. Default
  // (kAutoRingBytes): a quarter of max_total_bytes (of /dev/shm's size
  // when that is 0), so that four users fit at their full quota.
  uint64_t max_ring_bytes_per_uid = kAutoRingBytes;
  // Resident bytes of one uid's workloads (Workload::resident_bytes(): its
  // models); 0: no limit. Default: 1 GiB.
  uint64_t max_model_bytes_per_uid = uint64_t(1) << 30;
  // Authorization (see Core): members of this group may drain, shut down,
  // and join or close another uid's stream by naming its owner, as root and
  // the daemon's own uid may (-1: none).
  gid_t admin_gid = gid_t(-1);
  // TCP callers (no kernel identity) are administrators: they may drain,
  // shut down, and join or close any uid's stream. Default: false.
  bool anonymous_admin = false;
  // A throughput line per stream in the log this often; 0: never.
  // Default: 60 s.
  double throughput_log_seconds = 60;
  // Bytes read ahead of decoding, over all streams (shared evenly between
  // streams, then ranks); 0 turns read-ahead off. Default: 256 MiB.
  uint64_t readahead_bytes = uint64_t(256) << 20;
  // I/O threads of the read-ahead (reads in flight at most). Default: 32.
  int readahead_threads = 32;
  // A batch that has waited this long for a read that has not returned
  // (a stalled mount) fails its rank, naming the file; 0: never.
  // Default: 60 s.
  double read_stall_seconds = 60;
  // How long the stop (the destructor) waits for workers and I/O threads
  // before it leaves those stuck in the kernel to end with the process.
  // Default: 3 s.
  double stop_wait_seconds = 3;
};

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
class Core {
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
  // anyone could name another job's pid.
  absl::StatusOr<v1::OpenStreamResponse> OpenStream(
      const v1::OpenStreamRequest& req, const Caller& caller);
  // Closes the caller's own stream req.name(), or with req.owner_uid()
  // that uid's (another uid's for administrators only: PermissionDenied
  // otherwise).
  absl::Status CloseStream(const v1::CloseStreamRequest& req,
                           const Caller& caller);
  // OK when `caller` may drain or shut down the daemon; PermissionDenied
  // naming `what` otherwise.
  absl::Status CheckAdmin(const Caller& caller, const std::string& what) const;
  bool IsAdmin(const Caller& caller) const;
  // What req.spec() would need, without creating anything.
  absl::StatusOr<v1::PlanResponse> Plan(const v1::PlanRequest& req) const;
  // Refuses new streams from now on; `on_drained` (given to SetOnDrained)
  // runs once no rank is attached. Returns the ranks attached now.
  uint32_t Drain();
  // Drain, for administrators only.
  absl::StatusOr<v1::DrainResponse> Drain(const v1::DrainRequest& req,
                                          const Caller& caller);
  void SetOnDrained(std::function<void()> on_drained);
  // `readahead` (may be null) receives each stream's read-ahead figures in
  // the order of the response's streams (zeros for a stream not read
  // ahead), with those the protocol does not carry (oldest_read_seconds).
  v1::GetStatusResponse GetStatus(
      std::vector<ReadAheadStats>* readahead = nullptr) const;
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
  // The parts that use `executor`, then the heartbeat and supervisor
  // threads; the error when one of these could not be started.
  absl::Status Start(std::unique_ptr<Executor> executor);

  const CoreOptions options_;
  const uint64_t start_ns_;
  const Access access_;
  const RingBudget budget_;
  // What workloads borrow (their indexing and counting work, the models
  // and passes they share); before the streams, which use them until they
  // go. Set by Start.
  std::unique_ptr<Executor> executor_;
  std::unique_ptr<SharedWork> shared_work_;
  // Before engine_ and the streams: both use it until they go. The stop
  // releases (never destroys) either when threads of it are stuck.
  std::unique_ptr<ReadAhead> readahead_;
  std::unique_ptr<Engine> engine_;
  // Set by Start, in this order; each uses those above it.
  std::unique_ptr<StreamFactory> factory_;
  std::unique_ptr<Heartbeat> heartbeat_;
  std::unique_ptr<StreamRegistry> registry_;
  std::unique_ptr<StatusReporter> status_;
  std::unique_ptr<Supervisor> supervisor_;
};

}  // namespace batchd

#endif  // BATCHD_SERVER_CORE_H_

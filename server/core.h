// The server's core: streams, their ranks' rings, and the status figures.
// It knows nothing of gRPC: it takes and returns plain structs and
// absl::Status; grpc_service.cc converts. core.cc holds the streams' life,
// core_spec.cc their specs, core_access.cc who may do what and the limits
// and quotas.
//
// Thread safety: every public method is thread-safe.
#ifndef BATCHD_SERVER_CORE_H_
#define BATCHD_SERVER_CORE_H_

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "base/executor.h"
#include "server/engine.h"
#include "workloads/shared_work.h"

namespace batchd {

struct StreamSpec {
  std::string name;
  std::string workload;
  std::string data;
  std::string split;
  uint64_t global_batch_size = 0;
  uint32_t world_size = 0;
  uint64_t seed = 0;
  uint64_t start_step = 0;
  uint32_t slots = 0;
  std::map<std::string, std::string> options;
  // Resume from a cursor (packed rows): a row of the batch of step
  // start_cursor_step (any rank's), or, without has_start_cursor_step, rank
  // 0's first row of batch start_step.
  bool has_start_cursor = false;
  RowCursor start_cursor;
  bool has_start_cursor_step = false;
  uint64_t start_cursor_step = 0;
};

// Where one rank's ring begins when it is reopened (a restarted daemon, a
// checkpoint loaded into an open Loader): its own next step and, for
// packed rows, a row of the batch of step cursor_step (<= step).
struct RankResume {
  uint64_t step = 0;
  bool has_cursor = false;
  RowCursor cursor;
  uint64_t cursor_step = 0;
};

// The first field in which `b` differs from `a` (start_step only when
// compare_start_step), or "" when none does. `detail` receives "x here but y
// in the existing stream".
std::string FirstDifference(const StreamSpec& a, const StreamSpec& b,
                            bool compare_start_step, std::string* detail);

// Who makes a request, as the kernel tells the daemon (SO_PEERCRED and
// SO_PEERGROUPS on the unix socket; /proc for the start time and the pid
// namespace), never as a request field says. TCP callers have no kernel
// identity: `known` is false and they are anonymous.
struct Caller {
  bool known = false;
  uint32_t pid = 0;  // in the daemon's pid namespace; 0: not visible from it
  uint32_t uid = uint32_t(-1);
  uint32_t gid = uint32_t(-1);
  std::vector<uint32_t> groups;  // supplementary groups
  uint64_t start_ticks = 0;      // /proc/<pid>/stat starttime
  uint64_t pid_ns = 0;           // inode of its pid namespace; 0: unknown

  // The same process: a pid the daemon can see, the same start time and
  // pid namespace. Two callers without a visible pid are never the same
  // (two containers' pid 1 are not one process).
  bool SameProcess(const Caller& other) const;
  // "pid 123 (uid 1000)" or "an anonymous TCP caller", for errors and logs.
  std::string Describe() const;
  // A local process of this machine as the kernel would describe it: its
  // uid and groups from /proc (tests, tools, in-process callers).
  static Caller Process(uint32_t pid);
};

struct OpenResult {
  std::string segment;
  uint64_t segment_bytes = 0;
  uint32_t slots = 0;
  uint64_t slot_bytes = 0;
  uint64_t examples_per_epoch = 0;
  uint64_t steps_per_epoch = 0;
  std::vector<TensorLayout> tensors;  // with the batch dimension first
  uint32_t server_pid = 0;
  uint64_t start_step = 0;
  bool cursor_resume = false;  // batches carry packing cursors
};

struct PlanResult {
  uint64_t segment_bytes = 0;
  uint32_t ranks = 0;
  uint64_t total_bytes = 0;
  uint64_t shm_free_bytes = 0;
  uint64_t slot_bytes = 0;
  uint32_t slots = 0;
  std::vector<TensorLayout> tensors;
};

struct RankStatusData {
  uint32_t rank = 0;
  bool attached = false;
  uint32_t client_pid = 0;
  uint64_t produced_step = 0;
  uint64_t consumed_step = 0;
  uint32_t ring_fill = 0;
  uint32_t ring_slots = 0;
  double server_wait_seconds = 0;
  double client_wait_seconds = 0;
  uint64_t examples = 0;
  uint64_t bytes = 0;
  uint32_t reattaches = 0;
};

struct StreamStatusData {
  StreamSpec spec;
  uint32_t owner_uid = 0;    // kAnonymousUid when !owner_known
  bool owner_known = false;  // false: a stream of anonymous TCP callers
  std::vector<RankStatusData> ranks;
  double examples_per_second = 0;
  double bytes_per_second = 0;
  uint64_t decode_errors = 0;
  uint64_t skipped_examples = 0;
  uint64_t steps_per_epoch = 0;
  ReadAheadStats readahead;  // zeros when the stream is not read ahead
  // The workload's indexing in progress (Workload::progress()).
  std::optional<IndexProgress> indexing;
};

// One owner's share of the daemon (see CoreOptions' quotas per uid).
struct UidUsageData {
  uint32_t uid = 0;  // kAnonymousUid when !known
  bool known = false;
  bool exempt = false;  // an administrator: the quotas do not apply
  uint32_t streams = 0;
  uint64_t ring_bytes = 0;
  uint64_t model_bytes = 0;
};

struct ServerStatusData {
  uint32_t pid = 0;
  std::string version;
  double uptime_seconds = 0;
  uint32_t threads = 0;
  uint32_t worker_threads = 0;
  uint64_t rss_bytes = 0;
  uint64_t ring_bytes = 0;
  bool draining = false;
  uint64_t readahead_bytes = 0;    // the read-ahead budget; 0: off
  uint32_t readahead_threads = 0;  // its I/O threads
  std::vector<StreamStatusData> streams;
  // Every owner of a stream, by uid, and the quotas (0: no limit).
  std::vector<UidUsageData> uids;
  uint32_t max_streams_per_uid = 0;
  uint64_t max_ring_bytes_per_uid = 0;
  uint64_t max_model_bytes_per_uid = 0;
};

// The owner uid of streams opened by anonymous TCP callers. (uid_t)-1 is
// never a process's uid (it means "unchanged" to setuid and chown), so it
// names no local user's streams.
constexpr uint32_t kAnonymousUid = 0xFFFFFFFFu;
// "uid 1000", or "anonymous TCP callers" for kAnonymousUid.
std::string DescribeOwner(uint32_t owner_uid);

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

  // `owner_uid` unset: the caller's own stream named spec.name (created
  // when missing); set to another uid: that uid's existing stream, for
  // administrators only (PermissionDenied naming the owner otherwise).
  // `resume` (may be null): this rank begins there instead of at the
  // spec's start_step.
  absl::StatusOr<OpenResult> OpenStream(
      const StreamSpec& spec, uint32_t rank, const Caller& caller,
      std::optional<uint32_t> owner_uid = std::nullopt,
      const RankResume* resume = nullptr);
  // For callers in this process: Caller::Process(client_pid).
  absl::StatusOr<OpenResult> OpenStream(const StreamSpec& spec, uint32_t rank,
                                        uint32_t client_pid) {
    return OpenStream(spec, rank, Caller::Process(client_pid));
  }
  // Closes the caller's own stream `name`, or with `owner_uid` that uid's
  // (another uid's for administrators only: PermissionDenied otherwise).
  absl::Status CloseStream(const std::string& name, const Caller& caller,
                           std::optional<uint32_t> owner_uid = std::nullopt);
  // As the daemon: the stream `name` of `owner_uid`.
  absl::Status CloseStream(uint32_t owner_uid, const std::string& name);
  // OK when `caller` may drain or shut down the daemon; PermissionDenied
  // naming `what` otherwise.
  absl::Status CheckAdmin(const Caller& caller, const std::string& what) const;
  bool IsAdmin(const Caller& caller) const;
  // What `spec` would need, without creating anything.
  absl::StatusOr<PlanResult> Plan(const StreamSpec& spec);
  // Refuses new streams from now on; `on_drained` (given to SetOnDrained)
  // runs once no rank is attached. Returns the ranks attached now.
  uint32_t Drain();
  absl::StatusOr<uint32_t> Drain(const Caller& caller);
  void SetOnDrained(std::function<void()> on_drained);
  ServerStatusData GetStatus();
  // Frees the rings of ranks whose clients let go or died, and forgets
  // streams idle for idle_stream_seconds; called ~10x/s by the supervisor
  // thread. Returns the segments freed.
  std::vector<std::string> ReapDeadClients();
  // The daemon exits: ends every ring with kStateExiting (clients reopen
  // their streams on the daemon that follows) and unlinks every segment.
  void CloseAll();

  const CoreOptions& options() const { return options_; }
  // /<prefix>.<daemon uid>.<owner uid, or "tcp">.<stream>.<rank>.<random>
  std::string SegmentName(uint32_t owner_uid, const std::string& stream,
                          uint32_t rank) const;

 private:
  explicit Core(const CoreOptions& options);
  void HeartbeatLoop();
  void SupervisorLoop();
  void LogThroughput(uint64_t now);  // supervisor thread only
  // Each stream's indexing in progress: written into its rings' wait reason
  // (cleared once done), and logged (event indexing) every
  // kIndexingLogSeconds. Supervisor thread only.
  void ReportIndexing(uint64_t now);

  // A rank's seat in its stream: who holds it, its producer while
  // attached, and figures kept across attachments.
  struct RankSeat {
    std::shared_ptr<RankProducer> producer;  // null: not attached
    Caller holder;  // who asked for the ring (kernel identity)
    uint64_t attached_ns = 0;
    bool ever_attached = false;
    uint32_t reattaches = 0;
    // Figures of earlier attachments, so status keeps counting.
    uint64_t examples_before = 0, bytes_before = 0;
  };
  struct Stream {
    StreamSpec spec;
    Caller owner;  // who created the stream
    bool exempt = false;  // the owner is an administrator: no quotas
    std::shared_ptr<StreamSetup> setup;  // what the engine fills from
    std::vector<RankSeat> ranks;
    uint64_t created_ns = 0;
    uint64_t idle_since_ns = 0;  // no rank attached since (0: some is)
    // Some rank's client mapped its ring. A stream without (a ghost: rings
    // asked for and never mapped) is forgotten with its last ring, so that
    // it holds no slot of --max-streams or of its owner's quota.
    bool ever_mapped = false;
  };
  // Streams by (owner uid, name).
  using StreamKey = std::pair<uint32_t, std::string>;
  static uint32_t OwnerOf(const Caller& caller) {
    return caller.known ? caller.uid : kAnonymousUid;
  }

  absl::StatusOr<std::string> ConfineDataPath(const std::string& data) const;
  // Checks the fields of a spec against the limits of a request.
  static absl::Status ValidateSpec(const StreamSpec& spec);
  // True when `holder`'s process is still there (it may hold its rank).
  bool HolderAlive(const RankSeat& rs, uint64_t now) const;
  uint64_t RingBytesInUse() const;  // requires mu_
  absl::StatusOr<std::unique_ptr<Stream>> MakeStream(const StreamSpec& spec);
  // The schedule rank `resume` reads from: the stream's, or one of its own
  // anchored at the resume's cursor; checked to reach resume->step.
  absl::StatusOr<std::shared_ptr<Schedule>> ScheduleFor(
      const Stream& stream, const RankResume* resume) const;
  void Detach(Stream& stream, RankSeat& rank);  // requires mu_

  // OpenStream's steps, in order (each but the first requires mu_).
  // The spec with the server's defaults, checked, and the rank in range.
  absl::StatusOr<StreamSpec> CheckedSpec(const StreamSpec& in,
                                         uint32_t rank) const;
  // Whose stream the caller asks for: its own, or another uid's when it
  // may join that uid's streams.
  absl::StatusOr<StreamKey> AuthorizeOpen(
      const std::string& name, const Caller& caller,
      std::optional<uint32_t> owner_uid) const;
  // The stream of `key`, created for `caller` (within the limits) when it
  // is the caller's own and does not exist; `created` says which.
  absl::StatusOr<Stream*> FindOrCreateStream(const StreamKey& key,
                                             const StreamSpec& spec,
                                             const Caller& caller,
                                             bool* created);
  // The rank's ring for `caller`: the spec agrees, the seat is free (or
  // the caller's again), the ring fits the limits; then made and filled.
  absl::StatusOr<OpenResult> OpenRank(const StreamKey& key, Stream& stream,
                                      const StreamSpec& spec, uint32_t rank,
                                      const Caller& caller,
                                      const RankResume* resume);
  absl::Status TakeSeat(Stream& stream, const StreamSpec& spec, uint32_t rank,
                        const Caller& caller);
  absl::Status CheckRingLimits(const StreamKey& key, const Stream& stream,
                               uint64_t bytes) const;

  // What `owner` holds now (requires mu_).
  UidUsageData UsageOf(uint32_t owner) const;
  // ResourceExhausted naming the quota, the owner's use and the flag when
  // one more stream of `owner` (CheckStreamQuota), or one keeping
  // `model_bytes` resident (CheckModelQuota), would exceed its quota; OK
  // for exempt owners. Both require mu_.
  absl::Status CheckStreamQuota(uint32_t owner, bool exempt) const;
  absl::Status CheckModelQuota(uint32_t owner, bool exempt,
                               uint64_t model_bytes) const;
  // Forgets ghosts (no ring, none ever mapped) and streams idle for
  // idle_stream_seconds (requires mu_; supervisor thread).
  void ForgetIdleStreams(uint64_t now);

  const CoreOptions options_;
  const uint64_t start_ns_;
  // What workloads borrow (their indexing and counting work, the models
  // and passes they share); before streams_, which use them until they go.
  // Set by Create.
  std::unique_ptr<Executor> executor_;
  std::unique_ptr<SharedWork> shared_work_;
  // Before engine_ and streams_: both use it until they go.
  std::unique_ptr<ReadAhead> readahead_;
  std::unique_ptr<Engine> engine_;

  std::mutex mu_;
  std::map<StreamKey, std::unique_ptr<Stream>> streams_;    // guarded by mu_
  bool draining_ = false;                                   // guarded by mu_
  std::function<void()> on_drained_;                        // guarded by mu_

  // Rings whose heartbeat the heartbeat thread refreshes; its own lock so
  // that nothing else ever delays a heartbeat.
  std::mutex beat_mu_;
  std::vector<std::shared_ptr<RankProducer>> beating_;  // guarded by beat_mu_

  // Supervisor thread only.
  uint64_t last_throughput_ns_;
  uint64_t last_indexing_log_ns_ = 0;  // supervisor thread only
  std::map<StreamKey, std::pair<uint64_t, uint64_t>> last_totals_;

  std::atomic<bool> stop_{false};
  std::thread heartbeat_thread_;
  std::thread supervisor_thread_;
};

}  // namespace batchd

#endif  // BATCHD_SERVER_CORE_H_

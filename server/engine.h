// The engine: one fixed pool of worker threads that fills the rings of every
// (stream, rank) the server serves. The thread count never depends on the
// number of streams or ranks.
//
// A RankProducer is one rank's ring plus the position of its next global
// batch. The stream's schedule says which items (examples or packed rows)
// make up the batch; workers split each batch into chunks of items, fill
// them straight into the claimed slot (the first chunk writes the slot
// header), and the worker that finishes a batch publishes every finished
// batch at the front of that rank's queue, in step order.
//
// Each item is filled by one Workload::FillItem call, with a FillContext
// (workloads/fill_context.h) through which the workload reads: from its
// source, or, with read-ahead on, through the item's ReadAheadItem. For
// items that are examples the engine reads the item's own example first and
// hands the bytes in the context, so that an image crosses the line between
// server and workload twice: its read (ExampleSource::Read, on an I/O
// thread or inline) and its FillItem.
//
// Workers never wait for slow storage. An item of a read-ahead stream whose
// bytes are not read yet (ReadAheadItem::pending) puts its chunk back, to
// go on from that item once the bytes land, and the worker serves any other
// chunk meanwhile; a chunk that has waited read_stall_seconds fails its
// rank with a reason that names the read that has not returned, which the
// client sees as the ring's close reason.
//
// Streams of the same content share their fills (server/fill_share.h):
// before an item is filled, its stream's ShareMember copies it from the
// window when another stream filled it, or puts the chunk back (as for a
// pending read) while another worker is filling it; a fill other streams
// may want is made in the window's buffer and copied into the slot.
//
// Thread safety: Engine is thread-safe. RankProducer's scheduling state
// (EngineState) is the engine's: reachable only through Engine::State,
// which requires Engine::mu_ (clang checks it); the counters it exposes are
// atomics.
#ifndef BATCHD_SERVER_ENGINE_H_
#define BATCHD_SERVER_ENGINE_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "base/threads.h"
#include "ring/ring.h"
#include "server/fill_share.h"
#include "server/readahead.h"
#include "workloads/sampler.h"
#include "workloads/schedule.h"
#include "workloads/workload.h"

namespace batchd {

// Where each tensor of a rank's batch lives in a slot; shared by all ranks of
// a stream. Constant after construction.
struct BatchLayout {
  struct Entry {
    TensorLayout tensor;
    uint64_t offset;         // from the slot start
    uint64_t example_bytes;  // bytes of one example of this tensor
  };
  std::vector<Entry> entries;
  uint64_t per_rank_batch = 0;
  uint64_t payload_bytes = 0;  // slot bytes after the slot header

  // Fails with InvalidArgument when a tensor's shape is negative or any
  // size (example bytes, bytes per rank, offsets) does not fit in 64 bits
  // or exceeds shm::kMaxSlotBytes: products are checked, never wrapped.
  static absl::StatusOr<BatchLayout> Make(
      const std::vector<TensorLayout>& tensors, uint64_t per_rank_batch);
};

// The setup of one stream, which every rank of it shares: the workload, its
// sampler and schedule, where each tensor lives in a slot. Constant after
// construction, except the counters.
struct StreamSetup {
  std::string name;
  // Shared with the read-ahead's read function: a read stuck in a stalled
  // mount may return after the stream has gone, and still uses it.
  std::shared_ptr<Workload> workload;
  Sampler sampler;
  BatchLayout layout;
  WorkloadCounters counters;
  // Which items make up each batch (the workload's MakeSchedule); after
  // the workload, which it may use until it goes.
  std::unique_ptr<Schedule> schedule;
  // Where the workload's examples are stored (Workload::source; null: it
  // reads nothing), kept alive with the workload.
  std::shared_ptr<const ExampleSource> source;
  // The identity of the data it reads (share_key.h's DataIdentity), and
  // its place among the streams of the same content, whose fills it
  // shares (server/fill_share.h; null: it shares none). Both set before
  // its first rank is added.
  std::string data_identity;
  std::shared_ptr<ShareMember> share;
  // The stream's read-ahead (null: off, or the workload reads nothing); set
  // by Engine::Prepare before any rank is added. Last, so that it goes
  // first (reads in flight then hold the workload, not the stream).
  std::shared_ptr<ReadAheadStream> readahead;

  StreamSetup(std::string n, std::unique_ptr<Workload> w, Sampler sam,
              BatchLayout lay)
      : name(std::move(n)),
        workload(std::move(w)),
        sampler(std::move(sam)),
        layout(std::move(lay)),
        schedule(workload->MakeSchedule(sampler)),
        source(workload, workload->source()) {}
  // Stops background work (a packed schedule's counting) soon; the
  // destructor then waits at most for the epoch being counted.
  void Cancel() { schedule->Cancel(); }
};

// The stream's own schedule, shared: it keeps the stream alive.
std::shared_ptr<Schedule> SharedSchedule(std::shared_ptr<StreamSetup> stream);
// A schedule of the stream's workload of its own (e.g. anchored where one
// rank resumes); it keeps the stream, whose workload it reads, alive.
std::shared_ptr<Schedule> OwnSchedule(std::shared_ptr<StreamSetup> stream);

class RankProducer {
 public:
  // `schedule`: where this rank's items come from (SharedSchedule unless
  // the rank resumed at a cursor of its own).
  RankProducer(std::shared_ptr<StreamSetup> stream, uint32_t rank,
               uint64_t start_step, std::unique_ptr<RingWriter> ring,
               std::shared_ptr<Schedule> schedule);

  uint32_t rank() const { return rank_; }
  uint64_t start_step() const { return start_step_; }
  RingWriter& ring() const { return *ring_; }
  const std::shared_ptr<StreamSetup>& stream() const { return stream_; }
  Schedule& schedule() const { return *schedule_; }

  // Counters, readable at any time.
  std::atomic<uint64_t> published_steps{0};
  std::atomic<uint64_t> examples{0};
  std::atomic<uint64_t> bytes{0};
  std::atomic<uint64_t> server_wait_ns{0};
  std::atomic<bool> failed{false};  // a fill error ended this ring
  // Status found an impossible client-written counter in the ring (once).
  std::atomic<bool> counters_invalid{false};
  // This rank's lane of the read-ahead (0: none); set by Engine::Add.
  ReadAhead::LaneId readahead_lane = 0;

 private:
  friend class Engine;
  // A chunk put back until the bytes its item waits for land: a read
  // (`item` pending), or another worker's fill of the item (`share`
  // waiting).
  struct Parked {
    uint32_t chunk;
    uint64_t next_item;  // the item to fill first
    std::unique_ptr<ReadAheadItem> item;
    ShareTicket share;
  };
  struct Job {
    uint64_t step;
    uint64_t pos;
    uint32_t chunks;
    uint32_t next_chunk = 0;
    uint32_t done_chunks = 0;
    absl::Status status;
    std::vector<Parked> parked;
  };

  const std::shared_ptr<StreamSetup> stream_;
  const uint32_t rank_;
  const uint64_t start_step_;
  const std::unique_ptr<RingWriter> ring_;
  const std::shared_ptr<Schedule> schedule_;

  // The engine's state of this rank; see Engine::State.
  struct EngineState {
    uint64_t next_step;
    std::deque<Job> inflight;
    bool retired = false;
    bool ended = false;
    uint64_t blocked_since_ns = 0;  // ring full since (0: not blocked)
  };
  EngineState engine_state_;
};

class Engine {
 public:
  // Default of read_stall_seconds (--read-stall-seconds).
  static constexpr double kDefaultReadStallSeconds = 60;

  // `readahead` (may be null: none) must outlive the engine. A chunk that
  // has waited `read_stall_seconds` for its bytes fails its rank (0: never).
  // `share` (may be null: streams share no fills) is where streams join
  // their groups (StreamSetup::share); it must outlive the engine.
  // When a worker thread cannot be started, status() says so and the
  // engine has stopped the ones that did start.
  explicit Engine(int threads, ReadAhead* readahead = nullptr,
                  double read_stall_seconds = kDefaultReadStallSeconds,
                  FillShare* share = nullptr);
  // Stop() as long as it takes, then the engine goes.
  ~Engine();

  // OK, or why the workers could not all be started.
  const absl::Status& status() const { return status_; }
  int threads() const { return thread_count_; }
  // The window of fills streams share (null: none).
  FillShare* share() const { return share_; }
  // Connects a new stream to the read-ahead; call once, before its first
  // Add. ResourceExhausted when the read-ahead cannot start a thread.
  absl::Status Prepare(StreamSetup* stream);
  void Add(std::shared_ptr<RankProducer> producer);
  // Stops producing for `producer`; chunks in flight finish first (the
  // producer and its ring live until the last worker lets go).
  void Retire(const std::shared_ptr<RankProducer>& producer);
  // Stops all workers after their current item; idempotent. Waits until
  // `deadline_ns` (MonotonicNanos; 0: as long as it takes) for them to
  // end; false when some have not (stuck in storage, in a workload that is
  // not read ahead): the engine must then never be destroyed.
  bool Stop(uint64_t deadline_ns = 0);

 private:
  static constexpr uint64_t kChunkStart = ~uint64_t(0);
  struct Task {
    std::shared_ptr<RankProducer> producer;
    uint64_t step = 0;
    uint64_t pos = 0;
    uint32_t chunk = 0;
    uint32_t chunks = 0;
    uint64_t next_item = kChunkStart;     // kChunkStart: the chunk's first
    std::unique_ptr<ReadAheadItem> item;  // read-ahead streams only
    ShareTicket share;                    // streams that share fills only
  };
  // `p`'s scheduling state: the only way to it, under mu_.
  RankProducer::EngineState& State(RankProducer& p)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return p.engine_state_;
  }
  bool FindTask(Task* task, bool* some_ring_full)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A parked chunk of `p`'s jobs whose bytes landed, into `task`; fails
  // `p` when one has waited past the deadline.
  bool FindParked(const std::shared_ptr<RankProducer>& p, uint64_t now,
                  Task* task) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Fills the task's items; true when it stopped at an item whose bytes
  // are not there yet (task->next_item). `buffers`: the worker's read
  // buffers, kept from task to task so that reads reuse their memory.
  bool RunTask(Task* task, absl::Status* status,
               std::vector<std::string>* buffers) ABSL_LOCKS_EXCLUDED(mu_);
  void Finish(const Task& task, absl::Status status)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Park(Task* task) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Frees what the parked chunks of `p`'s jobs hold.
  void DropParked(RankProducer& p) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Ends `p`'s ring with `why`, which its client sees.
  void Fail(RankProducer& p, uint64_t step, const absl::Status& why)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void WorkerLoop() ABSL_LOCKS_EXCLUDED(mu_);

  const int thread_count_;
  ReadAhead* const readahead_;
  FillShare* const share_;
  const uint64_t read_stall_ns_;  // 0: no deadline
  absl::Status status_;           // constant after construction
  absl::Mutex mu_;
  absl::CondVar cv_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  int live_workers_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::shared_ptr<RankProducer>> producers_ ABSL_GUARDED_BY(mu_);
  size_t round_robin_ ABSL_GUARDED_BY(mu_) = 0;
  bool poller_active_ ABSL_GUARDED_BY(mu_) = false;
  // How long the poller of full rings sleeps: doubles while polls find
  // nothing, back to the minimum when one does.
  std::chrono::microseconds poll_interval_ ABSL_GUARDED_BY(mu_){kMinPoll};
  static constexpr std::chrono::microseconds kMinPoll{500};
  static constexpr std::chrono::microseconds kMaxPoll{20000};
  ThreadGroup workers_;  // the owner's (constructor, Stop)
};

}  // namespace batchd

#endif  // BATCHD_SERVER_ENGINE_H_

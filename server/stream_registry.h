// The streams a daemon serves, by (owner uid, name), and their ranks'
// seats: opening a rank (find or create its stream within the limits, take
// its seat, make and fill its ring), closing, reaping the rings of clients
// that let go or died, forgetting idle streams, and draining.
//
// Thread safety: thread-safe; one lock, mu_, over every stream and seat
// (a Stream is reachable only through streams_). Under it the registry
// calls into the engine and the heartbeat, never the other way round.
#ifndef BATCHD_SERVER_STREAM_REGISTRY_H_
#define BATCHD_SERVER_STREAM_REGISTRY_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "batchd/v1/batchd.pb.h"
#include "server/access.h"
#include "server/engine.h"
#include "server/heartbeat.h"
#include "server/ring_budget.h"
#include "server/stream_factory.h"

namespace batchd {

struct CoreOptions;

// A rank's seat in its stream: who holds it, its producer while
// attached, and figures kept across attachments.
struct RankSeat {
  std::shared_ptr<RankProducer> producer;  // null: not attached
  Caller holder;  // who asked for the ring (kernel identity)
  uint64_t attached_ns = 0;
  uint64_t detached_ns = 0;  // when it last let go (the oldest go first)
  bool ever_attached = false;
  uint32_t reattaches = 0;
  // Figures of earlier attachments, so status keeps counting.
  uint64_t examples_before = 0, bytes_before = 0;
};

struct Stream {
  v1::StreamSpec spec;  // checked, with the server's defaults
  Caller owner;         // who created the stream
  bool exempt = false;  // the owner is an administrator: no quotas
  std::shared_ptr<StreamSetup> setup;  // what the engine fills from
  // Seats of the ranks that attached, by rank, each made as its rank
  // attaches: a world size costs nothing until its ranks come. Detached
  // seats are kept for their figures, at most kMaxIdleSeats of them (the
  // oldest go first, their figures into the forgotten_* totals), so that
  // ranks attached one after another cannot grow the daemon either.
  static constexpr size_t kMaxIdleSeats = 64;
  std::map<uint32_t, RankSeat> ranks;
  uint64_t forgotten_examples = 0, forgotten_bytes = 0;
  // Ranks whose seat was forgotten after they had attached (they may
  // re-attach at another start step); empty until a seat is forgotten,
  // then world_size bits (8 KiB at most).
  std::vector<bool> forgotten_ranks;
  uint64_t created_ns = 0;
  uint64_t idle_since_ns = 0;  // no rank attached since (0: some is)
  // Some rank's client mapped its ring. A stream without (a ghost: rings
  // asked for and never mapped) is forgotten with its last ring, so that
  // it holds no slot of --max-streams or of its owner's quota.
  bool ever_mapped = false;
};

// The bytes of `stream`'s attached rings.
uint64_t AttachedRingBytes(const Stream& stream);
// The ranks of `stream` attached now.
uint32_t AttachedRanks(const Stream& stream);
// Adds `stream` to its owner's `usage`: one stream, its resident model
// bytes, its attached rings.
void AddToUsage(const Stream& stream, v1::UidUsage* usage);

class StreamRegistry {
 public:
  // Everything given must outlive the registry.
  StreamRegistry(const CoreOptions& options, const Access& access,
                 const RingBudget& budget, Engine& engine, Heartbeat& heartbeat)
      : options_(options),
        access_(access),
        budget_(budget),
        engine_(engine),
        heartbeat_(heartbeat) {}

  // What a new stream is made from: its setup (made, or waited for:
  // server/stream_preparations.h), or null when the stream was made by
  // another call meanwhile; or why there is none (yet).
  using MakeSetup =
      std::function<absl::StatusOr<std::shared_ptr<StreamSetup>>()>;

  // OpenStream once the spec is checked and `key` authorized: the stream
  // of `key`, created for `caller` (within the limits) when it is the
  // caller's own and does not exist, then the rank's ring for `caller`.
  // `resume` (may be null): the rank begins there instead of at the
  // spec's start_step. A stream this call created and could not open a
  // rank of is not kept. A new stream's setup comes from `make`, called
  // without the lock once the stream may be created, and nothing here
  // learns data: a resume at a cursor is anchored by its schedule's
  // counting task, so a far cursor holds no other caller. `made` (may be
  // null) says whether this call made the stream from make's setup.
  absl::StatusOr<v1::OpenStreamResponse> Open(
      const StreamKey& key, const v1::StreamSpec& spec, uint32_t rank,
      const Caller& caller, const v1::Resume* resume, const MakeSetup& make,
      bool* made = nullptr);
  // Detaches every rank of the stream `key` and forgets it.
  absl::Status Close(const StreamKey& key);
  // The owners of streams named key.second when `key` has none; empty when
  // it has.
  std::vector<uint32_t> OwnersNamedIfMissing(const StreamKey& key) const;
  // Whether the stream `key` exists now.
  bool Has(const StreamKey& key) const;
  // The daemon exits: ends every ring with kStateExiting (clients reopen
  // their streams on the daemon that follows) and unlinks every segment.
  void CloseAll();

  // Refuses new streams from now on; `on_drained` (given to SetOnDrained)
  // runs once no rank is attached, or drain_timeout_seconds after the
  // first Drain with ranks still attached. Returns the ranks attached now.
  uint32_t Drain();
  void SetOnDrained(std::function<void()> on_drained);
  bool draining() const;

  // Frees the rings of ranks whose clients let go or died, and forgets
  // streams idle for idle_stream_seconds. Returns the segments freed.
  std::vector<std::string> ReapDeadClients();
  // Calls `visit` for every stream in key order, under the lock: `visit`
  // must not call the registry.
  void ForEachStream(
      const std::function<void(const StreamKey&, const Stream&)>& visit) const;

  // /<prefix>.<daemon uid>.<owner uid, or "tcp">.<stream>.<rank>.<random>
  std::string SegmentName(uint32_t owner_uid, const std::string& stream,
                          uint32_t rank) const;

 private:
  // Open's steps, in order.
  // Whether `caller` may create the stream `key` now (its own, not
  // draining, within --max-streams and its quota).
  absl::Status CheckNewStream(const StreamKey& key, const Caller& caller) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The stream `key`, or one made from `setup` (made without the lock)
  // when there is none and it may be created.
  absl::StatusOr<Stream*> FindOrCreateStream(
      const StreamKey& key, const v1::StreamSpec& spec, const Caller& caller,
      const std::shared_ptr<StreamSetup>& setup, bool* created)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The rank's ring for `caller`: the spec agrees, the seat is free (or
  // the caller's again), the ring fits the limits; then made and filled.
  absl::StatusOr<v1::OpenStreamResponse> OpenRank(
      const StreamKey& key, Stream& stream, const v1::StreamSpec& spec,
      uint32_t rank, const Caller& caller, const v1::Resume* resume)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status TakeSeat(Stream& stream, const v1::StreamSpec& spec,
                        uint32_t rank, const Caller& caller)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status CheckRingLimits(const StreamKey& key, const Stream& stream,
                               uint64_t bytes) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The schedule rank `resume` reads from: the stream's, or one of its own
  // anchored at the resume's cursor; checked to reach resume->step.
  absl::StatusOr<std::shared_ptr<Schedule>> ScheduleFor(
      const Stream& stream, const v1::Resume* resume) const;

  void Detach(Stream& stream, RankSeat& rank)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Forgets the oldest detached seats beyond Stream::kMaxIdleSeats.
  void ForgetIdleSeats(Stream& stream) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // True when the seat's mapped client let go or died (RingWriter::
  // ClientGone, judged by the holder the kernel named when it is visible).
  bool ClientGone(const RankSeat& rs, uint64_t now) const;
  // True when the seat's holder is still there (it may hold its rank).
  bool HolderAlive(const RankSeat& rs, uint64_t now) const;
  uint64_t RingBytesInUse() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // What `owner` holds now.
  v1::UidUsage UsageOf(uint32_t owner) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Forgets ghosts (no ring, none ever mapped) and streams idle for
  // idle_stream_seconds.
  void ForgetIdleStreams(uint64_t now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const CoreOptions& options_;
  const Access& access_;
  const RingBudget& budget_;
  Engine& engine_;
  Heartbeat& heartbeat_;

  mutable absl::Mutex mu_;
  std::map<StreamKey, std::unique_ptr<Stream>> streams_ ABSL_GUARDED_BY(mu_);
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t drain_started_ns_ ABSL_GUARDED_BY(mu_) = 0;
  std::function<void()> on_drained_ ABSL_GUARDED_BY(mu_);
};

}  // namespace batchd

#endif  // BATCHD_SERVER_STREAM_REGISTRY_H_

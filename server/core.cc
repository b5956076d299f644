// The core: its options resolved (core_options.h), its parts composed, and
// each request handed to the part whose job it is; see core.h.
#include "server/core.h"

#include <optional>

#include "absl/strings/str_cat.h"
#include "base/clock.h"
#include "base/threads.h"
#include "server/protocol.h"

namespace batchd {

namespace {

ReadAhead::Options ReadAheadOptions(const CoreOptions& o) {
  ReadAhead::Options ra;
  ra.budget_bytes = o.readahead_bytes;
  ra.io_threads = o.readahead_threads;
  ra.inline_read_ns = ReadAhead::kDefaultInlineReadNs;
  return ra;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Core>> Core::Create(const CoreOptions& options) {
  absl::StatusOr<CoreOptions> resolved = ResolveCoreOptions(options);
  if (!resolved.ok()) return resolved.status();
  const CoreOptions& o = *resolved;
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
  if (absl::Status s = core->Start(*std::move(executor)); !s.ok()) return s;
  return core;
}

Core::Core(const CoreOptions& options)
    : options_(options),
      start_ns_(MonotonicNanos()),
      access_(options_.admin_gid, options_.anonymous_admin),
      budget_(options_),
      readahead_(std::make_unique<ReadAhead>(ReadAheadOptions(options_))),
      share_(std::make_unique<FillShare>(options_.share_window_bytes)),
      engine_(std::make_unique<Engine>(options_.threads, readahead_.get(),
                                       options_.read_stall_seconds,
                                       share_.get())) {}

absl::Status Core::Start(std::unique_ptr<Executor> executor) {
  executor_ = std::move(executor);
  shared_work_ = std::make_unique<SharedWork>(options_.max_model_bytes);
  factory_ = std::make_unique<StreamFactory>(options_, executor_.get(),
                                             shared_work_.get(), engine_.get());
  heartbeat_ = std::make_unique<Heartbeat>();
  registry_ = std::make_unique<StreamRegistry>(options_, access_, budget_,
                                               *engine_, *heartbeat_);
  StreamPreparations::Options po;
  po.grace_ns = uint64_t(options_.prepare_grace_seconds * 1e9);
  preparations_ = std::make_unique<StreamPreparations>(
      po, turns_,
      [registry = registry_.get()](const StreamKey& key) {
        return registry->Has(key);
      },
      [factory = factory_.get()](const v1::StreamSpec& spec,
                                 const ReadAccess& access) {
        return factory->Make(spec, access);
      });
  status_ = std::make_unique<StatusReporter>(options_, *registry_, *engine_,
                                             *readahead_, start_ns_);
  supervisor_ = std::make_unique<Supervisor>(options_, *registry_, *status_);
  if (absl::Status s = heartbeat_->Start(); !s.ok()) return s;
  return supervisor_->Start();
}

Core::~Core() {
  // Workers, I/O and preparation threads stuck in storage that does not
  // answer are not waited for past the bound: they are left (with what
  // they use) to end with the process.
  const uint64_t deadline =
      MonotonicNanos() + uint64_t(options_.stop_wait_seconds * 1e9) + 1;
  if (preparations_ != nullptr) {
    if (const int stuck = preparations_->Stop(deadline); stuck > 0) {
      NoteAbandonedThreads(stuck);
      // Never destroyed: the stuck threads use them.
      preparations_.release();
      factory_.release();
      shared_work_.release();
      executor_.release();
    }
  }
  if (supervisor_ != nullptr) supervisor_->Stop();
  if (heartbeat_ != nullptr) heartbeat_->Stop();
  const bool workers_stopped = engine_->Stop(deadline);
  CloseAll();
  if (!workers_stopped) {
    NoteAbandonedThreads(1);
    engine_.release();  // never destroyed: its stuck workers use it
  }
  if (!readahead_->Stop(deadline)) {
    NoteAbandonedThreads(1);
    readahead_.release();  // never destroyed: its stuck threads use it
  }
  // Passes still running (they outlive their streams) stop and store what
  // they learnt.
  if (executor_ != nullptr) executor_->Shutdown();
}

// OpenStream's steps: the client's protocol, the spec (with the server's
// defaults, checked, the rank in range), whose stream it is, then the
// registry's: find or create the stream (within the limits and the
// owner's quotas), then the rank: its seat, its ring's limits, its ring.
absl::StatusOr<v1::OpenStreamResponse> Core::OpenStream(
    const v1::OpenStreamRequest& req, const Caller& caller,
    const std::shared_ptr<Cancellation>& cancel) {
  absl::StatusOr<v1::OpenStreamResponse> opened =
      OpenStreamSteps(req, caller, cancel);
  // Refused: a call that failed is a cancelled one, for whatever of its
  // work is still running.
  if (!opened.ok()) cancel->Cancel(opened.status());
  return opened;
}

absl::StatusOr<v1::OpenStreamResponse> Core::OpenStreamSteps(
    const v1::OpenStreamRequest& req, const Caller& caller,
    const std::shared_ptr<Cancellation>& cancel) {
  if (absl::Status s = CheckClientProtocol(req); !s.ok()) return s;
  absl::StatusOr<v1::StreamSpec> spec =
      factory_->CheckedSpec(req.spec(), req.rank());
  if (!spec.ok()) return spec.status();
  absl::StatusOr<StreamKey> key = access_.AuthorizeOpen(
      spec->name(), caller,
      req.has_owner_uid() ? std::optional<uint32_t>(req.owner_uid())
                          : std::nullopt);
  if (!key.ok()) return key.status();
  // Whatever the call does is its stream's owner's work. A stream to make
  // is prepared beyond the call, taking its owner's turns, and waited for.
  WorkScope work(WorkContext{key->first, cancel});
  StreamPreparations::Ticket ticket;
  bool made = false;
  absl::StatusOr<v1::OpenStreamResponse> opened = registry_->Open(
      *key, *spec, req.rank(), caller,
      req.has_resume() ? &req.resume() : nullptr,
      [&]() -> absl::StatusOr<std::shared_ptr<StreamSetup>> {
        absl::StatusOr<StreamPreparations::Ticket> ready = preparations_->Await(
            *key, *spec, access_.ReadAccessOf(caller), caller, *cancel);
        if (!ready.ok()) return ready.status();
        ticket = *std::move(ready);
        return ticket.setup();
      },
      &made);
  ticket.Taken(made);
  return opened;
}

absl::Status Core::CloseStream(const v1::CloseStreamRequest& req,
                               const Caller& caller) {
  const std::optional<uint32_t> owner_uid =
      req.has_owner_uid() ? std::optional<uint32_t>(req.owner_uid())
                          : std::nullopt;
  absl::StatusOr<StreamKey> key =
      access_.AuthorizeClose(req.name(), caller, owner_uid, [&] {
        return registry_->OwnersNamedIfMissing(
            StreamKey{OwnerOf(caller), req.name()});
      });
  if (!key.ok()) return key.status();
  return registry_->Close(*key);
}

absl::Status Core::CheckAdmin(const Caller& caller,
                              const std::string& what) const {
  return access_.CheckAdmin(caller, what);
}

bool Core::IsAdmin(const Caller& caller) const {
  return access_.IsAdmin(caller);
}

absl::StatusOr<v1::PlanResponse> Core::Plan(
    const v1::PlanRequest& req, const Caller& caller,
    const std::shared_ptr<Cancellation>& cancel) const {
  WorkScope work(WorkContext{OwnerOf(caller), cancel});
  absl::StatusOr<PrepareTurns::Turn> turn =
      turns_.Take(OwnerOf(caller), cancel.get());
  if (!turn.ok()) {
    cancel->Cancel(turn.status());
    return turn.status();
  }
  absl::StatusOr<v1::PlanResponse> plan =
      factory_->Plan(req.spec(), access_.ReadAccessOf(caller));
  if (!plan.ok()) cancel->Cancel(plan.status());
  return plan;
}

uint32_t Core::Drain() { return registry_->Drain(); }

absl::StatusOr<v1::DrainResponse> Core::Drain(const v1::DrainRequest&,
                                              const Caller& caller) {
  if (absl::Status s = CheckAdmin(caller, "Drain"); !s.ok()) return s;
  v1::DrainResponse resp;
  resp.set_attached_ranks(Drain());
  return resp;
}

void Core::SetOnDrained(std::function<void()> on_drained) {
  registry_->SetOnDrained(std::move(on_drained));
}

v1::GetStatusResponse Core::GetStatus(
    std::vector<ReadAheadStats>* readahead) const {
  v1::GetStatusResponse out = status_->Status(readahead);
  for (v1::Preparing& p : preparations_->List()) {
    *out.add_preparations() = std::move(p);
  }
  return out;
}

std::vector<std::string> Core::ReapDeadClients() {
  return registry_->ReapDeadClients();
}

void Core::CloseAll() {
  if (registry_ != nullptr) registry_->CloseAll();
}

}  // namespace batchd

// The client Loader: OpenStream over gRPC, then the ring, then batches.
#include "batchd/loader.h"

#include <dlfcn.h>
#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/address.h"
#include "batchd/v1/batchd.grpc.pb.h"
#include "batchd/version.h"
#include "client/ring.h"

namespace batchd {

// Owns one acquired slot; the last owner's destructor releases it. Holds the
// reader so that the mapping outlives every tensor, even after the Loader.
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

int EnvInt(const char* name, int def) {
  const char* v = getenv(name);
  int n;
  if (v == nullptr || !absl::SimpleAtoi(v, &n)) return def;
  return n;
}

}  // namespace

void ApplyEnvironmentDefaults(LoaderOptions* o) {
  if (o->server.empty()) {
    const char* s = getenv("BATCHD_SERVER");
    o->server = s != nullptr ? s : kDefaultServerAddress;
  }
  if (o->world_size < 0) o->world_size = EnvInt("WORLD_SIZE", 1);
  if (o->rank < 0) o->rank = EnvInt("RANK", EnvInt("LOCAL_RANK", 0));
}

class Loader::Impl {
 public:
  std::shared_ptr<RingReader> reader;
  std::thread heartbeat;
  std::mutex mu;
  std::condition_variable cv;
  bool stop = false;

  ~Impl() {
    {
      std::lock_guard<std::mutex> lock(mu);
      stop = true;
    }
    cv.notify_all();
    if (heartbeat.joinable()) heartbeat.join();
  }
};

Loader::Loader(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Loader::~Loader() = default;

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

  v1::OpenStreamRequest req;
  v1::StreamSpec* spec = req.mutable_spec();
  spec->set_name(o.stream);
  spec->set_workload(o.workload);
  spec->set_data(o.data);
  spec->set_split(o.split);
  spec->set_global_batch_size(o.global_batch_size);
  spec->set_world_size(uint32_t(o.world_size));
  spec->set_seed(o.seed);
  spec->set_start_step(o.start_step);
  if (o.has_start_cursor) {
    spec->mutable_start_cursor()->set_epoch(o.start_cursor[0]);
    spec->mutable_start_cursor()->set_window(o.start_cursor[1]);
    spec->mutable_start_cursor()->set_row(o.start_cursor[2]);
  }
  spec->set_slots(o.slots);
  for (const auto& [k, v] : o.options) (*spec->mutable_options())[k] = v;
  req.set_rank(uint32_t(o.rank));
  if (o.owner_uid >= 0) {
    if (o.owner_uid > int64_t(UINT32_MAX)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "LoaderOptions.owner_uid ", o.owner_uid, " is not a uid"));
    }
    req.set_owner_uid(uint32_t(o.owner_uid));
  }
  req.set_protocol_version(kProtocolVersion);
  req.set_client_version(kBatchdVersion);

  v1::OpenStreamResponse resp;
  {
    // The channel lives only for this call: trainers fork (DataLoader
    // workers, launchers) and gRPC's threads must not be running then.
    auto channel = grpc::CreateChannel(ParseAddress(o.server).grpc_target,
                                       grpc::InsecureChannelCredentials());
    auto stub = v1::Batchd::NewStub(channel);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::milliseconds(
                         int64_t(o.connect_timeout_seconds * 1000)));
    ctx.set_wait_for_ready(true);
    grpc::Status s = stub->OpenStream(&ctx, req, &resp);
    if (!s.ok()) {
      const std::string where =
          s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED ||
                  s.error_code() == grpc::StatusCode::UNAVAILABLE
              ? absl::StrCat(" (is batchd running at ", o.server, "?)")
              : "";
      return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                          absl::StrCat("OpenStream ", o.stream, " rank ",
                                       o.rank, ": ", s.error_message(),
                                       where));
    }
  }

  // A server that checks the request's protocol has refused a mismatch
  // above; one too old to check is caught here (0 there is protocol 1).
  const uint32_t server_protocol =
      resp.protocol_version() == 0 ? 1 : resp.protocol_version();
  if (server_protocol != kProtocolVersion) {
    return absl::FailedPreconditionError(absl::StrCat(
        "incompatible batchd protocol: this client (batchd ", kBatchdVersion,
        ") speaks protocol ", kProtocolVersion, " but the server at ", o.server,
        " (",
        resp.server_version().empty() ? "an older release"
                                      : "batchd " + resp.server_version(),
        ", pid ", resp.server_pid(), ") speaks protocol ", server_protocol,
        "; install the client of the server's release"));
  }

  RingReader::Options ro;
  ro.server_stale_seconds = o.server_stale_seconds;
  absl::StatusOr<std::unique_ptr<RingReader>> reader =
      RingReader::Attach(resp.segment(), ro);
  if (!reader.ok()) return reader.status();

  auto impl = std::make_unique<Impl>();
  impl->reader = std::move(*reader);
  Impl* raw = impl.get();
  impl->heartbeat = std::thread([raw] {
    std::unique_lock<std::mutex> lock(raw->mu);
    while (!raw->stop) {
      raw->reader->Heartbeat();
      raw->cv.wait_for(lock, std::chrono::milliseconds(100));
    }
  });
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
  return loader;
}

absl::StatusOr<Batch> Loader::Next() {
  RingReader& r = *impl_->reader;
  absl::StatusOr<uint64_t> pos = r.Acquire(options_.timeout_seconds);
  if (!pos.ok()) return pos.status();
  Batch b;
  b.lease_ = std::make_shared<SlotLease>(impl_->reader, *pos);
  const shm::SlotHeader* h = r.Slot(*pos);
  b.step_ = h->step;
  b.epoch_ = h->epoch;
  b.position_ = h->position;
  b.valid_count_ = h->valid_count;
  b.cursor_[0] = h->cursor_epoch;
  b.cursor_[1] = h->cursor_window;
  b.cursor_[2] = h->cursor_row;
  absl::StatusOr<std::vector<SlotTensor>> tensors = r.Tensors(*pos);
  if (!tensors.ok()) return tensors.status();
  for (SlotTensor& t : *tensors) {
    b.tensors_.push_back(Tensor{std::move(t.name), DType(t.dtype),
                                std::move(t.shape), t.data,
                                size_t(t.nbytes)});
  }
  return b;
}

absl::Status Loader::RegisterPinned() {
  // The runtime torch loaded is the one to use; RTLD_NOLOAD finds it
  // without loading another.
  void* cudart = nullptr;
  for (const char* name : {"libcudart.so", "libcudart.so.13", "libcudart.so.12",
                           "libcudart.so.11.0"}) {
    cudart = dlopen(name, RTLD_LAZY | RTLD_NOLOAD);
    if (cudart == nullptr) cudart = dlopen(name, RTLD_LAZY);
    if (cudart != nullptr) break;
  }
  if (cudart == nullptr) {
    return absl::FailedPreconditionError("no CUDA runtime (libcudart)");
  }
  using Register = int (*)(void*, size_t, unsigned);
  auto reg = reinterpret_cast<Register>(dlsym(cudart, "cudaHostRegister"));
  if (reg == nullptr) {
    return absl::FailedPreconditionError("libcudart has no cudaHostRegister");
  }
  const int rc = reg(mapped_address(), mapped_bytes(), 0);
  if (rc != 0) {
    // 35: no driver for this runtime; 100: no device. Either way the copies
    // stay synchronous, which is all a caller can do about it.
    return absl::FailedPreconditionError(
        absl::StrCat("cudaHostRegister of the ring failed: CUDA error ", rc));
  }
  return absl::OkStatus();
}

void* Loader::mapped_address() const { return impl_->reader->base(); }
size_t Loader::mapped_bytes() const { return impl_->reader->size(); }

double Loader::wait_seconds() const {
  return double(impl_->reader->header()->client_wait_ns.load(
             std::memory_order_relaxed)) /
         1e9;
}

}  // namespace batchd

// The libtorch adapter: a batch's tensors as torch::Tensors that view the
// ring slot directly (torch::from_blob). Each tensor's deleter holds the
// slot's lease, so the slot goes back to the server when the last tensor
// (and the Batch) are gone, in whatever order and on whatever thread.
//
// Header-only, so that the client library itself never links libtorch.
#ifndef BATCHD_TORCH_H_
#define BATCHD_TORCH_H_

#include <c10/core/Event.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <torch/torch.h>

#include <chrono>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "batchd/loader.h"

namespace batchd {

inline torch::Dtype TorchDtype(DType dtype) {
  switch (dtype) {
    case DType::kUInt8: return torch::kUInt8;
    case DType::kInt32: return torch::kInt32;
    case DType::kInt64: return torch::kInt64;
    case DType::kFloat32: return torch::kFloat32;
    case DType::kUInt64: return torch::kInt64;  // torch has no uint64: bits
  }
  return torch::kUInt8;
}

// The tensors of `batch`, by name, without copying. The batch is consumed:
// its slot now belongs to the tensors.
inline std::map<std::string, torch::Tensor> ToTorch(Batch batch) {
  std::map<std::string, torch::Tensor> out;
  std::shared_ptr<SlotLease> lease = batch.lease();
  for (const Tensor& t : batch.tensors()) {
    out[t.name] = torch::from_blob(
        t.data, t.shape, [lease](void*) mutable { lease.reset(); },
        torch::TensorOptions().dtype(TorchDtype(t.dtype)));
  }
  return out;
}

// ImageNet's normalisation, done by the consumer after the uint8 transport:
// float32 (x - 255 * mean) / (255 * std), computed and returned on `device`
// (default the CPU, whatever the input's device: pass a CUDA tensor's own
// device to keep it there). `images` is uint8 [B, H, W, 3] (nhwc) or
// [B, 3, H, W]. The copy to `device` is blocking, as batchd.normalize's:
// `images` may view a ring slot that goes back to the server as soon as the
// caller drops it, and an asynchronous copy could still be reading it
// (DeviceFeeder's copies are asynchronous because it holds the slot until
// they are done).
inline torch::Tensor NormalizeImages(const torch::Tensor& images,
                                     bool nchw = false,
                                     torch::Device device = torch::kCPU) {
  torch::Tensor x = images.to(device).to(torch::kFloat32);
  auto opts = torch::TensorOptions().dtype(torch::kFloat32).device(device);
  torch::Tensor mean =
      torch::tensor({0.485f * 255, 0.456f * 255, 0.406f * 255}, opts);
  torch::Tensor std =
      torch::tensor({0.229f * 255, 0.224f * 255, 0.225f * 255}, opts);
  if (nchw) {
    mean = mean.view({1, 3, 1, 1});
    std = std.view({1, 3, 1, 1});
  }
  return (x - mean) / std;
}

// Batches on a device. On the CPU they are the ring's own tensors (no copy).
// On CUDA the ring is registered as pinned memory once (Loader::
// RegisterPinned, as batchd.algoperf does; unregistered when the feeder
// goes), each batch is copied asynchronously on the current stream, and its
// slot is held until an event recorded after the copy has completed — a
// released slot is overwritten by the server, so the copy must be done
// reading it first.
//
// Thread safety: one thread at a time; `loader` must outlive the feeder.
class DeviceFeeder {
 public:
  DeviceFeeder(Loader& loader, torch::Device device)
      : loader_(loader), device_(device) {
    if (device_.is_cuda()) pinned_ = loader_.RegisterPinned().ok();
  }
  ~DeviceFeeder() {
    Drain(0);
    if (pinned_) loader_.UnregisterPinned().IgnoreError();
  }

  bool pinned() const { return pinned_; }

  absl::StatusOr<std::map<std::string, torch::Tensor>> Next() {
    absl::StatusOr<Batch> batch = loader_.Next();
    if (!batch.ok()) return batch.status();
    if (!device_.is_cuda()) return ToTorch(std::move(*batch));
    std::shared_ptr<SlotLease> lease = batch->lease();
    std::map<std::string, torch::Tensor> host = ToTorch(std::move(*batch));
    std::map<std::string, torch::Tensor> out;
    for (auto& [name, t] : host) out[name] = t.to(device_, /*non_blocking=*/pinned_);
    c10::impl::VirtualGuardImpl impl(c10::DeviceType::CUDA);
    c10::Event done(c10::DeviceType::CUDA);
    done.record(impl.getStream(device_));
    pending_.push_back({std::move(done), std::move(lease), std::move(host)});
    // Keep a slot free for the server: wait for the oldest copies.
    const size_t slots = loader_.info().slots;
    Drain(slots > 2 ? slots - 2 : 0);
    return out;
  }

 private:
  struct Pending {
    c10::Event done;
    std::shared_ptr<SlotLease> lease;
    std::map<std::string, torch::Tensor> host;
  };
  // Lets go of finished copies; waits until at most `keep` are in flight.
  void Drain(size_t keep) {
    while (!pending_.empty() &&
           (pending_.size() > keep || pending_.front().done.query())) {
      while (!pending_.front().done.query()) {
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
      pending_.pop_front();
    }
  }

  Loader& loader_;
  const torch::Device device_;
  bool pinned_ = false;
  std::deque<Pending> pending_;
};

}  // namespace batchd

#endif  // BATCHD_TORCH_H_

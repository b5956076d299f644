// The synthetic workload; see synthetic.h.
#include "workloads/synthetic.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "workloads/counter_rng.h"
#include "workloads/split.h"

namespace batchd {

void SyntheticPayload(const ItemRef& ex, uint8_t* out, uint64_t bytes) {
  // Two words from the example's random stream and the id make an
  // arithmetic sequence: cheap enough (~memory bandwidth) that benchmarks of
  // large slots measure the data plane, not a random number generator.
  ExampleRng rng(ex.seed, ex.epoch, ex.position);
  uint64_t x = Mix64(ex.seed ^ Mix64(ex.id)) ^ rng.NextU64();
  const uint64_t step = rng.NextU64() | 1;
  uint64_t i = 0;
  for (; i + 8 <= bytes; i += 8) {
    memcpy(out + i, &x, 8);
    x += step;
  }
  for (; i < bytes; ++i) out[i] = uint8_t(x >> (8 * (i % 8)));
}

namespace {

class SyntheticWorkload : public Workload {
 public:
  SyntheticWorkload(uint64_t n, uint64_t payload_bytes, bool train)
      : n_(n), payload_bytes_(payload_bytes), train_(train) {
    tensors_ = {{"ids", DType::kUInt64, {}},
                {"epochs", DType::kUInt64, {}},
                {"positions", DType::kUInt64, {}},
                {"payload", DType::kUInt8, {int64_t(payload_bytes)}}};
    if (!train_) tensors_.push_back({"weights", DType::kFloat32, {}});
  }

  uint64_t num_examples() const override { return n_; }
  bool shuffle() const override { return train_; }
  const std::vector<TensorLayout>& tensors() const override {
    return tensors_;
  }

  absl::Status FillItem(FillContext& ctx, uint8_t* const* out) const override {
    const ItemRef& ex = ctx.item();
    const uint64_t id = ex.valid ? ex.id : ~uint64_t(0);
    memcpy(out[0], &id, 8);
    memcpy(out[1], &ex.epoch, 8);
    memcpy(out[2], &ex.position, 8);
    if (ex.valid) {
      SyntheticPayload(ex, out[3], payload_bytes_);
    } else {
      memset(out[3], 0, payload_bytes_);
    }
    if (!train_) {
      const float w = ex.valid ? 1.0f : 0.0f;
      memcpy(out[4], &w, 4);
    }
    return absl::OkStatus();
  }

 private:
  const uint64_t n_;
  const uint64_t payload_bytes_;
  const bool train_;
  std::vector<TensorLayout> tensors_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Workload>> CreateSyntheticWorkload(
    const WorkloadConfig& config) {
  absl::StatusOr<WorkloadOptions> options = WorkloadOptions::Create(
      "synthetic", config.options, {"examples", "payload_bytes"});
  if (!options.ok()) return options.status();
  // No data set comes near 2^40 examples; positions and steps stay far
  // from wrapping.
  absl::StatusOr<uint64_t> n =
      options->Uint("examples", 10000, 0, uint64_t(1) << 40);
  if (!n.ok()) return n.status();
  absl::StatusOr<uint64_t> bytes = options->Uint("payload_bytes", 1024);
  if (!bytes.ok()) return bytes.status();
  if (*n == 0) {
    return absl::InvalidArgumentError("synthetic: examples must be at least 1");
  }
  if (*bytes > (uint64_t(1) << 32)) {
    return absl::InvalidArgumentError(
        absl::StrCat("synthetic: payload_bytes ", *bytes, " exceeds 4 GiB"));
  }
  // "eval" is another spelling of validation (workloads/split.h).
  absl::StatusOr<Split> split = ParseSplit(
      "synthetic", config.split,
      {Split::kTrain, Split::kValidation, Split::kTest});
  if (!split.ok()) return split.status();
  return std::unique_ptr<Workload>(
      new SyntheticWorkload(*n, *bytes, *split == Split::kTrain));
}

}  // namespace batchd

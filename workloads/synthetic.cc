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

absl::StatusOr<std::unique_ptr<Workload>> Create(const WorkloadContext& c) {
  return std::unique_ptr<Workload>(new SyntheticWorkload(
      c.options.Uint("examples"), c.options.Uint("payload_bytes"),
      c.split == Split::kTrain));
}

// No data set comes near 2^40 examples; positions and steps stay far from
// wrapping.
constexpr OptionSpec kOptions[] = {
    UintOption("examples", 10000, 1, uint64_t(1) << 40,
               "N, the examples of every split"),
    UintOption("payload_bytes", 1024, 0, uint64_t(1) << 32,
               "bytes of each example's payload tensor"),
};
// "eval" is another spelling of validation (workloads/split.h).
constexpr Split kSplits[] = {Split::kTrain, Split::kValidation, Split::kTest};

}  // namespace

const WorkloadEntry kSyntheticWorkload = {
    "synthetic",
    "examples that carry their id, epoch and position (tests, benches)",
    kSplits,
    kOptions,
    Create,
    /*reads_files=*/false,
};

}  // namespace batchd

// The wmt workload's eval splits; see wmt_eval.h.
#include "workloads/wmt/wmt_eval.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "workloads/wmt/wmt_constants.h"

namespace batchd {
namespace wmt {
namespace {

// A pair of an eval split, with the drops just before it (to count).
struct EvalPair {
  uint64_t id;
  uint32_t skipped_before = 0;
  uint32_t errors_before = 0;
};

// Tokenizes the pairs of an eval split once, in file order, to know which
// are kept; stops after `limit` kept pairs (eval_train reads only the head
// of train, in blocks, not all of it).
absl::StatusOr<std::vector<EvalPair>> IndexEvalPairs(const PairReader& reader,
                                                     uint64_t limit) {
  const PairSource& source = *reader.source();
  const uint64_t n = source.size();
  const uint64_t block =
      limit == UINT64_MAX ? n : std::max<uint64_t>(4096, limit + limit / 4);
  std::vector<EvalPair> kept;
  uint32_t skipped = 0, errors = 0;
  for (uint64_t lo = 0; lo < n && kept.size() < limit; lo += block) {
    const uint64_t hi = std::min(n, lo + block);
    std::vector<PackedLengths> marks(hi - lo);
    absl::Status s = ParallelFor(
        reader.executor(), Priority::kServing, marks.size(),
        reader.Threads(marks.size()), [&](uint64_t i) {
          TokenPair pair;
          absl::StatusOr<PairFate> fate = reader.LoadPair(lo + i, &pair);
          if (!fate.ok()) return fate.status();
          marks[i] =
              *fate == PairFate::kKept ? PackedLengths{} : DroppedMark(*fate);
          return absl::OkStatus();
        });
    if (!s.ok()) return s;
    for (uint64_t i = 0; i < marks.size() && kept.size() < limit; ++i) {
      if (Dropped(marks[i])) {
        (marks[i].inputs == kDroppedDamaged ? errors : skipped) += 1;
        continue;
      }
      kept.push_back({lo + i, skipped, errors});
      skipped = errors = 0;
    }
  }
  if (kept.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "wmt: no usable pair in ", source.Describe(), " (", n, " dropped)"));
  }
  kept.back().skipped_before += skipped;  // drops after the last pair
  kept.back().errors_before += errors;
  return kept;
}

std::vector<TensorLayout> EvalTensors(const Options& o) {
  const DType t = o.int64 ? DType::kInt64 : DType::kInt32;
  const std::vector<int64_t> shape = {int64_t(o.max_length)};
  return {{"inputs", t, shape},
          {"targets", t, shape},
          {"weights", DType::kFloat32, shape}};
}

class WmtEvalWorkload : public Workload {
 public:
  WmtEvalWorkload(std::shared_ptr<const PairReader> reader,
                  std::vector<EvalPair> pairs)
      : reader_(std::move(reader)),
        pairs_(std::move(pairs)),
        tensors_(EvalTensors(reader_->options())) {}

  uint64_t num_examples() const override { return pairs_.size(); }
  bool shuffle() const override { return false; }
  const std::vector<TensorLayout>& tensors() const override { return tensors_; }
  uint64_t resident_bytes() const override {
    return reader_->tokenizer()->resident_bytes();
  }

  // Stored records (TFDS sources) are read through the context; text lines
  // are read from the source in memory.
  const ExampleSource* source() const override {
    return reader_->source()->has_records() ? &records_ : nullptr;
  }

  absl::Status FillItem(FillContext& ctx, uint8_t* const* out) const override;

 private:
  absl::Status OutOfRange(uint64_t id) const {
    return absl::OutOfRangeError(
        absl::StrCat("wmt: example ", id, " of ", pairs_.size()));
  }
  // `tokens` cut or padded with 0 to max_length.
  void WritePadded(const std::vector<int32_t>& tokens, uint8_t* out) const {
    const size_t n = reader_->options().max_length;
    std::vector<int32_t> row(n, 0);
    std::copy(tokens.begin(), tokens.begin() + std::min(tokens.size(), n),
              row.begin());
    reader_->WriteTokens(row, out);
  }

  // Constant after construction.
  const std::shared_ptr<const PairReader> reader_;
  const std::vector<EvalPair> pairs_;
  const std::vector<TensorLayout> tensors_;
  // The stored record of an eval example (an index of pairs_, as the
  // schedule keys it).
  class Records : public ExampleSource {
   public:
    explicit Records(const WmtEvalWorkload* w) : w_(*w) {}
    absl::Status Read(const ExampleKey& key, std::string* bytes,
                      int64_t* label) const override {
      *label = 0;
      if (key.id >= w_.pairs_.size()) return w_.OutOfRange(key.id);
      return w_.reader_->source()->ReadRecord(w_.pairs_[key.id].id, bytes);
    }
    std::string Describe(const ExampleKey& key) const override {
      const uint64_t id =
          key.id < w_.pairs_.size() ? w_.pairs_[key.id].id : key.id;
      return absl::StrCat("pair ", id, " of ",
                          w_.reader_->source()->Describe());
    }

   private:
    const WmtEvalWorkload& w_;
  };
  const Records records_{this};
};

absl::Status WmtEvalWorkload::FillItem(FillContext& ctx,
                                       uint8_t* const* out) const {
  const ItemRef& ex = ctx.item();
  WorkloadCounters* counters = ctx.counters();
  const size_t n = reader_->options().max_length;
  std::vector<float> weights(n, 0.0f);
  if (!ex.valid) {
    for (int k = 0; k < 2; ++k) memset(out[k], 0, n * reader_->token_bytes());
    memcpy(out[2], weights.data(), 4 * n);
    return absl::OkStatus();
  }
  if (ex.id >= pairs_.size()) return OutOfRange(ex.id);
  const EvalPair& e = pairs_[ex.id];
  TokenPair pair;
  const ExampleKey key = ctx.key();
  absl::StatusOr<PairFate> fate = reader_->LoadPair(e.id, &pair, &ctx, &key);
  if (!fate.ok()) return fate.status();
  if (*fate != PairFate::kKept) return PairChanged(*reader_->source(), e.id);
  if (counters != nullptr) {
    counters->skipped_examples.fetch_add(e.skipped_before,
                                         std::memory_order_relaxed);
    counters->decode_errors.fetch_add(e.errors_before,
                                      std::memory_order_relaxed);
  }
  WritePadded(pair.inputs, out[0]);
  WritePadded(pair.targets, out[1]);
  for (size_t i = 0; i < pair.targets.size() && i < n; ++i) {
    weights[i] = pair.targets[i] > 0 ? 1.0f : 0.0f;
  }
  memcpy(out[2], weights.data(), 4 * n);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Workload>> CreateWmtEvalWorkload(
    std::shared_ptr<const PairReader> reader, Split split) {
  absl::StatusOr<std::vector<EvalPair>> pairs = IndexEvalPairs(
      *reader, split == Split::kEvalTrain ? reader->options().eval_train_examples
                                          : UINT64_MAX);
  if (!pairs.ok()) return pairs.status();
  return std::unique_ptr<Workload>(
      new WmtEvalWorkload(std::move(reader), *std::move(pairs)));
}

}  // namespace wmt
}  // namespace batchd

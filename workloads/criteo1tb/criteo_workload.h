// What the parts of the criteo1tb workload share: its options, tensors,
// the writing of a line, its stored examples (the blocks) and how an item
// reads a block through its context. criteo1tb.cc serves the evaluation
// splits and creates the workload; criteo_train.cc serves train.
#ifndef BATCHD_WORKLOADS_CRITEO1TB_CRITEO_WORKLOAD_H_
#define BATCHD_WORKLOADS_CRITEO1TB_CRITEO_WORKLOAD_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "workloads/criteo1tb/criteo_blocks.h"
#include "workloads/workload.h"

namespace batchd {
namespace criteo {

inline constexpr char kName[] = "criteo1tb";
inline constexpr uint64_t kAlgoPerfEvalTrain = 83279872;
// Blocks parsed and kept per stream beyond the window being served.
inline constexpr size_t kSpareBlocks = 16;
// Blocks counted between two stores of the counts in the daemon's cache.
inline constexpr uint64_t kStoreEvery = 8192;

// What the options set (their defaults and bounds: the entry's table, in
// criteo1tb.cc).
struct Options {
  bool exact_ids = false;
  uint64_t block_bytes = 0;
  uint64_t window_blocks = 0;
  uint64_t max_line = 0;
  uint64_t eval_train = 0;
};

std::vector<TensorLayout> Tensors(const Options& o);

// Writes line `j` of `block` (zeros with weight 0 when damaged or null).
void WriteLine(const ParsedBlock* block, uint64_t j, bool exact_ids,
               uint8_t* const* out, WorkloadCounters* counters);

// The stored examples: one entry per block, its bytes (BlockTable::ReadBlock).
class Blocks : public ExampleSource {
 public:
  explicit Blocks(std::shared_ptr<const BlockTable> table)
      : table_(std::move(table)) {}
  absl::Status Read(const ExampleKey& key, std::string* bytes,
                    int64_t* label) const override {
    *label = 0;
    return table_->ReadBlock(key.id, bytes);
  }
  std::string Describe(const ExampleKey& key) const override {
    return key.id < table_->num_blocks() ? table_->Describe(key.id)
                                         : absl::StrCat("block ", key.id);
  }

 private:
  const std::shared_ptr<const BlockTable> table_;
};

// A line of `block` through the parse cache: a block not parsed is read
// under `key` through the item's context (the pending rule: its status is
// returned unchanged). The item named in the schedule's ExamplesOf for the
// block (`reader`) reads it even when it is parsed already, so that what
// was read ahead for it is taken and freed.
absl::StatusOr<std::shared_ptr<const ParsedBlock>> BlockOf(
    const BlockCache& cache, FillContext& ctx, const ExampleKey& key,
    bool reader);

// The train split's workload (criteo_train.cc).
std::unique_ptr<Workload> MakeTrainWorkload(
    const Options& o, std::shared_ptr<BlockTable> table, Executor* pool,
    std::shared_ptr<const CacheDir> cache);

}  // namespace criteo
}  // namespace batchd

#endif  // BATCHD_WORKLOADS_CRITEO1TB_CRITEO_WORKLOAD_H_

// What the wmt workload's train and eval halves share: the options, the
// one pair source and the one tokenizer of a stream, and the read of one
// pair (from the source, or from what the server read ahead) through the
// tokenizer. Also how token ids are written into a slot (int32 or int64).
//
// Thread safety: immutable after Create; every method may be called from
// any number of threads at once.
#ifndef BATCHD_WORKLOADS_WMT_PAIR_READER_H_
#define BATCHD_WORKLOADS_WMT_PAIR_READER_H_

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "base/executor.h"
#include "workloads/wmt/pair_source.h"
#include "workloads/wmt/tokenizer.h"
#include "workloads/wmt/wmt_options.h"
#include "workloads/workload.h"
#include "workloads/workload_entry.h"

namespace batchd {
namespace wmt {

class PairReader {
 public:
  // The model checked and loaded (shared with the daemon's other streams
  // of the same bytes, charged to their budget), the pair source of
  // `files` ("train" for eval_train) opened; FailedPrecondition when it
  // holds no pairs. Files are opened through c.root.
  static absl::StatusOr<std::shared_ptr<const PairReader>> Create(
      const WorkloadContext& c, const Options& options,
      absl::string_view files);

  const Options& options() const { return options_; }
  const std::shared_ptr<const PairSource>& source() const { return source_; }
  const std::shared_ptr<const Tokenizer>& tokenizer() const {
    return tokenizer_;
  }
  // Borrowed; outlives the reader (WorkloadConfig::executor).
  Executor* executor() const { return executor_; }

  // Reads and tokenizes pair `id`. Damaged records are a fate, not an
  // error; I/O failures are errors. With `ctx` and `key` (the pair's key in
  // the stream) a stored record is read through the context, whose errors
  // are those of the source's own read and which follows the pending rule
  // (workloads/fill_context.h); text lines are read from the source.
  absl::StatusOr<PairFate> LoadPair(uint64_t id, TokenPair* pair,
                                    FillContext* ctx = nullptr,
                                    const ExampleKey* key = nullptr) const;

  // Up to index_threads of the executor's threads for `n` pairs.
  uint64_t Threads(uint64_t n) const {
    return std::max<uint64_t>(
        1, std::min<uint64_t>(options_.index_threads, n / 64 + 1));
  }

  // Bytes of one token id in a slot (4 or 8).
  size_t token_bytes() const { return options_.int64 ? 8 : 4; }
  // Writes `v` as the tensors' dtype at `out`.
  void WriteTokens(const std::vector<int32_t>& v, uint8_t* out) const;

 private:
  PairReader(const Options& options, std::shared_ptr<const Tokenizer> tokenizer,
             std::shared_ptr<const PairSource> source, Executor* executor)
      : options_(options),
        tokenizer_(std::move(tokenizer)),
        source_(std::move(source)),
        executor_(executor) {}

  const Options options_;
  const std::shared_ptr<const Tokenizer> tokenizer_;
  const std::shared_ptr<const PairSource> source_;
  Executor* const executor_;
};

// The fate of a pair whose read returned `read` with `de` and `en`: a
// damaged record (DataLoss, InvalidArgument) is kDamaged, any other read
// error is returned, else Tokenizer::TokenizePair's filters decide.
absl::StatusOr<PairFate> TokenizeRead(const absl::Status& read,
                                      std::string_view de, std::string_view en,
                                      const Tokenizer& tokenizer,
                                      size_t max_length, bool skip_empty,
                                      InvalidUtf8 invalid_utf8,
                                      TokenPair* pair);

// "pair `id` of <source> changed since it was indexed" (DataLoss).
absl::Status PairChanged(const PairSource& source, uint64_t id);

}  // namespace wmt
}  // namespace batchd

#endif  // BATCHD_WORKLOADS_WMT_PAIR_READER_H_

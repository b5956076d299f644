// The wmt workload's options (wmt.h lists them with their defaults), parsed
// and bounded once, and the SentencePiece model's path, confined to the
// data path.
//
// Thread safety: Options is a value; the functions are pure (ModelPath
// reads the file system).
#ifndef BATCHD_WORKLOADS_WMT_WMT_OPTIONS_H_
#define BATCHD_WORKLOADS_WMT_WMT_OPTIONS_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "workloads/wmt/tokenizer.h"
#include "workloads/workload.h"

namespace batchd {

class DataRoot;  // storage/data_file.h
namespace wmt {

// The largest index_threads asked (more means all the daemon's threads),
// and eval_train pairs (AlgoPerf's eval_train has 3072).
constexpr uint64_t kMaxIndexThreads = uint64_t(1) << 20;
constexpr uint64_t kMaxEvalTrainExamples = uint64_t(1) << 24;

struct Options {
  // The SentencePiece model, relative to the data path.
  // Default: wmt_sentencepiece_model.
  std::string vocab = "wmt_sentencepiece_model";
  // auto, tfds or text. Default: auto.
  std::string source = "auto";
  // Token tensors are int64 (else int32). Default: false.
  bool int64 = false;
  // Row length, length filter and packing window, 1 to kMaxLength.
  // Default: 256.
  uint64_t max_length = 256;
  // Drop pairs with an empty side. Default: false.
  bool skip_empty = false;
  // The daemon's indexing threads one stream may use; parsed 0 ("all")
  // becomes kMaxIndexThreads. Default: kMaxIndexThreads.
  uint64_t index_threads = kMaxIndexThreads;
  // eval_train: how many kept train pairs it serves (AlgoPerf's wmt
  // num_eval_train_examples: 3000 validation pairs rounded up to 128).
  // Default: 3072.
  uint64_t eval_train_examples = 3072;
  // What becomes of a pair with malformed UTF-8. Default: kEncode.
  InvalidUtf8 invalid_utf8 = InvalidUtf8::kEncode;

  // "drop" or "encode", as the option spells it (the cache key uses it).
  const char* invalid_utf8_name() const {
    return invalid_utf8 == InvalidUtf8::kDrop ? "drop" : "encode";
  }
};

// The options of `config`: InvalidArgument naming the option and its
// bounds for an unknown key or a value out of range.
absl::StatusOr<Options> ParseOptions(const WorkloadConfig& config);

// The model path: `vocab` relative to the data directory `data` and inside
// it, symlinks resolved, since the data directory is what the server
// confines. A missing file is left for Tokenizer::Load to report. With
// `root` of a restricted reader, links are resolved with its permissions
// (nothing is learnt through a directory it cannot search).
absl::StatusOr<std::string> ModelPath(const std::string& data,
                                      const std::string& vocab,
                                      const DataRoot* root = nullptr);

}  // namespace wmt
}  // namespace batchd

#endif  // BATCHD_WORKLOADS_WMT_WMT_OPTIONS_H_

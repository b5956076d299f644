// The wmt workload's options as its parts use them (their table, with
// defaults and bounds, is kWmtWorkload's in wmt.cc; wmt.h says what each
// does), and the SentencePiece model's path, confined to the data path.
//
// Thread safety: Options is a value; the functions are pure (ModelPath
// reads the file system).
#ifndef BATCHD_WORKLOADS_WMT_WMT_OPTIONS_H_
#define BATCHD_WORKLOADS_WMT_WMT_OPTIONS_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "workloads/options.h"
#include "workloads/wmt/tokenizer.h"
#include "workloads/workload.h"

namespace batchd {

class DataRoot;  // storage/data_file.h
namespace wmt {

struct Options {
  // The SentencePiece model, relative to the data path.
  std::string vocab;
  // auto, tfds or text.
  std::string source;
  // Token tensors are int64 (else int32).
  bool int64 = false;
  // Row length, length filter and packing window, 1 to kMaxLength.
  uint64_t max_length = 0;
  // Drop pairs with an empty side.
  bool skip_empty = false;
  // The daemon's indexing threads one stream may use; the option's 0
  // ("all") is kMaxIndexThreads.
  uint64_t index_threads = 0;
  // eval_train: how many kept train pairs it serves.
  uint64_t eval_train_examples = 0;
  // What becomes of a pair with malformed UTF-8.
  InvalidUtf8 invalid_utf8 = InvalidUtf8::kEncode;

  // "drop" or "encode", as the option spells it (the cache key uses it).
  const char* invalid_utf8_name() const {
    return invalid_utf8 == InvalidUtf8::kDrop ? "drop" : "encode";
  }
};

// The options of a stream, parsed against the entry's table.
Options OptionsOf(const OptionValues& values);

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

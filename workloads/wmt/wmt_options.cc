// The wmt workload's options; see wmt_options.h.
#include "workloads/wmt/wmt_options.h"

#include <limits.h>
#include <stdlib.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/paths.h"
#include "storage/data_file.h"
#include "workloads/options.h"
#include "workloads/wmt/wmt_constants.h"

namespace batchd {
namespace wmt {

absl::StatusOr<Options> ParseOptions(const WorkloadConfig& config) {
  absl::StatusOr<WorkloadOptions> opts = WorkloadOptions::Create(
      "wmt", config.options,
      {"vocab", "source", "dtype", "max_length", "skip_empty", "index_threads",
       "eval_train_examples", "invalid_utf8"});
  if (!opts.ok()) return opts.status();
  Options o;
  o.vocab = opts->String("vocab", o.vocab);
  o.source = opts->String("source", o.source);
  absl::StatusOr<std::string> dtype =
      opts->Choice("dtype", "int32", {"int32", "int64"});
  if (!dtype.ok()) return dtype.status();
  o.int64 = *dtype == "int64";
  absl::StatusOr<uint64_t> v = opts->Uint("max_length", 256, 1, kMaxLength);
  if (!v.ok()) return v.status();
  o.max_length = *v;
  v = opts->Uint("skip_empty", 0, 0, 1);
  if (!v.ok()) return v.status();
  o.skip_empty = *v == 1;
  // A bound on one stream's share of the daemon's threads, never a count
  // of threads to start: more than the executor has means all of them.
  v = opts->Uint("index_threads", 0, 0, kMaxIndexThreads);
  if (!v.ok()) return v.status();
  o.index_threads = *v == 0 ? kMaxIndexThreads : *v;
  v = opts->Uint("eval_train_examples", o.eval_train_examples, 1,
                 kMaxEvalTrainExamples);
  if (!v.ok()) return v.status();
  o.eval_train_examples = *v;
  absl::StatusOr<std::string> invalid_utf8 =
      opts->Choice("invalid_utf8", "encode", {"encode", "drop"});
  if (!invalid_utf8.ok()) return invalid_utf8.status();
  o.invalid_utf8 =
      *invalid_utf8 == "drop" ? InvalidUtf8::kDrop : InvalidUtf8::kEncode;
  return o;
}

absl::StatusOr<std::string> ModelPath(const std::string& data,
                                      const std::string& vocab,
                                      const DataRoot* root) {
  if (vocab.empty() || vocab[0] == '/') {
    return absl::InvalidArgumentError(absl::StrCat(
        "wmt: vocab='", vocab, "' must be a path relative to the data path"));
  }
  for (absl::string_view part : absl::StrSplit(vocab, '/')) {
    if (part == "..") {
      return absl::InvalidArgumentError(
          absl::StrCat("wmt: vocab='", vocab, "' leaves the data path ('..')"));
    }
  }
  const std::string path = data + "/" + vocab;
  std::string d, m;
  char resolved_data[PATH_MAX], resolved_model[PATH_MAX];
  if (root != nullptr && root->access().restricted()) {
    absl::StatusOr<std::string> rd = root->Resolve(data);
    absl::StatusOr<std::string> rm = root->Resolve(path);
    if (rd.ok() && rm.ok()) d = *rd, m = *rm;
  } else if (realpath(data.c_str(), resolved_data) != nullptr &&
             realpath(path.c_str(), resolved_model) != nullptr) {
    d = resolved_data;
    m = resolved_model;
  }
  if (!d.empty()) {
    if (m == d || !PathIsWithin(m, d)) {
      return absl::InvalidArgumentError(
          absl::StrCat("wmt: the SentencePiece model ", path, " resolves to ",
                       m, ", outside the data path ", d));
    }
  }
  return path;  // a missing file is reported by Tokenizer::Load
}

}  // namespace wmt
}  // namespace batchd

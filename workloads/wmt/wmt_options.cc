// The wmt workload's options; see wmt_options.h.
#include "workloads/wmt/wmt_options.h"

#include <limits.h>
#include <stdlib.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/paths.h"
#include "storage/data_file.h"
#include "workloads/wmt/wmt_constants.h"
#include "workloads/workload_entry.h"

namespace batchd {
namespace wmt {

Options OptionsOf(const OptionValues& v) {
  Options o;
  o.vocab = v.Text("vocab");
  o.source = v.Text("source");
  o.int64 = v.Text("dtype") == "int64";
  o.max_length = v.Uint("max_length");
  o.skip_empty = v.Uint("skip_empty") == 1;
  // A bound on one stream's share of the daemon's threads, never a count
  // of threads to start: more than the executor has means all of them.
  o.index_threads =
      v.Uint("index_threads") == 0 ? kMaxIndexThreads : v.Uint("index_threads");
  o.eval_train_examples = v.Uint("eval_train_examples");
  o.invalid_utf8 = v.Text("invalid_utf8") == "drop" ? InvalidUtf8::kDrop
                                                    : InvalidUtf8::kEncode;
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

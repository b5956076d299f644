// One stream's pair source and tokenizer; see pair_reader.h.
#include "workloads/wmt/pair_reader.h"

#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "storage/data_file.h"

namespace batchd {
namespace wmt {

absl::StatusOr<std::shared_ptr<const PairReader>> PairReader::Create(
    const WorkloadConfig& config, const Options& options,
    absl::string_view files) {
  // Every file is opened through the server's data root: symlinks may
  // point anywhere inside it, never out (storage/data_file.h),
  // with the reader's permissions.
  absl::StatusOr<std::shared_ptr<const DataRoot>> root = config.OpenDataRoot();
  if (!root.ok()) return root.status();
  absl::StatusOr<std::string> model_path =
      ModelPath(config.data_path, options.vocab, root->get());
  if (!model_path.ok()) return model_path.status();
  Executor* executor = config.pool();
  // Checked before SentencePiece sees it, loaded on the executor, shared
  // with the daemon's other streams of the same model and charged to the
  // budget of loaded models.
  absl::StatusOr<std::shared_ptr<const Tokenizer>> tokenizer =
      Tokenizer::LoadShared(*model_path, **root,
                            Tokenizer::LoadOptions{config.shared, executor});
  if (!tokenizer.ok()) {
    return absl::Status(tokenizer.status().code(),
                        absl::StrCat("wmt: ", tokenizer.status().message()));
  }
  PairSourceOptions source_options{*root, kDefaultMaxFileBytes, config.cache};
  source_options.executor = executor;
  absl::StatusOr<std::unique_ptr<PairSource>> source = OpenPairSource(
      config.data_path, std::string(files), options.source, source_options);
  if (!source.ok()) return source.status();
  if ((*source)->size() == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("wmt: ", (*source)->Describe(), " holds no pairs"));
  }
  return std::shared_ptr<const PairReader>(
      new PairReader(options, *std::move(tokenizer),
                     std::shared_ptr<const PairSource>(*std::move(source)),
                     executor));
}

absl::StatusOr<PairFate> PairReader::LoadPair(uint64_t id, TokenPair* pair,
                                              FillContext* ctx,
                                              const ExampleKey* key) const {
  std::string de, en;
  absl::Status s;
  if (key != nullptr && ctx != nullptr && source_->has_records()) {
    std::string bytes;
    int64_t label = 0;
    s = ctx->Read(*key, &bytes, &label);
    if (s.ok()) s = source_->ParseRecord(id, bytes, &de, &en);
  } else {
    s = source_->Read(id, &de, &en);
  }
  return TokenizeRead(s, de, en, *tokenizer_, options_.max_length,
                      options_.skip_empty, options_.invalid_utf8, pair);
}

absl::StatusOr<PairFate> TokenizeRead(const absl::Status& read,
                                      std::string_view de, std::string_view en,
                                      const Tokenizer& tokenizer,
                                      size_t max_length, bool skip_empty,
                                      InvalidUtf8 invalid_utf8,
                                      TokenPair* pair) {
  if (read.code() == absl::StatusCode::kDataLoss ||
      read.code() == absl::StatusCode::kInvalidArgument) {
    return PairFate::kDamaged;
  }
  if (!read.ok()) return read;
  return tokenizer.TokenizePair(de, en, max_length, skip_empty, pair,
                                invalid_utf8);
}

void PairReader::WriteTokens(const std::vector<int32_t>& v,
                             uint8_t* out) const {
  if (options_.int64) {
    for (size_t i = 0; i < v.size(); ++i) {
      const int64_t x = v[i];
      memcpy(out + 8 * i, &x, 8);
    }
  } else {
    memcpy(out, v.data(), 4 * v.size());
  }
}

absl::Status PairChanged(const PairSource& source, uint64_t id) {
  return absl::DataLossError(absl::StrCat("wmt: pair ", id, " of ",
                                          source.Describe(),
                                          " changed since it was indexed"));
}

}  // namespace wmt
}  // namespace batchd

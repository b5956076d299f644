// Turns one WMT pair into token ids the way AlgoPerf does: SentencePiece
// (add_bos = false, add_eos = true), then drop the pair when either side is
// longer than max_length.
//
// Thread safety: immutable after Load; any number of threads may call
// Tokenize at once.
#ifndef BATCHD_WORKLOADS_WMT_TOKENIZER_H_
#define BATCHD_WORKLOADS_WMT_TOKENIZER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "workloads/wmt/packing.h"

namespace batchd {
namespace wmt {

class SentencePieceModel;

// What became of a pair.
enum class PairFate : uint8_t {
  kKept,
  kTooLong,  // a side over max_length tokens (AlgoPerf's filter)
  kEmpty,    // a side is empty text (dropped only when asked)
  kDamaged,  // invalid UTF-8 (readers count it as a decode error)
};

class Tokenizer {
 public:
  // NotFound naming the path when the file is missing; InvalidArgument when
  // SentencePiece cannot load it or it has no EOS piece.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> Load(
      const std::string& model_path);
  ~Tokenizer();

  int vocab_size() const;
  int eos_id() const;

  // Ids of `text` with EOS appended. InvalidArgument for invalid UTF-8 (the
  // message gives the byte offset) or a SentencePiece failure.
  absl::Status Encode(std::string_view text, std::vector<int32_t>* ids) const;

  // Encodes both sides and applies the filters. *pair is filled for kKept.
  absl::StatusOr<PairFate> TokenizePair(std::string_view de,
                                        std::string_view en, size_t max_length,
                                        bool skip_empty, TokenPair* pair) const;

 private:
  explicit Tokenizer(std::unique_ptr<SentencePieceModel> model);
  absl::Status EncodeValidUtf8(std::string_view text,
                               std::vector<int32_t>* ids) const;
  const std::unique_ptr<SentencePieceModel> model_;
};

// The offset of the first byte that is not well-formed UTF-8 (overlong
// forms, surrogates and code points past U+10FFFF are not), or npos.
size_t FirstInvalidUtf8(std::string_view s);

}  // namespace wmt
}  // namespace batchd

#endif  // BATCHD_WORKLOADS_WMT_TOKENIZER_H_

// Turns one WMT pair into token ids the way AlgoPerf does: SentencePiece
// (add_bos = false, add_eos = true), then drop the pair when either side is
// longer than max_length.
//
// Thread safety: immutable after Load; any number of threads may call
// Tokenize at once.
#ifndef BATCHD_WORKLOADS_WMT_TOKENIZER_H_
#define BATCHD_WORKLOADS_WMT_TOKENIZER_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"
#include "workloads/common/data_file.h"
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
  // The same, the file opened through `root` (confined to the data root,
  // regular file, non-blocking) and at most kMaxModelBytes.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> Load(
      const std::string& model_path, const DataRoot& root);
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
  // The pieces of one space-free word as SentencePiece encodes it alone
  // ("▁word"), from the cache or the model.
  bool EncodeWord(std::string_view word, std::vector<int32_t>* ids,
                  std::string* error) const;
  const std::unique_ptr<SentencePieceModel> model_;

  // Word cache. With SentencePiece's default split_by_whitespace no piece
  // spans a space, so a sentence's pieces are its words' pieces in order:
  // each distinct word is encoded once. Whether the model behaves so is
  // checked on the first kChecks sentences (cached and whole encodings
  // compared); one difference turns the cache off for good.
  static constexpr int kShards = 64;
  static constexpr size_t kMaxWordsPerShard = 1 << 15;
  static constexpr int kChecks = 256;
  struct Shard {
    std::mutex mu;
    std::unordered_map<std::string, std::vector<int32_t>> words;
  };
  mutable Shard shards_[kShards];
  mutable std::atomic<int> checks_left_{kChecks};
  mutable std::atomic<bool> cache_on_{true};
};

// The offset of the first byte that is not well-formed UTF-8 (overlong
// forms, surrogates and code points past U+10FFFF are not), or npos.
size_t FirstInvalidUtf8(std::string_view s);

}  // namespace wmt
}  // namespace batchd

#endif  // BATCHD_WORKLOADS_WMT_TOKENIZER_H_

// What a SentencePiece model file says about its pieces and its normaliser,
// read from the file's bytes (a serialized ModelProto, SentencePiece's
// src/sentencepiece_model.proto) without SentencePiece.
//
// Why: the tokenizer's word cache (tokenizer.h) is exact only for models
// with certain properties (a unigram model, no piece with a space inside,
// no normalisation rule that looks across a space, ...), and SentencePiece's
// public API (0.1.97) exposes neither the normaliser spec nor its rules.
// And a model is checked here before SentencePiece sees it (ModelLimits): a
// model file is hostile input, and SentencePiece trusts it (its trie
// builder recurses once per byte of a piece, so one 8 MiB piece overflows a
// thread's stack; millions of pieces take gigabytes).
//
// Thread safety: a plain value; const methods may be called from any number
// of threads.
#ifndef BATCHD_WORKLOADS_WMT_SENTENCEPIECE_VOCAB_H_
#define BATCHD_WORKLOADS_WMT_SENTENCEPIECE_VOCAB_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace batchd {
namespace wmt {

// What a model may hold. AlgoPerf's WMT model has 32,000 pieces of at
// most 16 characters in 0.8 MB; the limits leave a wide margin for real
// models (large multilingual ones have 250,000 pieces in 5 MB) and none
// for what only an attacker writes.
struct ModelLimits {
  // Bytes of the model file. Default: 16 MiB.
  uint64_t max_file_bytes = uint64_t(16) << 20;
  // Pieces of the vocabulary. Default: 1,048,576.
  uint64_t max_pieces = uint64_t(1) << 20;
  // Bytes of one piece's text (SentencePiece's trie recurses once per
  // byte). Default: 1024.
  uint64_t max_piece_bytes = 1024;
};

struct SentencePieceVocab {
  // ModelProto.SentencePiece.Type.
  enum PieceType : int {
    kNormal = 1,
    kUnknown = 2,
    kControl = 3,
    kUserDefined = 4,
    kUnused = 5,
    kByte = 6,
  };
  struct Piece {
    std::string text;
    float score = 0;
    int type = kNormal;
  };
  std::vector<Piece> pieces;  // index = id

  // TrainerSpec.
  int model_type = 1;  // 1 unigram, 2 bpe, 3 word, 4 char
  bool treat_whitespace_as_suffix = false;
  // NormalizerSpec; proto defaults when the field is absent.
  std::string normalizer_name;
  std::string precompiled_charsmap;
  bool add_dummy_prefix = true;
  bool remove_extra_whitespaces = true;
  bool escape_whitespaces = true;

  // InvalidArgument naming the field when `model` is not a ModelProto, and
  // naming the piece, its size and the limit when it holds more than
  // `limits` allow (checked as it is read: an oversized model is refused
  // before it takes memory).
  static absl::StatusOr<SentencePieceVocab> Parse(
      std::string_view model, const ModelLimits& limits = ModelLimits());
};

// The keys of a precompiled character map (NormalizerSpec's
// precompiled_charsmap: a uint32 trie size, a Darts-clone double array,
// the replacement strings), as far as the word cache needs them.
struct CharsmapKeys {
  uint64_t keys = 0;           // rules in the map
  bool byte_in_key[256] = {};  // whether some key holds this byte
};

// InvalidArgument when the blob is not a well-formed charsmap. An empty
// blob is the identity map (no keys).
absl::StatusOr<CharsmapKeys> ScanCharsmap(std::string_view charsmap);

}  // namespace wmt
}  // namespace batchd

#endif  // BATCHD_WORKLOADS_WMT_SENTENCEPIECE_VOCAB_H_

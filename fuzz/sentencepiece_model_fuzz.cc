// libFuzzer target for the SentencePiece model check, the wire reader that
// sees a model file before SentencePiece does (sentencepiece_vocab.h): any
// bytes give a vocabulary or an InvalidArgument, never a crash, and what is
// accepted is within the limits it claims (pieces, bytes a piece, file
// bytes), under the default limits and tight ones alike. Its precompiled
// charsmap is scanned too (a trie of the file's bytes). A model accepted
// under the default limits is then handed to SentencePiece itself
// (Tokenizer::FromBytes), which must load it or refuse it, not crash: the
// check is what stands between hostile files and SentencePiece.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz/fuzz_util.h"
#include "workloads/wmt/sentencepiece_vocab.h"
#include "workloads/wmt/tokenizer.h"

namespace {

void CheckWithin(const batchd::wmt::SentencePieceVocab& v,
                 const batchd::wmt::ModelLimits& limits) {
  if (v.pieces.size() > limits.max_pieces) {
    batchd::fuzz::Fail("more pieces accepted than the limit");
  }
  for (const auto& p : v.pieces) {
    if (p.text.size() > limits.max_piece_bytes) {
      batchd::fuzz::Fail("a piece over the limit accepted");
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  batchd::wmt::ModelLimits tight;
  tight.max_file_bytes = 1 << 14;
  tight.max_pieces = 8;
  tight.max_piece_bytes = 4;
  for (const batchd::wmt::ModelLimits& limits :
       {batchd::wmt::ModelLimits(), tight}) {
    absl::StatusOr<batchd::wmt::SentencePieceVocab> v =
        batchd::wmt::SentencePieceVocab::Parse(bytes, limits);
    if (!v.ok()) {
      if (!absl::IsInvalidArgument(v.status())) {
        batchd::fuzz::Fail("a refusal that is not InvalidArgument");
      }
      continue;
    }
    if (bytes.size() > limits.max_file_bytes) {
      batchd::fuzz::Fail("a file over the limit accepted");
    }
    CheckWithin(*v, limits);
    (void)batchd::wmt::ScanCharsmap(v->precompiled_charsmap);
  }
  // What passes the check is SentencePiece's to load or refuse.
  (void)batchd::wmt::Tokenizer::FromBytes(std::string(bytes), "fuzz input",
                                          nullptr, nullptr);
  return 0;
}

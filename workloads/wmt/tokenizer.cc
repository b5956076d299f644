// SentencePiece tokenization of WMT pairs; see tokenizer.h.
#include "workloads/wmt/tokenizer.h"

#include <sys/stat.h>

#include "absl/strings/str_cat.h"
#include "workloads/wmt/sentencepiece_model.h"

namespace batchd {
namespace wmt {

size_t FirstInvalidUtf8(std::string_view s) {
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    const uint8_t c = p[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len;
    uint32_t cp;
    if (c >= 0xc2 && c <= 0xdf) {
      len = 2, cp = c & 0x1f;
    } else if (c >= 0xe0 && c <= 0xef) {
      len = 3, cp = c & 0x0f;
    } else if (c >= 0xf0 && c <= 0xf4) {
      len = 4, cp = c & 0x07;
    } else {
      return i;  // a continuation byte, 0xc0/0xc1 or 0xf5..0xff
    }
    if (n - i < len) return i;
    for (size_t k = 1; k < len; ++k) {
      if ((p[i + k] & 0xc0) != 0x80) return i;
      cp = (cp << 6) | (p[i + k] & 0x3f);
    }
    if ((len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
        (cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff) {
      return i;
    }
    i += len;
  }
  return std::string_view::npos;
}

Tokenizer::Tokenizer(std::unique_ptr<SentencePieceModel> model)
    : model_(std::move(model)) {}

Tokenizer::~Tokenizer() = default;

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::Load(
    const std::string& model_path) {
  struct stat st;
  if (stat(model_path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
    return absl::NotFoundError(
        absl::StrCat("SentencePiece model ", model_path, " not found"));
  }
  std::string error;
  std::unique_ptr<SentencePieceModel> m =
      SentencePieceModel::Load(model_path, &error);
  if (m == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot load SentencePiece model ", model_path, ": ", error));
  }
  if (m->eos_id() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "SentencePiece model ", model_path,
        " has no EOS piece (train it with the default ids: eos_id=2)"));
  }
  return std::unique_ptr<Tokenizer>(new Tokenizer(std::move(m)));
}

int Tokenizer::vocab_size() const { return model_->vocab_size(); }
int Tokenizer::eos_id() const { return model_->eos_id(); }

absl::Status Tokenizer::Encode(std::string_view text,
                               std::vector<int32_t>* ids) const {
  const size_t bad = FirstInvalidUtf8(text);
  if (bad != std::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid UTF-8 at byte ", bad));
  }
  return EncodeValidUtf8(text, ids);
}

absl::Status Tokenizer::EncodeValidUtf8(std::string_view text,
                                        std::vector<int32_t>* ids) const {
  std::vector<int> pieces;
  std::string error;
  if (!model_->Encode(text, &pieces, &error)) {
    return absl::InvalidArgumentError(
        absl::StrCat("SentencePiece cannot encode the text: ", error));
  }
  ids->assign(pieces.begin(), pieces.end());
  ids->push_back(model_->eos_id());
  return absl::OkStatus();
}

absl::StatusOr<PairFate> Tokenizer::TokenizePair(std::string_view de,
                                                 std::string_view en,
                                                 size_t max_length,
                                                 bool skip_empty,
                                                 TokenPair* pair) const {
  if (FirstInvalidUtf8(de) != std::string_view::npos ||
      FirstInvalidUtf8(en) != std::string_view::npos) {
    return PairFate::kDamaged;
  }
  if (skip_empty && (de.empty() || en.empty())) return PairFate::kEmpty;
  absl::Status s = EncodeValidUtf8(de, &pair->inputs);
  if (s.ok()) s = EncodeValidUtf8(en, &pair->targets);
  if (!s.ok()) return s;
  if (pair->inputs.size() > max_length || pair->targets.size() > max_length) {
    return PairFate::kTooLong;
  }
  return PairFate::kKept;
}

}  // namespace wmt
}  // namespace batchd

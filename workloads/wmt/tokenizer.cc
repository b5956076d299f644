// SentencePiece tokenization of WMT pairs; see tokenizer.h.
#include "workloads/wmt/tokenizer.h"

#include <sys/stat.h>
#include <unistd.h>

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

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::Load(
    const std::string& model_path, const DataRoot& root) {
  // A 32 000-piece model is under 1 MiB; 64 MiB refuses only what is not one
  // (SentencePiece would read a sparse giant whole).
  constexpr uint64_t kMaxModelBytes = uint64_t(64) << 20;
  struct stat st;
  absl::StatusOr<int> fd = root.OpenFile(model_path, &st);
  if (!fd.ok()) {
    if (absl::IsNotFound(fd.status())) {
      return absl::NotFoundError(
          absl::StrCat("SentencePiece model ", model_path, " not found"));
    }
    return absl::Status(
        fd.status().code(),
        absl::StrCat("SentencePiece model: ", fd.status().message()));
  }
  if (uint64_t(st.st_size) > kMaxModelBytes) {
    close(*fd);
    return absl::InvalidArgumentError(absl::StrCat(
        "SentencePiece model ", model_path, " is ", uint64_t(st.st_size),
        " bytes, over the limit of ", kMaxModelBytes));
  }
  // SentencePiece opens by name: give it the descriptor already checked, so
  // that no link swapped in after the check is followed.
  absl::StatusOr<std::unique_ptr<Tokenizer>> t =
      Load(absl::StrCat("/proc/self/fd/", *fd));
  close(*fd);
  if (!t.ok()) {
    return absl::Status(t.status().code(), absl::StrCat(t.status().message(),
                                                        " (", model_path, ")"));
  }
  return t;
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

bool Tokenizer::EncodeWord(std::string_view word, std::vector<int32_t>* ids,
                           std::string* error) const {
  Shard& shard = shards_[std::hash<std::string_view>()(word) % kShards];
  {
    std::lock_guard<std::mutex> lock(shard.mu);
    auto it = shard.words.find(std::string(word));
    if (it != shard.words.end()) {
      ids->insert(ids->end(), it->second.begin(), it->second.end());
      return true;
    }
  }
  std::vector<int> pieces;
  if (!model_->Encode(word, &pieces, error)) return false;
  ids->insert(ids->end(), pieces.begin(), pieces.end());
  std::lock_guard<std::mutex> lock(shard.mu);
  if (shard.words.size() < kMaxWordsPerShard) {
    shard.words.emplace(std::string(word),
                        std::vector<int32_t>(pieces.begin(), pieces.end()));
  }
  return true;
}

absl::Status Tokenizer::EncodeValidUtf8(std::string_view text,
                                        std::vector<int32_t>* ids) const {
  std::string error;
  auto whole = [&](std::vector<int32_t>* out) {
    std::vector<int> pieces;
    if (!model_->Encode(text, &pieces, &error)) return false;
    out->assign(pieces.begin(), pieces.end());
    return true;
  };
  bool ok;
  if (cache_on_.load(std::memory_order_relaxed)) {
    // Words split at ASCII spaces; SentencePiece's normaliser drops the
    // spaces themselves (and turns other whitespace into them, inside a
    // "word", which then encodes alone exactly as in the sentence).
    ids->clear();
    ok = true;
    size_t i = 0;
    while (ok && i < text.size()) {
      while (i < text.size() && text[i] == ' ') ++i;
      size_t j = i;
      while (j < text.size() && text[j] != ' ') ++j;
      if (j > i) ok = EncodeWord(text.substr(i, j - i), ids, &error);
      i = j;
    }
    if (ok && checks_left_.load(std::memory_order_relaxed) > 0 &&
        checks_left_.fetch_sub(1, std::memory_order_relaxed) > 0) {
      std::vector<int32_t> reference;
      if (whole(&reference) && reference != *ids) {
        cache_on_.store(false, std::memory_order_relaxed);
        *ids = std::move(reference);
      }
    }
  } else {
    ok = whole(ids);
  }
  if (!ok) {
    return absl::InvalidArgumentError(
        absl::StrCat("SentencePiece cannot encode the text: ", error));
  }
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

// SentencePiece tokenization of WMT pairs; see tokenizer.h.
//
// Why the word cache is exact
// ---------------------------
// Whole-sentence SentencePiece costs ~5x the rest of the pipeline, so each
// distinct word (text between ASCII spaces) is encoded once and its ids are
// reused, but only where that provably gives the ids of the whole sentence.
// The argument follows SentencePiece 0.1.97 (normalizer.cc, unigram_model.cc
// EncodeOptimized; Lattice::Viterbi has the same structure) and holds for
// models that pass CheckModel below; any other model is encoded whole.
//
// 1. Normalisation is per word. The normaliser replaces, left to right, the
//    longest prefix that is a key of the model's character map (NFKC rules)
//    and copies other characters; then it drops leading, trailing and
//    repeated spaces, turns spaces into U+2581 "▁" and prepends one ▁.
//    User-defined symbols (matched before the map) are refused. When no key
//    holds byte 0x20, no rule starts at or reaches across an ASCII space, so
//    on valid UTF-8 the sentence's normalised text is the concatenation of
//    its words' normalised texts, each of which is "▁" + the word's text or
//    empty (a word of spaces only: NBSP etc.; the space handling collapses
//    it in the sentence just as it vanishes alone).
// 2. The lattice splits at word starts. With no piece holding ▁ past its
//    first byte (and unknown-character nodes one character long), no node
//    crosses the ▁ at a word start b_i: every path passes through every b_i,
//    and the nodes inside word i are those of the word alone.
// 3. Viterbi in float. EncodeOptimized keeps S[p], the best path score
//    ending at p, as float; a candidate is fl(S[start] + score), compared
//    with `>` against S[p] (ties: first candidate wins). Word i sees the
//    offset C = S[b_i] instead of 0, so rounding differs from the word
//    alone, which is what flips ties and near-ties (`]]]] ]]] ]]`).
//    Let P be the word's lone best segmentation, exact score A1 (real sum of
//    its pieces' float scores), and every other segmentation score at most
//    A2. In the sentence, let Q be the segmentation the backtrace picks
//    inside the word. fl(x + s) is monotone in x, so by induction along P's
//    nodes the computed S[b_{i+1}] >= C + A1 - e_P, and S[b_{i+1}] is Q's
//    computed chain value, C + score(Q) + e_Q. Each rounding is at most
//    u = 2^-24 times the value rounded; P and Q have at most m nodes (m =
//    characters of the word); every value is a partial path score <= 0
//    (piece scores are checked <= 0), so |value| <= |C| + |A1| + |e|. Hence
//    score(Q) >= A1 - 2 m u (|C| + |A1|) (1 + small), and Q = P whenever
//    A1 - A2 exceeds that. C is at least the computed score of the lone best
//    paths of the words before (monotonicity again), so |C| <= (sum of their
//    |A1|) (1 + N u / (1 - N u)) for a sentence of N < 2^20 characters.
//    With K = sum over all words of |A1|, the cache serves a sentence only
//    when every word has A1 - A2 > kSafety (m + 1) u (K + 1), kSafety = 16,
//    i.e. 8x the bound; otherwise the sentence is encoded whole.
// 4. A1 and A2 come from our own top-2 dynamic program over the word's
//    normalised text, in double (error ~1e-13, far below the threshold),
//    over the pieces SentencePiece's trie holds (NORMAL; UNUSED ones are
//    skipped as SentencePiece skips them). Its best path must equal
//    SentencePiece's own lone encoding of the word, or the word is not
//    served. A word with an unknown character (a position without a
//    one-character piece, where SentencePiece adds an unk node and merges
//    runs of unknowns) is not served either.
// Invalid UTF-8 and sentences over 2^20 bytes are always encoded whole.
//
// The result equals whole-sentence SentencePiece whichever words the cache
// holds, so it does not depend on threads or on the order of work.
#include "workloads/wmt/tokenizer.h"

#include <sys/stat.h>
#include <unistd.h>

#include <malloc.h>

#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/executor.h"
#include "base/files.h"
#include "storage/cache_dir.h"
#include "workloads/shared_work.h"
#include "workloads/wmt/sentencepiece_model.h"
#include "workloads/wmt/sentencepiece_vocab.h"

namespace batchd {
namespace wmt {
namespace {

constexpr double kSafety = 16;
constexpr double kUnitRoundoff = 1.0 / (1 << 24);  // float, round to nearest
constexpr size_t kMaxCachedSentenceBytes = 1 << 20;
constexpr char kSpaceSymbol[] = "\xe2\x96\x81";  // ▁

// SentencePiece's string_util::OneCharLen.
size_t OneCharLen(char c) {
  return size_t("\1\1\1\1\1\1\1\1\1\1\1\1\2\2\3\4"[(uint8_t(c) & 0xff) >> 4]);
}

}  // namespace

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

// The pieces of SentencePiece's unigram trie that the word analysis needs.
struct Tokenizer::Vocab {
  SentencePieceVocab model;
  // NORMAL pieces by text (views into model.pieces): id and score.
  std::unordered_map<std::string_view, std::pair<int, float>> normal;
  size_t max_piece_bytes = 0;
};

namespace {

// Empty when the word cache is exact for this model (tokenizer.cc's
// argument); otherwise why not.
std::string CheckModel(const SentencePieceVocab& v, int vocab_size) {
  if (v.model_type != 1) return "not a unigram model";
  if (int(v.pieces.size()) != vocab_size) {
    return absl::StrCat("the file has ", v.pieces.size(),
                        " pieces, SentencePiece reports ", vocab_size);
  }
  if (v.treat_whitespace_as_suffix || !v.add_dummy_prefix ||
      !v.remove_extra_whitespaces || !v.escape_whitespaces) {
    return "whitespace options other than SentencePiece's defaults";
  }
  for (size_t id = 0; id < v.pieces.size(); ++id) {
    const SentencePieceVocab::Piece& p = v.pieces[id];
    if (p.type == SentencePieceVocab::kUserDefined) {
      return absl::StrCat("user-defined piece ", id);
    }
    if (p.type != SentencePieceVocab::kNormal &&
        p.type != SentencePieceVocab::kUnused) {
      continue;
    }
    if (p.text.empty()) return absl::StrCat("empty piece ", id);
    if (p.text.find(kSpaceSymbol, 1) != std::string::npos) {
      return absl::StrCat("piece ", id, " holds a space past its start");
    }
    if (p.type == SentencePieceVocab::kNormal &&
        !(std::isfinite(p.score) && p.score <= 0)) {
      return absl::StrCat("piece ", id, " has score ", p.score);
    }
  }
  absl::StatusOr<CharsmapKeys> keys = ScanCharsmap(v.precompiled_charsmap);
  if (!keys.ok()) return std::string(keys.status().message());
  if (keys->byte_in_key[uint8_t(' ')]) {
    return "a normalisation rule holds a space";
  }
  return "";
}

}  // namespace

Tokenizer::Tokenizer(std::unique_ptr<SentencePieceModel> model,
                     std::unique_ptr<Vocab> vocab)
    : model_(std::move(model)), vocab_(std::move(vocab)) {}

Tokenizer::~Tokenizer() = default;

namespace {

// What a loaded model costs, per piece (SentencePiece's ModelProto, piece
// maps and trie, and the word analysis' own tables) and per byte of its
// file (the copies kept): a model of 300,000 pieces in 5 MB took 98 MB in
// the daemon (Debian 12's SentencePiece 0.1.97), charged 105 MB.
constexpr uint64_t kResidentBytesPerPiece = 300;
constexpr uint64_t kResidentBytesPerFileByte = 3;

// SentencePiece loads on a thread of the executor, whose stack is known
// (the checks bound its recursion anyway).
absl::Status OnIndexThread(Executor* executor,
                           const std::function<absl::Status()>& fn) {
  if (executor == nullptr) return fn();
  return executor->Run(Priority::kServing, fn);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromBytes(
    std::string bytes, const std::string& what, Executor* executor,
    SharedWork* budget) {
  // Checked before SentencePiece sees a byte: sizes, pieces, their lengths.
  absl::StatusOr<SentencePieceVocab> parsed = SentencePieceVocab::Parse(bytes);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("SentencePiece model ", what, " is refused: ",
                     parsed.status().message()));
  }
  // Charged before it is loaded, from what the checked file holds.
  const uint64_t resident =
      kResidentBytesPerPiece * uint64_t(parsed->pieces.size()) +
      kResidentBytesPerFileByte * uint64_t(bytes.size());
  std::shared_ptr<const SharedWork::Charge> charge;
  if (budget != nullptr) {
    absl::StatusOr<std::shared_ptr<const SharedWork::Charge>> c =
        budget->ChargeModel(resident,
                            absl::StrCat("SentencePiece model ", what));
    if (!c.ok()) return c.status();
    charge = *std::move(c);
  }
  std::unique_ptr<SentencePieceModel> m;
  std::string error;
  absl::Status loaded = OnIndexThread(executor, [&] {
    m = SentencePieceModel::LoadBytes(bytes, &error);
    return absl::OkStatus();
  });
  if (!loaded.ok()) return loaded;
  if (m == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot load SentencePiece model ", what, ": ", error));
  }
  if (m->eos_id() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "SentencePiece model ", what,
        " has no EOS piece (train it with the default ids: eos_id=2)"));
  }
  auto vocab = std::make_unique<Vocab>();
  vocab->model = std::move(*parsed);
  std::string off = CheckModel(vocab->model, m->vocab_size());
  if (off.empty()) {
    for (size_t id = 0; id < vocab->model.pieces.size(); ++id) {
      const SentencePieceVocab::Piece& p = vocab->model.pieces[id];
      if (p.type != SentencePieceVocab::kNormal) continue;
      vocab->normal.emplace(p.text, std::make_pair(int(id), p.score));
      vocab->max_piece_bytes = std::max(vocab->max_piece_bytes, p.text.size());
    }
  } else {
    vocab.reset();
  }
  auto t =
      std::unique_ptr<Tokenizer>(new Tokenizer(std::move(m), std::move(vocab)));
  t->cache_off_ = off;
  t->resident_bytes_ = resident;
  t->charge_ = std::move(charge);
  t->model_bytes_ = std::move(bytes);
  return t;
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::Load(
    const std::string& model_path) {
  struct stat st;
  if (stat(model_path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
    return absl::NotFoundError(
        absl::StrCat("SentencePiece model ", model_path, " not found"));
  }
  const uint64_t limit = ModelLimits().max_file_bytes;
  if (uint64_t(st.st_size) > limit) {
    return absl::InvalidArgumentError(
        absl::StrCat("SentencePiece model ", model_path, " is ",
                     uint64_t(st.st_size), " bytes, over the limit of ", limit));
  }
  absl::StatusOr<std::string> bytes = ReadFileToString(model_path);
  if (!bytes.ok()) return bytes.status();
  return FromBytes(*std::move(bytes), model_path, nullptr, nullptr);
}

namespace {

// The model file's bytes, opened through `root` (confined to the data root,
// regular file, non-blocking) and refused from its size when over the limit.
absl::StatusOr<std::string> ReadModel(const std::string& model_path,
                                      const DataRoot& root) {
  const uint64_t limit = ModelLimits().max_file_bytes;
  std::string bytes;
  absl::Status s = ReadFileCapped(root, model_path, limit, &bytes);
  if (absl::IsNotFound(s)) {
    // For a restricted reader, one message for missing and unreadable.
    return absl::NotFoundError(absl::StrCat(
        "SentencePiece model ", model_path, " not found",
        root.access().restricted()
            ? absl::StrCat(", or not readable by ", root.access().Describe())
            : std::string()));
  }
  if (absl::IsResourceExhausted(s)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "SentencePiece model ", model_path, " is refused: ", s.message(),
        " (a 32,000-piece model is under 1 MiB)"));
  }
  if (!s.ok()) {
    return absl::Status(s.code(),
                        absl::StrCat("SentencePiece model: ", s.message()));
  }
  return bytes;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::Load(
    const std::string& model_path, const DataRoot& root) {
  absl::StatusOr<std::string> bytes = ReadModel(model_path, root);
  if (!bytes.ok()) return bytes.status();
  return FromBytes(*std::move(bytes), model_path, nullptr, nullptr);
}

absl::StatusOr<std::shared_ptr<const Tokenizer>> Tokenizer::LoadShared(
    const std::string& model_path, const DataRoot& root,
    const LoadOptions& options) {
  absl::StatusOr<std::string> bytes = ReadModel(model_path, root);
  if (!bytes.ok()) return bytes.status();
  auto load = [&]() -> absl::StatusOr<std::shared_ptr<const Tokenizer>> {
    absl::StatusOr<std::unique_ptr<Tokenizer>> t =
        FromBytes(*bytes, model_path, options.executor, options.shared);
    if (!t.ok()) return t.status();
    // Memory freed by a model goes back to the system with it (glibc keeps
    // freed heap otherwise: a 3,000,000-piece model left 600 MB behind).
    return std::shared_ptr<const Tokenizer>(t->release(), [](Tokenizer* p) {
      delete p;
      malloc_trim(0);
    });
  };
  if (options.shared == nullptr) return load();
  // Found by the hash of its bytes, and taken only when they are the same.
  const std::string key = absl::StrFormat(
      "%016x %d", StableHash64(*bytes), bytes->size());
  absl::StatusOr<std::shared_ptr<const Tokenizer>> found =
      options.shared->Find<const Tokenizer>("sentencepiece", key, load);
  if (found.ok() && (*found)->model_bytes() != *bytes) return load();
  return found;
}

int Tokenizer::vocab_size() const { return model_->vocab_size(); }
int Tokenizer::eos_id() const { return model_->eos_id(); }

Tokenizer::Stats Tokenizer::stats() const {
  Stats s;
  s.from_words = from_words_.load(std::memory_order_relaxed);
  s.whole = whole_.load(std::memory_order_relaxed);
  return s;
}

absl::Status Tokenizer::Encode(std::string_view text,
                               std::vector<int32_t>* ids) const {
  if (FirstInvalidUtf8(text) != std::string_view::npos) {
    return EncodeWhole(text, ids);
  }
  return EncodeValidUtf8(text, ids);
}

absl::Status Tokenizer::EncodeWhole(std::string_view text,
                                    std::vector<int32_t>* ids) const {
  std::string error;
  std::vector<int> pieces;
  if (!model_->Encode(text, &pieces, &error)) {
    return absl::InvalidArgumentError(
        absl::StrCat("SentencePiece cannot encode the text: ", error));
  }
  ids->assign(pieces.begin(), pieces.end());
  ids->push_back(model_->eos_id());
  whole_.fetch_add(1, std::memory_order_relaxed);
  return absl::OkStatus();
}

absl::StatusOr<Tokenizer::Word> Tokenizer::AnalyzeWord(
    std::string_view text) const {
  Word w;
  std::string error;
  std::vector<int> pieces;
  if (!model_->Encode(text, &pieces, &error)) {
    return absl::InvalidArgumentError(
        absl::StrCat("SentencePiece cannot encode the text: ", error));
  }
  w.ids.assign(pieces.begin(), pieces.end());
  // Its normalised text: the pieces, when all are NORMAL (an unknown or
  // byte piece does not spell its text).
  std::string norm;
  for (int id : pieces) {
    if (id < 0 || size_t(id) >= vocab_->model.pieces.size() ||
        vocab_->model.pieces[id].type != SentencePieceVocab::kNormal) {
      return w;
    }
    norm += vocab_->model.pieces[id].text;
  }
  if (norm.empty()) {  // a word of spaces (NBSP, ...): nothing, anywhere
    w.usable = true;
    w.margin = std::numeric_limits<double>::infinity();
    return w;
  }
  // Top two path scores into every position (top[p][0] >= top[p][1]) and
  // the best one's last node, over the nodes SentencePiece's trie gives.
  const size_t n = norm.size();
  constexpr double kNone = -std::numeric_limits<double>::infinity();
  struct Best {
    double top[2] = {kNone, kNone};
    size_t start = 0;
    int id = -1;
  };
  std::vector<Best> best(n + 1);
  best[0].top[0] = 0;
  const std::string_view view(norm);
  for (size_t s = 0, len; s < n; s += len) {
    len = std::min(OneCharLen(norm[s]), n - s);
    ++w.chars;
    bool single = false;
    const size_t last = std::min(n, s + vocab_->max_piece_bytes);
    for (size_t e = s + 1; e <= last; ++e) {
      auto it = vocab_->normal.find(view.substr(s, e - s));
      if (it == vocab_->normal.end()) continue;
      if (e - s == len) single = true;
      const double score = it->second.second;
      Best& b = best[e];
      for (int k = 0; k < 2; ++k) {
        const double v = best[s].top[k] + score;
        if (v > b.top[0]) {
          b.top[1] = b.top[0];
          b.top[0] = v;
          b.start = s;
          b.id = it->second.first;
        } else if (v > b.top[1]) {
          b.top[1] = v;
        }
      }
    }
    // SentencePiece would add an unknown node here; not modelled.
    if (!single) return w;
  }
  std::vector<int32_t> path;
  for (size_t p = n; p > 0; p = best[p].start) path.push_back(best[p].id);
  if (!std::equal(path.rbegin(), path.rend(), w.ids.begin(), w.ids.end())) {
    return w;  // our model of the lattice disagrees: not served
  }
  w.usable = true;
  w.best = best[n].top[0];
  w.margin = best[n].top[0] - best[n].top[1];  // infinity without a rival
  return w;
}

absl::StatusOr<bool> Tokenizer::AddWord(std::string_view text,
                                        std::vector<int32_t>* ids,
                                        double* score_sum,
                                        double* min_ratio) const {
  auto use = [&](const Word& w) {
    if (!w.usable) return false;
    ids->insert(ids->end(), w.ids.begin(), w.ids.end());
    *score_sum += std::fabs(w.best);
    *min_ratio = std::min(*min_ratio, w.margin / (w.chars + 1));
    return true;
  };
  Shard& shard = shards_[std::hash<std::string_view>()(text) % kShards];
  {
    absl::MutexLock lock(&shard.mu);
    auto it = shard.words.find(std::string(text));
    if (it != shard.words.end()) return use(it->second);
    if (shard.words.size() >= kMaxWordsPerShard) return false;
  }
  absl::StatusOr<Word> w = AnalyzeWord(text);
  if (!w.ok()) return w.status();
  const bool used = use(*w);
  absl::MutexLock lock(&shard.mu);
  shard.words.emplace(std::string(text), *std::move(w));
  return used;
}

absl::Status Tokenizer::EncodeValidUtf8(std::string_view text,
                                        std::vector<int32_t>* ids) const {
  if (vocab_ == nullptr || text.size() > kMaxCachedSentenceBytes) {
    return EncodeWhole(text, ids);
  }
  ids->clear();
  double score_sum = 0;
  double min_ratio = std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < text.size();) {
    while (i < text.size() && text[i] == ' ') ++i;
    size_t j = i;
    while (j < text.size() && text[j] != ' ') ++j;
    if (j > i) {
      absl::StatusOr<bool> ok =
          AddWord(text.substr(i, j - i), ids, &score_sum, &min_ratio);
      if (!ok.ok()) return ok.status();
      if (!*ok) return EncodeWhole(text, ids);
    }
    i = j;
  }
  // Step 3 of the argument at the top of this file.
  if (!(min_ratio > kSafety * kUnitRoundoff * (score_sum + 1))) {
    return EncodeWhole(text, ids);
  }
  ids->push_back(model_->eos_id());
  from_words_.fetch_add(1, std::memory_order_relaxed);
  return absl::OkStatus();
}

absl::StatusOr<PairFate> Tokenizer::TokenizePair(
    std::string_view de, std::string_view en, size_t max_length,
    bool skip_empty, TokenPair* pair, InvalidUtf8 invalid_utf8) const {
  if (invalid_utf8 == InvalidUtf8::kDrop &&
      (FirstInvalidUtf8(de) != std::string_view::npos ||
       FirstInvalidUtf8(en) != std::string_view::npos)) {
    return PairFate::kDamaged;
  }
  if (skip_empty && (de.empty() || en.empty())) return PairFate::kEmpty;
  absl::Status s = Encode(de, &pair->inputs);
  if (s.ok()) s = Encode(en, &pair->targets);
  if (!s.ok()) return s;
  if (pair->inputs.size() > max_length || pair->targets.size() > max_length) {
    return PairFate::kTooLong;
  }
  return PairFate::kKept;
}

}  // namespace wmt
}  // namespace batchd

// Reads a SentencePiece ModelProto's wire format; see sentencepiece_vocab.h.
#include "workloads/wmt/sentencepiece_vocab.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/wire_reader.h"

namespace batchd {
namespace wmt {
namespace {

absl::Status Malformed(const char* what, size_t offset) {
  return absl::InvalidArgumentError(absl::StrCat(
      "not a SentencePiece model: malformed ", what, " at byte ", offset));
}

// Calls on_field(field) for every field of the message `bytes`, stopping at
// the first error it returns; Malformed(what, offset) on bad wire data.
template <typename OnField>
absl::Status ForEachField(std::string_view bytes, const char* what,
                          OnField on_field) {
  WireReader r(bytes.data(), bytes.size());
  while (!r.done()) {
    WireField f;
    if (!r.ReadField(&f)) return Malformed(what, r.offset());
    if (absl::Status s = on_field(f); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status ParsePiece(std::string_view bytes, size_t index,
                        const ModelLimits& limits,
                        SentencePieceVocab::Piece* piece) {
  return ForEachField(bytes, "piece", [&](const WireField& f) {
    if (f.number == 1 && f.wire == kWireLengthDelimited) {
      if (f.bytes.size() > limits.max_piece_bytes) {
        return absl::InvalidArgumentError(
            absl::StrCat("piece ", index, " is ", f.bytes.size(),
                         " bytes, over the limit of ", limits.max_piece_bytes,
                         " (pieces of real models are a few dozen bytes)"));
      }
      piece->text = std::string(f.bytes);
    } else if (f.number == 2 && f.wire == kWireFixed32) {
      const uint32_t bits = uint32_t(f.value);
      memcpy(&piece->score, &bits, sizeof(bits));
    } else if (f.number == 3 && f.wire == kWireVarint) {
      piece->type = int(f.value);
    }
    return absl::OkStatus();
  });
}

absl::Status ParseTrainerSpec(std::string_view bytes, SentencePieceVocab* v) {
  return ForEachField(bytes, "trainer_spec", [v](const WireField& f) {
    if (f.number == 3 && f.wire == kWireVarint) v->model_type = int(f.value);
    if (f.number == 24 && f.wire == kWireVarint) {
      v->treat_whitespace_as_suffix = f.value != 0;
    }
    return absl::OkStatus();
  });
}

absl::Status ParseNormalizerSpec(std::string_view bytes,
                                 SentencePieceVocab* v) {
  return ForEachField(bytes, "normalizer_spec", [v](const WireField& f) {
    if (f.number == 1 && f.wire == kWireLengthDelimited)
      v->normalizer_name = std::string(f.bytes);
    if (f.number == 2 && f.wire == kWireLengthDelimited) {
      v->precompiled_charsmap = std::string(f.bytes);
    }
    if (f.number == 3 && f.wire == kWireVarint)
      v->add_dummy_prefix = f.value != 0;
    if (f.number == 4 && f.wire == kWireVarint) {
      v->remove_extra_whitespaces = f.value != 0;
    }
    if (f.number == 5 && f.wire == kWireVarint)
      v->escape_whitespaces = f.value != 0;
    return absl::OkStatus();
  });
}

}  // namespace

absl::StatusOr<SentencePieceVocab> SentencePieceVocab::Parse(
    std::string_view model, const ModelLimits& limits) {
  if (model.size() > limits.max_file_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("the model is ", model.size(),
                     " bytes, over the limit of ", limits.max_file_bytes));
  }
  SentencePieceVocab v;
  absl::Status s = ForEachField(model, "field", [&](const WireField& f) {
    if (f.wire != kWireLengthDelimited) return absl::OkStatus();
    if (f.number == 1) {
      if (v.pieces.size() >= limits.max_pieces) {
        return absl::InvalidArgumentError(absl::StrCat(
            "the model holds more than ", limits.max_pieces,
            " pieces, the limit (AlgoPerf's WMT model has 32000)"));
      }
      v.pieces.emplace_back();
      return ParsePiece(f.bytes, v.pieces.size() - 1, limits, &v.pieces.back());
    }
    if (f.number == 2) return ParseTrainerSpec(f.bytes, &v);
    if (f.number == 3) return ParseNormalizerSpec(f.bytes, &v);
    return absl::OkStatus();
  });
  if (!s.ok()) return s;
  if (v.pieces.empty()) {
    return absl::InvalidArgumentError("not a SentencePiece model: no pieces");
  }
  return v;
}

absl::StatusOr<CharsmapKeys> ScanCharsmap(std::string_view charsmap) {
  CharsmapKeys out;
  if (charsmap.empty()) return out;
  // Layout as SentencePiece's Normalizer::DecodePrecompiledCharsMap reads
  // it (little-endian, as x86 and the model files are).
  uint32_t trie_bytes = 0;
  if (charsmap.size() <= 4) {
    return absl::InvalidArgumentError("precompiled_charsmap is too short");
  }
  memcpy(&trie_bytes, charsmap.data(), 4);
  if (trie_bytes >= charsmap.size() - 4 || trie_bytes % 4 != 0 ||
      trie_bytes == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("precompiled_charsmap: trie of ", trie_bytes,
                     " bytes in a blob of ", charsmap.size()));
  }
  const size_t n = trie_bytes / 4;
  std::vector<uint32_t> units(n);
  memcpy(units.data(), charsmap.data() + 4, trie_bytes);
  // Darts-clone's unit encoding (third_party/darts_clone/darts.h).
  auto has_leaf = [](uint32_t u) { return ((u >> 8) & 1) == 1; };
  auto label = [](uint32_t u) { return u & ((1u << 31) | 0xff); };
  auto offset = [](uint32_t u) { return (u >> 10) << ((u & (1u << 9)) >> 6); };
  // Depth-first over every edge reachable from the root, as
  // commonPrefixSearch walks them: from unit `pos`, label c leads to
  // unit (pos ^ offset) ^ c when that unit carries label c.
  std::vector<bool> seen(n, false);
  std::vector<uint32_t> stack = {0};
  seen[0] = true;
  while (!stack.empty()) {
    const uint32_t pos = stack.back();
    stack.pop_back();
    const uint32_t base = pos ^ offset(units[pos]);
    for (uint32_t c = 1; c < 256; ++c) {
      const uint32_t child = base ^ c;
      if (child >= n || label(units[child]) != c) continue;
      out.byte_in_key[c] = true;
      if (has_leaf(units[child])) ++out.keys;
      if (!seen[child]) {
        seen[child] = true;
        stack.push_back(child);
      }
    }
  }
  return out;
}

}  // namespace wmt
}  // namespace batchd

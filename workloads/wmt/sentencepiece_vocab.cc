// Reads a SentencePiece ModelProto's wire format; see sentencepiece_vocab.h.
#include "workloads/wmt/sentencepiece_vocab.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace batchd {
namespace wmt {
namespace {

// Protobuf's wire format, just enough of it: varints, fixed32/64 and
// length-delimited fields; groups (wire types 3, 4) do not occur in
// sentencepiece_model.proto and are refused.
class WireReader {
 public:
  explicit WireReader(std::string_view data) : data_(data) {}
  bool done() const { return pos_ >= data_.size(); }

  // Reads the next field's tag and value. For length-delimited fields
  // *bytes is the payload; for the others *value holds the number (fixed32
  // in its low bits).
  bool Next(uint32_t* field, int* wire_type, uint64_t* value,
            std::string_view* bytes) {
    uint64_t tag;
    if (!Varint(&tag)) return false;
    *field = uint32_t(tag >> 3);
    *wire_type = int(tag & 7);
    switch (*wire_type) {
      case 0:
        return Varint(value);
      case 1:
        return Fixed(8, value);
      case 5:
        return Fixed(4, value);
      case 2: {
        uint64_t n;
        if (!Varint(&n) || n > data_.size() - pos_) return false;
        *bytes = data_.substr(pos_, n);
        pos_ += n;
        return true;
      }
    }
    return false;
  }
  size_t pos() const { return pos_; }

 private:
  bool Varint(uint64_t* v) {
    *v = 0;
    for (int shift = 0; shift < 64 && pos_ < data_.size(); shift += 7) {
      const uint8_t b = uint8_t(data_[pos_++]);
      *v |= uint64_t(b & 0x7f) << shift;
      if ((b & 0x80) == 0) return true;
    }
    return false;
  }
  bool Fixed(size_t n, uint64_t* v) {
    if (data_.size() - pos_ < n) return false;
    *v = 0;
    for (size_t i = 0; i < n; ++i) {
      *v |= uint64_t(uint8_t(data_[pos_ + i])) << (8 * i);
    }
    pos_ += n;
    return true;
  }
  std::string_view data_;
  size_t pos_ = 0;
};

absl::Status Malformed(const char* what, size_t offset) {
  return absl::InvalidArgumentError(absl::StrCat(
      "not a SentencePiece model: malformed ", what, " at byte ", offset));
}

// One field of a message, as WireReader::Next reads it.
struct Field {
  uint32_t number = 0;
  int type = 0;        // wire type
  uint64_t value = 0;  // varint and fixed fields
  std::string_view b;  // length-delimited fields
};

// Calls on_field(field) for every field of the message `bytes`, stopping at
// the first error it returns; Malformed(what, offset) on bad wire data.
template <typename OnField>
absl::Status ForEachField(std::string_view bytes, const char* what,
                          OnField on_field) {
  WireReader r(bytes);
  while (!r.done()) {
    Field f;
    if (!r.Next(&f.number, &f.type, &f.value, &f.b)) {
      return Malformed(what, r.pos());
    }
    if (absl::Status s = on_field(f); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status ParsePiece(std::string_view bytes, size_t index,
                        const ModelLimits& limits,
                        SentencePieceVocab::Piece* piece) {
  return ForEachField(bytes, "piece", [&](const Field& f) {
    if (f.number == 1 && f.type == 2) {
      if (f.b.size() > limits.max_piece_bytes) {
        return absl::InvalidArgumentError(absl::StrCat(
            "piece ", index, " is ", f.b.size(), " bytes, over the limit of ",
            limits.max_piece_bytes,
            " (pieces of real models are a few dozen bytes)"));
      }
      piece->text = std::string(f.b);
    } else if (f.number == 2 && f.type == 5) {
      const uint32_t bits = uint32_t(f.value);
      memcpy(&piece->score, &bits, sizeof(bits));
    } else if (f.number == 3 && f.type == 0) {
      piece->type = int(f.value);
    }
    return absl::OkStatus();
  });
}

absl::Status ParseTrainerSpec(std::string_view bytes, SentencePieceVocab* v) {
  return ForEachField(bytes, "trainer_spec", [v](const Field& f) {
    if (f.number == 3 && f.type == 0) v->model_type = int(f.value);
    if (f.number == 24 && f.type == 0) {
      v->treat_whitespace_as_suffix = f.value != 0;
    }
    return absl::OkStatus();
  });
}

absl::Status ParseNormalizerSpec(std::string_view bytes,
                                 SentencePieceVocab* v) {
  return ForEachField(bytes, "normalizer_spec", [v](const Field& f) {
    if (f.number == 1 && f.type == 2) v->normalizer_name = std::string(f.b);
    if (f.number == 2 && f.type == 2) {
      v->precompiled_charsmap = std::string(f.b);
    }
    if (f.number == 3 && f.type == 0) v->add_dummy_prefix = f.value != 0;
    if (f.number == 4 && f.type == 0) {
      v->remove_extra_whitespaces = f.value != 0;
    }
    if (f.number == 5 && f.type == 0) v->escape_whitespaces = f.value != 0;
    return absl::OkStatus();
  });
}

}  // namespace

absl::StatusOr<SentencePieceVocab> SentencePieceVocab::Parse(
    std::string_view model, const ModelLimits& limits) {
  if (model.size() > limits.max_file_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("the model is ", model.size(), " bytes, over the limit of ",
                     limits.max_file_bytes));
  }
  SentencePieceVocab v;
  absl::Status s = ForEachField(model, "field", [&](const Field& f) {
    if (f.type != 2) return absl::OkStatus();
    if (f.number == 1) {
      if (v.pieces.size() >= limits.max_pieces) {
        return absl::InvalidArgumentError(absl::StrCat(
            "the model holds more than ", limits.max_pieces,
            " pieces, the limit (AlgoPerf's WMT model has 32000)"));
      }
      v.pieces.emplace_back();
      return ParsePiece(f.b, v.pieces.size() - 1, limits, &v.pieces.back());
    }
    if (f.number == 2) return ParseTrainerSpec(f.b, &v);
    if (f.number == 3) return ParseNormalizerSpec(f.b, &v);
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

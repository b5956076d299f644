// tf.train.Example parsing and serializing; see tf_example.h.
#include "workloads/common/tf_example.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/coding.h"
#include "base/wire_reader.h"

namespace batchd {

namespace {

enum class FeatureKind { kNone, kBytes, kFloat, kInt64 };

struct ParsedFeature {
  FeatureKind kind = FeatureKind::kNone;
  std::vector<std::string> bytes;
  std::vector<int64_t> int64s;
  std::vector<float> floats;
};

absl::Status Malformed(const char* what) {
  return absl::InvalidArgumentError(
      absl::StrCat("malformed tf.train.Example: bad ", what));
}

// What a parse keeps beyond the values' own bytes (kMaxExampleOverheadBytes):
// an object per value, a map node per feature entry (in the parse's map and
// in the result's). Counted as each is added, so that a record of a few
// bytes per value is refused before it keeps many times its size.
class Overhead {
 public:
  // Counts `bytes` more; false once the total is past the bound.
  bool Take(uint64_t bytes) {
    used_ += bytes;
    return !exceeded();
  }
  bool exceeded() const { return used_ > kMaxExampleOverheadBytes; }

 private:
  uint64_t used_ = 0;
};

absl::Status TooMany() {
  return absl::InvalidArgumentError(absl::StrCat(
      "malformed tf.train.Example: its values and features would take more "
      "than ",
      kMaxExampleOverheadBytes,
      " bytes beyond their own bytes (a real Example holds a few of them)"));
}

// A feature entry's nodes: one in the parse's map, one in the result's.
constexpr uint64_t kEntryBytes =
    sizeof(std::pair<const std::string, ParsedFeature>) +
    sizeof(std::pair<const std::string, std::vector<std::string>>) +
    8 * sizeof(void*);  // the nodes' links and colours, and malloc's headers

// Calls `read(wire, r)` for each field 1 of the value list message at
// [p, p + n) (BytesList, FloatList, Int64List), with `r` at the field's
// value; other fields are skipped. False on a bad tag or when `read` is.
template <typename Read>
bool ForEachValueField(const char* p, size_t n, Read read) {
  WireReader r(p, n);
  while (!r.done()) {
    uint32_t field, wire;
    if (!r.ReadTag(&field, &wire)) return false;
    if (!(field == 1 ? read(wire, r) : r.Skip(wire))) return false;
  }
  return true;
}

bool ParseBytesList(const char* p, size_t n, std::vector<std::string>* out,
                    Overhead* kept) {
  return ForEachValueField(p, n, [&](uint32_t wire, WireReader& r) {
    if (wire != kWireLengthDelimited) return r.Skip(wire);
    const char* d;
    size_t len;
    if (!r.ReadBytes(&d, &len) || !kept->Take(sizeof(std::string))) {
      return false;
    }
    out->emplace_back(d, len);
    return true;
  });
}

bool ParseInt64List(const char* p, size_t n, std::vector<int64_t>* out,
                    Overhead* kept) {
  return ForEachValueField(p, n, [&](uint32_t wire, WireReader& r) {
    if (wire == kWireVarint) {
      uint64_t v;
      if (!r.ReadVarint(&v) || !kept->Take(sizeof(int64_t))) return false;
      out->push_back(int64_t(v));
      return true;
    }
    if (wire != kWireLengthDelimited) return r.Skip(wire);
    const char* d;
    size_t len;
    if (!r.ReadBytes(&d, &len)) return false;
    WireReader packed(d, len);
    while (!packed.done()) {
      uint64_t v;
      if (!packed.ReadVarint(&v) || !kept->Take(sizeof(int64_t))) {
        return false;
      }
      out->push_back(int64_t(v));
    }
    return true;
  });
}

// A FloatList, packed (one length-delimited run) or not (fixed32 each).
bool ParseFloatList(const char* p, size_t n, std::vector<float>* out,
                    Overhead* kept) {
  return ForEachValueField(p, n, [&](uint32_t wire, WireReader& r) {
    if (wire == kWireFixed32) {
      uint32_t v;
      if (!r.ReadFixed32(&v) || !kept->Take(sizeof(float))) return false;
      float f;
      memcpy(&f, &v, 4);
      out->push_back(f);
      return true;
    }
    if (wire != kWireLengthDelimited) return r.Skip(wire);
    const char* d;
    size_t len;
    if (!r.ReadBytes(&d, &len) || len % 4 != 0 || !kept->Take(len)) {
      return false;
    }
    if (len == 0) return true;  // an empty run: no bytes (memcpy of null)
    const size_t at = out->size();
    out->resize(at + len / 4);
    memcpy(out->data() + at, d, len);  // little endian, as the wire
    return true;
  });
}

absl::Status ParseFeature(const char* p, size_t n, ParsedFeature* f,
                          Overhead* kept) {
  WireReader r(p, n);
  while (!r.done()) {
    uint32_t field, wire;
    if (!r.ReadTag(&field, &wire)) return Malformed("Feature tag");
    if (wire == kWireLengthDelimited && field >= 1 && field <= 3) {
      const char* d;
      size_t len;
      if (!r.ReadBytes(&d, &len)) return Malformed("Feature length");
      const FeatureKind kind = field == 1   ? FeatureKind::kBytes
                               : field == 2 ? FeatureKind::kFloat
                                            : FeatureKind::kInt64;
      if (kind != f->kind) *f = ParsedFeature{kind, {}, {}, {}};
      bool ok = true;
      if (kind == FeatureKind::kBytes) {
        ok = ParseBytesList(d, len, &f->bytes, kept);
      }
      if (kind == FeatureKind::kFloat) {
        ok = ParseFloatList(d, len, &f->floats, kept);
      }
      if (kind == FeatureKind::kInt64) {
        ok = ParseInt64List(d, len, &f->int64s, kept);
      }
      if (kept->exceeded()) return TooMany();
      if (!ok) return Malformed("feature value list");
    } else if (!r.Skip(wire)) {
      return Malformed("Feature field");
    }
  }
  return absl::OkStatus();
}

absl::Status ParseFeatures(const char* p, size_t n,
                           std::map<std::string, ParsedFeature>* out,
                           Overhead* kept) {
  WireReader r(p, n);
  while (!r.done()) {
    uint32_t field, wire;
    if (!r.ReadTag(&field, &wire)) return Malformed("Features tag");
    if (field == 1 && wire == kWireLengthDelimited) {
      const char* entry;
      size_t entry_len;
      if (!r.ReadBytes(&entry, &entry_len)) return Malformed("map entry");
      if (!kept->Take(kEntryBytes)) return TooMany();
      WireReader er(entry, entry_len);
      std::string key;
      ParsedFeature value;
      while (!er.done()) {
        uint32_t ef, ew;
        if (!er.ReadTag(&ef, &ew)) return Malformed("map entry tag");
        const char* d;
        size_t len;
        if (ef == 1 && ew == kWireLengthDelimited) {
          if (!er.ReadBytes(&d, &len)) return Malformed("feature name");
          key.assign(d, len);
        } else if (ef == 2 && ew == kWireLengthDelimited) {
          if (!er.ReadBytes(&d, &len)) return Malformed("feature length");
          absl::Status s = ParseFeature(d, len, &value, kept);
          if (!s.ok()) return s;
        } else if (!er.Skip(ew)) {
          return Malformed("map entry field");
        }
      }
      (*out)[key] = std::move(value);
    } else if (!r.Skip(wire)) {
      return Malformed("Features field");
    }
  }
  return absl::OkStatus();
}

void PutLengthDelimited(uint32_t field, const std::string& data,
                        std::string* out) {
  AppendVarint((uint64_t(field) << 3) | kWireLengthDelimited, out);
  AppendVarint(data.size(), out);
  out->append(data);
}

void PutMapEntry(const std::string& key, const std::string& feature,
                 std::string* features) {
  std::string entry;
  PutLengthDelimited(1, key, &entry);
  PutLengthDelimited(2, feature, &entry);
  PutLengthDelimited(1, entry, features);
}

}  // namespace

absl::StatusOr<ExampleFeatures> ParseExample(absl::string_view serialized) {
  std::map<std::string, ParsedFeature> parsed;
  Overhead kept;
  WireReader r(serialized.data(), serialized.size());
  while (!r.done()) {
    uint32_t field, wire;
    if (!r.ReadTag(&field, &wire)) return Malformed("Example tag");
    if (field == 1 && wire == kWireLengthDelimited) {
      const char* d;
      size_t len;
      if (!r.ReadBytes(&d, &len)) return Malformed("Features length");
      absl::Status s = ParseFeatures(d, len, &parsed, &kept);
      if (!s.ok()) return s;
    } else if (!r.Skip(wire)) {
      return Malformed("Example field");
    }
  }
  ExampleFeatures out;
  for (auto& [name, f] : parsed) {
    if (f.kind == FeatureKind::kBytes) out.bytes[name] = std::move(f.bytes);
    if (f.kind == FeatureKind::kInt64) out.int64s[name] = std::move(f.int64s);
    if (f.kind == FeatureKind::kFloat) out.floats[name] = std::move(f.floats);
  }
  return out;
}

std::string SerializeExample(const ExampleFeatures& features) {
  // Keys are written in sorted order, each in one map entry, so equal inputs
  // give equal bytes. A name present in several maps keeps the list written
  // last (bytes, float, int64: the later oneof member), as a parser would
  // read the entries.
  std::string body;
  for (const auto& [name, values] : features.bytes) {
    std::string list;
    for (const std::string& v : values) PutLengthDelimited(1, v, &list);
    std::string feature;
    PutLengthDelimited(1, list, &feature);
    PutMapEntry(name, feature, &body);
  }
  for (const auto& [name, values] : features.floats) {
    std::string packed(values.size() * 4, '\0');
    if (!values.empty()) memcpy(packed.data(), values.data(), packed.size());
    std::string list;
    PutLengthDelimited(1, packed, &list);
    std::string feature;
    PutLengthDelimited(2, list, &feature);
    PutMapEntry(name, feature, &body);
  }
  for (const auto& [name, values] : features.int64s) {
    std::string packed;
    for (int64_t v : values) AppendVarint(uint64_t(v), &packed);
    std::string list;
    PutLengthDelimited(1, packed, &list);
    std::string feature;
    PutLengthDelimited(3, list, &feature);
    PutMapEntry(name, feature, &body);
  }
  std::string example;
  PutLengthDelimited(1, body, &example);
  return example;
}

}  // namespace batchd

// The .npy reader; see npy.h.
#include "workloads/librispeech/npy.h"

#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/format.h"

namespace batchd {
namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicBytes = 6;
// Larger headers are not what numpy writes for a 1-D array (it pads to 64
// bytes; a 4 GiB header length is a hostile file, not an array).
constexpr uint64_t kMaxHeaderBytes = 1 << 16;

absl::Status Bad(const std::string& file, uint64_t offset,
                 absl::string_view what) {
  return absl::DataLossError(
      absl::StrCat("npy: ", Printable(file), " at byte ", offset, ": ", what));
}

// The dict literal numpy writes: {'key': value, ...}, values a quoted
// string, True/False or a tuple of integers. Parsed by hand: nothing else
// is accepted.
class HeaderParser {
 public:
  HeaderParser(absl::string_view text, uint64_t base, const std::string& file)
      : s_(text), base_(base), file_(file) {}

  absl::Status Parse(std::string* descr, bool* fortran,
                     std::vector<uint64_t>* shape) {
    bool have_descr = false, have_fortran = false, have_shape = false;
    Skip();
    if (!Eat('{')) return Fail("header is not a dict");
    for (;;) {
      Skip();
      if (Eat('}')) break;
      std::string key;
      if (absl::Status st = Quoted(&key); !st.ok()) return st;
      Skip();
      if (!Eat(':')) return Fail("no ':' after a key");
      Skip();
      if (key == "descr") {
        if (absl::Status st = Quoted(descr); !st.ok()) return st;
        have_descr = true;
      } else if (key == "fortran_order") {
        if (Word("True")) {
          *fortran = true;
        } else if (Word("False")) {
          *fortran = false;
        } else {
          return Fail("fortran_order is not True or False");
        }
        have_fortran = true;
      } else if (key == "shape") {
        if (absl::Status st = Tuple(shape); !st.ok()) return st;
        have_shape = true;
      } else {
        return Fail(absl::StrCat("unknown key '", Printable(key), "'"));
      }
      Skip();
      if (Eat(',')) continue;
      Skip();
      if (Eat('}')) break;
      return Fail("no ',' or '}' after a value");
    }
    Skip();
    if (pos_ != s_.size()) return Fail("bytes after the header's dict");
    if (!have_descr || !have_fortran || !have_shape) {
      return Fail("header lacks descr, fortran_order or shape");
    }
    return absl::OkStatus();
  }

 private:
  absl::Status Fail(absl::string_view what) const {
    return Bad(file_, base_ + pos_, what);
  }
  void Skip() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\n')) ++pos_;
  }
  bool Eat(char c) {
    if (pos_ < s_.size() && s_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  bool Word(absl::string_view w) {
    if (s_.substr(pos_, w.size()) != w) return false;
    pos_ += w.size();
    return true;
  }
  absl::Status Quoted(std::string* out) {
    if (pos_ >= s_.size() || (s_[pos_] != '\'' && s_[pos_] != '"')) {
      return Fail("expected a quoted string");
    }
    const char q = s_[pos_++];
    const size_t end = s_.find(q, pos_);
    if (end == absl::string_view::npos) return Fail("unterminated string");
    *out = std::string(s_.substr(pos_, end - pos_));
    pos_ = end + 1;
    return absl::OkStatus();
  }
  absl::Status Tuple(std::vector<uint64_t>* shape) {
    shape->clear();
    if (!Eat('(')) return Fail("shape is not a tuple");
    for (;;) {
      Skip();
      if (Eat(')')) return absl::OkStatus();
      size_t start = pos_;
      while (pos_ < s_.size() && absl::ascii_isdigit(s_[pos_])) ++pos_;
      uint64_t v = 0;
      if (pos_ == start || pos_ - start > 19 ||
          !absl::SimpleAtoi(s_.substr(start, pos_ - start), &v)) {
        return Fail("shape holds something other than integers");
      }
      shape->push_back(v);
      Skip();
      if (Eat(',')) continue;
      Skip();
      if (Eat(')')) return absl::OkStatus();
      return Fail("no ',' or ')' in the shape");
    }
  }

  absl::string_view s_;
  size_t pos_ = 0;
  const uint64_t base_;
  const std::string& file_;
};

}  // namespace

int64_t NpyArray::at(uint64_t i) const {
  const char* p = data + i * uint64_t(item_bytes);
  switch (item_bytes) {
    case 2: {
      uint16_t v;
      memcpy(&v, p, 2);
      return int16_t(v);
    }
    case 4: {
      uint32_t v;
      memcpy(&v, p, 4);
      return int32_t(v);
    }
    default: {
      uint64_t v;
      memcpy(&v, p, 8);
      return int64_t(v);
    }
  }
}

absl::StatusOr<NpyArray> ParseNpy(absl::string_view bytes,
                                  const std::string& file,
                                  const std::vector<std::string>& descrs,
                                  uint64_t max_length) {
  if (bytes.size() < kMagicBytes + 2 ||
      memcmp(bytes.data(), kMagic, kMagicBytes) != 0) {
    return Bad(file, 0,
               absl::StrCat("not a .npy file (no \\x93NUMPY magic in ",
                            bytes.size(), " bytes)"));
  }
  const uint8_t major = uint8_t(bytes[6]);
  uint64_t header_len = 0, header_start = 0;
  if (major == 1) {
    if (bytes.size() < 10) return Bad(file, 8, "truncated before the header");
    header_len = uint8_t(bytes[8]) | (uint64_t(uint8_t(bytes[9])) << 8);
    header_start = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12) return Bad(file, 8, "truncated before the header");
    for (int i = 0; i < 4; ++i) {
      header_len |= uint64_t(uint8_t(bytes[8 + i])) << (8 * i);
    }
    header_start = 12;
  } else {
    return Bad(file, 6,
               absl::StrCat("version ", int(major), ".", int(uint8_t(bytes[7])),
                            " (this reads 1, 2 and 3)"));
  }
  if (header_len > kMaxHeaderBytes) {
    return Bad(file, 8,
               absl::StrCat("header of ", header_len, " bytes (at most ",
                            kMaxHeaderBytes, ")"));
  }
  if (bytes.size() - header_start < header_len) {
    return Bad(file, bytes.size(),
               absl::StrCat("truncated in the header (", header_len,
                            " bytes from byte ", header_start, ")"));
  }
  std::string descr;
  bool fortran = false;
  std::vector<uint64_t> shape;
  HeaderParser parser(bytes.substr(header_start, header_len), header_start,
                      file);
  if (absl::Status st = parser.Parse(&descr, &fortran, &shape); !st.ok()) {
    return st;
  }
  bool known = false;
  for (const std::string& d : descrs) known = known || d == descr;
  if (!known) {
    std::string want;
    for (const std::string& d : descrs) absl::StrAppend(&want, " ", d);
    return Bad(
        file, header_start,
        absl::StrCat("dtype '", Printable(descr), "' (expected", want, ")"));
  }
  if (fortran) return Bad(file, header_start, "fortran_order is True");
  if (shape.size() != 1) {
    return Bad(
        file, header_start,
        absl::StrCat("shape of ", shape.size(), " dimensions (expected 1)"));
  }
  if (shape[0] > max_length) {
    return Bad(
        file, header_start,
        absl::StrCat("shape (", shape[0], ",) is longer than ", max_length));
  }
  NpyArray a;
  a.item_bytes = descr[2] - '0';
  a.length = shape[0];
  a.data_offset = header_start + header_len;
  const uint64_t want = a.length * uint64_t(a.item_bytes);
  const uint64_t have = bytes.size() - a.data_offset;
  if (have < want) {
    return Bad(file, bytes.size(),
               absl::StrCat("truncated: ", a.length, " values need ", want,
                            " data bytes from byte ", a.data_offset, ", ", have,
                            " there"));
  }
  if (have > want) {
    return Bad(
        file, a.data_offset + want,
        absl::StrCat(have - want, " bytes after the ", a.length, " values"));
  }
  a.data = bytes.data() + a.data_offset;
  return a;
}

}  // namespace batchd

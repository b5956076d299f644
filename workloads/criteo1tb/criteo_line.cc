// Criteo lines; see criteo_line.h.
#include "workloads/criteo1tb/criteo_line.h"

#include <farmhash.h>

#include <charconv>
#include <cstdlib>
#include <cstring>
#include <new>

namespace batchd {
namespace criteo {

const uint64_t kVocab[kCategorical] = {
    39884406, 39043,    17289,    7420,     20263,  3,     7120, 1543, 63,
    38532951, 2953546,  403346,   10,       2208,   11938, 155,  4,    976,
    14,       39979771, 25641295, 39664984, 585935, 12972, 108,  36};

namespace {

const FastMod kVocabMod[kCategorical] = {
    FastMod(kVocab[0]),  FastMod(kVocab[1]),  FastMod(kVocab[2]),
    FastMod(kVocab[3]),  FastMod(kVocab[4]),  FastMod(kVocab[5]),
    FastMod(kVocab[6]),  FastMod(kVocab[7]),  FastMod(kVocab[8]),
    FastMod(kVocab[9]),  FastMod(kVocab[10]), FastMod(kVocab[11]),
    FastMod(kVocab[12]), FastMod(kVocab[13]), FastMod(kVocab[14]),
    FastMod(kVocab[15]), FastMod(kVocab[16]), FastMod(kVocab[17]),
    FastMod(kVocab[18]), FastMod(kVocab[19]), FastMod(kVocab[20]),
    FastMod(kVocab[21]), FastMod(kVocab[22]), FastMod(kVocab[23]),
    FastMod(kVocab[24]), FastMod(kVocab[25])};

float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

bool Missing(const char* p, size_t n) {
  return n == 0 || (n == 2 && p[0] == '-' && p[1] == '1');
}

// decode_csv's float32 parse of a numeric field: integers (the data's only
// form) go through the exact integer, whose conversion to float rounds as
// strtof does; anything else through from_chars<float>.
bool ParseFloat(const char* p, size_t n, float* out) {
  if (Missing(p, n)) {
    *out = 0.0f;
    return true;
  }
  const char* end = p + n;
  const char* q = p;
  if (*q == '+') ++q;  // strtof takes a leading '+'
  int64_t v = 0;
  auto r = std::from_chars(q, end, v);
  if (r.ec == std::errc() && r.ptr == end && q != end) {
    *out = static_cast<float>(v);
    return true;
  }
  float f = 0;
  auto rf = std::from_chars(q, end, f);
  if (rf.ec != std::errc() || rf.ptr != end || q == end) return false;
  *out = f;
  return true;
}

// Tabs in the line: a line that fails to parse is a field-count error
// first, as when fields were split before any was parsed.
size_t Tabs(const char* line, size_t size) {
  size_t n = 0;
  for (size_t i = 0; i < size; ++i) n += line[i] == '\t' ? 1 : 0;
  return n;
}

// Eight bytes at a time (SWAR): the fields are short, so that a line's
// fields are found and converted with few branches. Bytes are in memory
// order: the first at the low end (x86 is little-endian).
constexpr uint64_t kOnes = 0x0101010101010101ull;
constexpr uint64_t kHigh = 0x8080808080808080ull;

uint64_t Load8(const char* p) {
  uint64_t x;
  std::memcpy(&x, p, 8);
  return x;
}

// The high bit of each byte of x that is >= c (every byte of x < 0x80).
uint64_t AtLeast(uint64_t x, uint8_t c) {
  return ((x | kHigh) - kOnes * c) & kHigh;
}

// The high bit of each byte of x equal to c.
uint64_t Equal(uint64_t x, uint8_t c) {
  const uint64_t y = x ^ (kOnes * c);
  const uint64_t low7 = ~kHigh;
  return ~(((y & low7) + low7) | y | low7);
}

// The value of eight decimal digits, the first the most significant.
uint64_t EightDigits(uint64_t x) {
  x -= kOnes * '0';
  x = x * 10 + (x >> 8);  // byte pairs
  x = (((x & 0x000000ff000000ffull) * (100 + (1000000ull << 32))) +
       (((x >> 16) & 0x000000ff000000ffull) * (1 + (10000ull << 32)))) >>
      32;
  return x;
}

// The digits before a tab within the 8 bytes x: true with their count
// (0: an empty field) and value; false when no tab is among them or a byte
// before it is not a digit.
inline __attribute__((always_inline)) bool Digits(uint64_t x, int* len,
                                                 uint64_t* value) {
  const uint64_t tabs = Equal(x, '\t');
  if (tabs == 0) return false;
  const int n = __builtin_ctzll(tabs) >> 3;  // 0..7
  const uint64_t keep = (uint64_t(1) << (8 * n)) - 1;
  const uint64_t digit =
      AtLeast(x, '0') & ~AtLeast(x, '9' + 1) & ~(x & kHigh);
  if ((digit & keep) != (kHigh & keep)) return false;
  *len = n;
  // The digits to the high end, '0's before them.
  *value = n == 0 ? 0
                  : EightDigits(((x & keep) << (64 - 8 * n)) |
                                ((kOnes * '0') >> (8 * n)));
  return true;
}

// The value of 8 lowercase hex digits x; false if a byte is not one.
inline __attribute__((always_inline)) bool Hex8(uint64_t x, uint32_t* out) {
  const uint64_t digit = AtLeast(x, '0') & ~AtLeast(x, '9' + 1);
  const uint64_t letter = AtLeast(x, 'a') & ~AtLeast(x, 'f' + 1);
  if ((x & kHigh) != 0 || (digit | letter) != kHigh) return false;
  // Each byte its nibble ('a' is 0x61: 1 + 9), then nibbles paired.
  uint64_t n = (x & (kOnes * 0x0f)) + (letter >> 7) * 9;
  n = ((n << 4) | (n >> 8)) & 0x00ff00ff00ff00ffull;
  n = ((n << 8) | (n >> 16)) & 0x0000ffff0000ffffull;
  *out = uint32_t((n << 16) | (n >> 32));
  return true;
}

// log(relu(x) + 1) as TF computes it; NaN (from "nan") stays NaN.
float DenseValue(float x) {
  const float y = (x > 0.0f ? x : (x != x ? x : 0.0f)) + 1.0f;
  return (y != y || y > 3.4028235e38f) ? y : TfLog(y);
}

// DenseValue of the counts below 2^16 (most of Criteo's): one look-up.
constexpr uint64_t kCountTable = 1 << 16;
const float* CountValues() {
  static const float* const table = [] {
    float* t = new float[kCountTable];
    for (uint64_t v = 0; v < kCountTable; ++v) {
      t[v] = DenseValue(static_cast<float>(int64_t(v)));
    }
    return t;
  }();
  return table;
}

// Column i's bucket of field bytes s[0, n), n <= 4096.
uint32_t Bucket(int i, const char* s, size_t n) {
  char buf[4096 + 2];
  std::memcpy(buf, s, n);
  size_t k = n;
  if (i >= 10) buf[k++] = char('0' + i / 10);
  buf[k++] = char('0' + i % 10);
  return uint32_t(kVocabMod[i](util::Fingerprint64(buf, k)));
}

// A field's end: its tab (fields before the last) or the line's end (the
// last, which holds no tab); null when the line has too few or too many.
const char* FieldEnd(const char* p, const char* end, bool last) {
  const void* tab = memchr(p, '\t', size_t(end - p));
  if (last) return tab == nullptr ? end : nullptr;
  return static_cast<const char*>(tab);
}

}  // namespace

const char* LineErrorName(LineError e) {
  switch (e) {
    case LineError::kNone:
      return "ok";
    case LineError::kFieldCount:
      return "not 40 tab-separated fields";
    case LineError::kNotANumber:
      return "a label or dense field is not a number";
    case LineError::kFieldTooLong:
      return "a categorical field is longer than 4096 bytes";
  }
  return "?";
}

float TfLog(float v) {
  // The steps are separate float operations on purpose: the compiler must
  // not fuse them (the library is built with -ffp-contract=off), since TF's
  // result is that of unfused multiplies and adds.
  const uint32_t u = Bits(v);
  float e = static_cast<float>(int((u >> 23) & 0xff) - 126);
  const float m = FromBits((u & 0x807fffffu) | 0x3f000000u);  // [0.5, 1)
  float x = m - 1.0f;
  if (m < 0.707106781186547524f) {  // into [sqrt(1/2), sqrt(2)) - 1
    e -= 1.0f;
    x = x + m;
  }
  float p = x * 0.18256296349849254f + 1.0000000190281063f;
  p = x * p + 1.0000000190281136f;
  p = x * p;
  float q = x * 0.049616247954120038f + 0.59923249590823520f;
  q = x * q + 1.4999999999999927f;
  q = x * q + 1.0f;
  const float r = p / q;
  return e * 0.693147180559945309f + r;
}

HashMemo::HashMemo() {
  uint64_t total = 0;
  for (int c = 0; c < kCategorical; ++c) {
    // Twice the vocabulary's slots, at least 2^12 (a column may hold more
    // values than buckets), at most 2^16.
    int bits = 12;
    while (bits < 16 && (uint64_t(1) << bits) < 2 * kVocab[c]) ++bits;
    base_[c] = total;
    shift_[c] = 32 - bits;
    total += uint64_t(1) << bits;
  }
  slots_.reset(static_cast<uint64_t*>(calloc(total, sizeof(uint64_t))));
  if (slots_ == nullptr) throw std::bad_alloc();
}

void HashMemo::Free::operator()(uint64_t* p) const { free(p); }

LineError ParseLine(const char* line, size_t size, ParsedLine* out,
                    HashMemo* memo) {
  const char* p = line;
  const char* const end = line + size;
  auto fail = [&](LineError e) {
    return Tabs(line, size) != kFields - 1 ? LineError::kFieldCount : e;
  };
  // The label and the dense fields: digits up to the tab, else general.
  const float* const counts = CountValues();
  for (int f = 0; f <= kDense; ++f) {
    int n;
    uint64_t v;
    float x;
    if (end - p >= 8 && Digits(Load8(p), &n, &v)) {  // digits, or empty
      if (f == 0) {
        out->label = static_cast<float>(int64_t(v));
      } else {
        out->dense[f - 1] = v < kCountTable
                                ? counts[v]
                                : DenseValue(static_cast<float>(int64_t(v)));
      }
      p += n + 1;
      continue;
    }
    const char* fe = FieldEnd(p, end, false);
    if (fe == nullptr) return LineError::kFieldCount;
    if (!ParseFloat(p, size_t(fe - p), &x)) {
      return fail(LineError::kNotANumber);
    }
    if (f == 0) {
      out->label = x;
    } else {
      out->dense[f - 1] = DenseValue(x);
    }
    p = fe + 1;
  }
  // The categorical fields, in two passes: their values (8 hex characters,
  // or empty) with the memo's slots fetched, then the buckets, so that the
  // slots' cache misses overlap instead of following one another.
  uint32_t value[kCategorical];
  const char* span[kCategorical];  // null: a value; else the field's bytes
  size_t span_len[kCategorical];
  for (int i = 0; i < kCategorical; ++i) {
    const bool last = i == kCategorical - 1;
    span[i] = nullptr;
    if (!last && end - p >= 9) {
      // 8 hex digits and a tab, or an empty field ("00000000"): chosen
      // without a branch, since which comes is the data's.
      uint32_t hex = 0;
      const bool empty = *p == '\t';
      const bool digits = Hex8(Load8(p), &hex) && p[8] == '\t';
      if (empty || digits) {
        value[i] = empty ? 0 : hex;
        if (memo != nullptr) memo->Prefetch(i, value[i]);
        p += empty ? 1 : 9;
        continue;
      }
    } else if (last && (end - p == 8 || p == end)) {
      if (p == end) {
        value[i] = 0;
        if (memo != nullptr) memo->Prefetch(i, 0);
        continue;
      }
      if (Hex8(Load8(p), &value[i])) {
        if (memo != nullptr) memo->Prefetch(i, value[i]);
        p += 8;
        continue;
      }
    }
    const char* fe = FieldEnd(p, end, last);
    if (fe == nullptr) return LineError::kFieldCount;
    span[i] = p;
    span_len[i] = size_t(fe - p);
    if (Missing(p, span_len[i])) {
      span[i] = "00000000";
      span_len[i] = 8;
    }
    if (span_len[i] > 4096) return fail(LineError::kFieldTooLong);
    p = fe + 1;
  }
  char hex[8];
  for (int i = 0; i < kCategorical; ++i) {
    if (span[i] != nullptr) {
      out->ids[i] = Bucket(i, span[i], span_len[i]);
      continue;
    }
    uint32_t b = memo != nullptr ? memo->Find(i, value[i]) : UINT32_MAX;
    if (b == UINT32_MAX) {
      for (int k = 0; k < 8; ++k) {
        hex[k] = "0123456789abcdef"[(value[i] >> (28 - 4 * k)) & 15];
      }
      b = Bucket(i, hex, 8);
      if (memo != nullptr) memo->Keep(i, value[i], b);
    }
    out->ids[i] = b;
  }
  return LineError::kNone;
}

}  // namespace criteo
}  // namespace batchd

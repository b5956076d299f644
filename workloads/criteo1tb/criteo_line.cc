// Criteo lines; see criteo_line.h.
#include "workloads/criteo1tb/criteo_line.h"

#include <farmhash.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include <charconv>
#include <cstring>

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

// The 40 fields of `line`: false unless it has exactly 39 tabs. Tabs are
// found 16 bytes at a time (SSE2, in every x86-64), not one memchr call a
// field.
bool SplitFields(const char* line, size_t size, const char** start,
                 size_t* len) {
  int f = 0;
  const char* field = line;
  auto tab_at = [&](size_t i) -> bool {
    if (f == kFields - 1) return false;  // a 41st field
    start[f] = field;
    len[f] = size_t(line + i - field);
    ++f;
    field = line + i + 1;
    return true;
  };
  size_t i = 0;
#if defined(__SSE2__)
  const __m128i tab = _mm_set1_epi8('\t');
  for (; i + 16 <= size; i += 16) {
    const __m128i chunk =
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(line + i));
    unsigned mask = unsigned(_mm_movemask_epi8(_mm_cmpeq_epi8(chunk, tab)));
    while (mask != 0) {
      if (!tab_at(i + size_t(__builtin_ctz(mask)))) return false;
      mask &= mask - 1;
    }
  }
#endif
  for (; i < size; ++i) {
    if (line[i] == '\t' && !tab_at(i)) return false;
  }
  if (f != kFields - 1) return false;
  start[f] = field;
  len[f] = size_t(line + size - field);
  return true;
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

LineError ParseLine(const char* line, size_t size, ParsedLine* out) {
  // Field boundaries first: a line of the wrong shape parses nothing.
  const char* start[kFields];
  size_t len[kFields];
  if (!SplitFields(line, size, start, len)) return LineError::kFieldCount;
  if (!ParseFloat(start[0], len[0], &out->label)) return LineError::kNotANumber;
  for (int i = 0; i < kDense; ++i) {
    float x = 0;
    if (!ParseFloat(start[1 + i], len[1 + i], &x)) {
      return LineError::kNotANumber;
    }
    // log(relu(x) + 1); NaN (from "nan") stays NaN as in TF.
    const float y = (x > 0.0f ? x : (x != x ? x : 0.0f)) + 1.0f;
    out->dense[i] = (y != y || y > 3.4028235e38f) ? y : TfLog(y);
  }
  char buf[64 + 2];
  for (int i = 0; i < kCategorical; ++i) {
    const char* s = start[1 + kDense + i];
    size_t n = len[1 + kDense + i];
    if (Missing(s, n)) {
      s = "00000000";
      n = 8;
    }
    uint64_t h;
    if (n <= 64) {
      std::memcpy(buf, s, n);
      size_t k = n;
      if (i >= 10) buf[k++] = char('0' + i / 10);
      buf[k++] = char('0' + i % 10);
      h = util::Fingerprint64(buf, k);
    } else {
      // Rare long field: hash a copy of exact length on the stack.
      char big[4096 + 2];
      if (n > 4096) return LineError::kFieldTooLong;
      std::memcpy(big, s, n);
      size_t k = n;
      if (i >= 10) big[k++] = char('0' + i / 10);
      big[k++] = char('0' + i % 10);
      h = util::Fingerprint64(big, k);
    }
    out->ids[i] = kVocabMod[i](h);
  }
  return LineError::kNone;
}

}  // namespace criteo
}  // namespace batchd

// Criteo lines; see criteo_line.h.
#include "workloads/criteo1tb/criteo_line.h"

#include <farmhash.h>

#include <charconv>
#include <cstring>

namespace batchd {
namespace criteo {

const uint64_t kVocab[kCategorical] = {
    39884406, 39043,    17289,    7420,     20263,  3,        7120,
    1543,     63,       38532951, 2953546,  403346, 10,       2208,
    11938,    155,      4,        976,      14,     39979771, 25641295,
    39664984, 585935,   12972,    108,      36};

namespace {

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
  const char* p = line;
  const char* const end = line + size;
  // Field boundaries first: a line of the wrong shape parses nothing.
  const char* start[kFields];
  size_t len[kFields];
  int f = 0;
  for (;;) {
    const char* tab =
        static_cast<const char*>(std::memchr(p, '\t', size_t(end - p)));
    const char* stop = tab != nullptr ? tab : end;
    if (f == kFields) return LineError::kFieldCount;
    start[f] = p;
    len[f] = size_t(stop - p);
    ++f;
    if (tab == nullptr) break;
    p = tab + 1;
  }
  if (f != kFields) return LineError::kFieldCount;
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
    out->ids[i] = h % kVocab[i];
  }
  return LineError::kNone;
}

}  // namespace criteo
}  // namespace batchd

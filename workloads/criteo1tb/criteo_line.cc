// Criteo lines; see criteo_line.h.
#include "workloads/criteo1tb/criteo_line.h"

#include <farmhash.h>
#include <locale.h>
#include <stdlib.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <utility>

#if defined(__x86_64__)
#include <emmintrin.h>
#endif

namespace batchd {
namespace criteo {

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

// decode_csv's float32 parse of a field: strtof's in the C locale (white
// space before it, a sign, decimal or hexadecimal digits, inf, infinity,
// nan and nan(...) in any case; out of range: +-inf, or 0 and subnormals)
// with nothing after it but ' ', '\v' or '\f' (what TF 2.21 accepts).
bool ParseFloat(const char* p, size_t n, float* out) {
  if (Missing(p, n)) {
    *out = 0.0f;
    return true;
  }
  static const locale_t c_locale = newlocale(LC_ALL_MASK, "C", locale_t(0));
  char small[64];
  std::string large;
  char* s = small;
  if (n < sizeof(small)) {
    std::memcpy(small, p, n);
    small[n] = '\0';
  } else {
    large.assign(p, n);
    s = large.data();
  }
  char* end = nullptr;
  const float v = strtof_l(s, &end, c_locale);
  if (end == s) return false;
  for (; end < s + n; ++end) {
    if (*end != ' ' && *end != '\v' && *end != '\f') return false;
  }
  *out = v;
  return true;
}

// Eight bytes at a time (SWAR) where a field is converted: bytes are in
// memory order, the first at the low end (x86 is little-endian).
constexpr uint64_t kOnes = 0x0101010101010101ull;
constexpr uint64_t kHigh = 0x8080808080808080ull;

uint64_t Load8(const char* p) {
  uint64_t x;
  std::memcpy(&x, p, 8);
  return x;
}

#if !defined(__x86_64__)
// The high bit of each byte of x equal to c.
uint64_t Equal(uint64_t x, uint8_t c) {
  const uint64_t y = x ^ (kOnes * c);
  const uint64_t low7 = ~kHigh;
  return ~(((y & low7) + low7) | y | low7);
}
#endif

// The value of eight decimal digits, the first the most significant.
inline __attribute__((always_inline)) uint64_t EightDigits(uint64_t x) {
  x -= kOnes * '0';
  x = x * 10 + (x >> 8);  // byte pairs
  x = (((x & 0x000000ff000000ffull) * (100 + (1000000ull << 32))) +
       (((x >> 16) & 0x000000ff000000ffull) * (1 + (10000ull << 32)))) >>
      32;
  return x;
}

// The low n bytes of a word, n = 0..8.
constexpr uint64_t kKeep[9] = {0,
                               0xffull,
                               0xffffull,
                               0xffffffull,
                               0xffffffffull,
                               0xffffffffffull,
                               0xffffffffffffull,
                               0xffffffffffffffull,
                               ~0ull};

// The value of a field of n <= 8 bytes, the low n bytes of x: true when
// they are all digits (none: 0).
inline __attribute__((always_inline)) bool Digits(uint64_t x, size_t n,
                                                  uint64_t* value) {
  // A digit's high nibble is 3, also with 6 added (a carry out of a byte
  // of 0xfa or more reaches only bytes after it, and it fails the first).
  const uint64_t keep = kKeep[n];
  const uint64_t high = kOnes * 0xf0, three = kOnes * 0x30;
  if ((((x & high) ^ three) | (((x + kOnes * 6) & high) ^ three)) & keep) {
    return false;
  }
  // The digits to the high end, '0's before them (a digit or'ed with '0'
  // is itself, so that n = 8 needs no case of its own; n = 0 is "0").
  const unsigned shift = unsigned(64 - 8 * n) & 63;
  *value =
      EightDigits(((x & keep) << shift) | ((kOnes * '0') >> ((8 * n) & 63)));
  return true;
}

// A bit per byte of p[0, 64) that is a tab.
inline __attribute__((always_inline)) uint64_t TabMask(const char* p) {
#if defined(__x86_64__)
  const __m128i tab = _mm_set1_epi8('\t');
  const auto m16 = [&](int k) {
    const __m128i v =
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16 * k));
    return uint64_t(uint32_t(_mm_movemask_epi8(_mm_cmpeq_epi8(v, tab))));
  };
  return m16(0) | (m16(1) << 16) | (m16(2) << 32) | (m16(3) << 48);
#else
  uint64_t m = 0;
  for (int k = 0; k < 8; ++k) {
    // Each byte's high bit, gathered into the word's top byte.
    const uint64_t e = Equal(Load8(p + 8 * k), '\t') >> 7;
    m |= ((e * 0x0102040810204080ull) >> 56) << (8 * k);
  }
  return m;
#endif
}

// The bits set in x (x86-64's baseline has no popcnt instruction).
inline __attribute__((always_inline)) uint64_t Ones(uint64_t x) {
  x -= (x >> 1) & 0x5555555555555555ull;
  x = (x & 0x3333333333333333ull) + ((x >> 2) & 0x3333333333333333ull);
  x = (x + (x >> 4)) & 0x0f0f0f0f0f0f0f0full;
  return (x * kOnes) >> 56;
}

// Room FindTabs needs: the tabs of a line, and a block's worth past them.
constexpr size_t kTabRoom = kFields + 64;

// The offsets of a line's tabs in tab[], 64 bytes at a time (the first 8
// of a block stored without a branch each): returns how many the line
// holds, or kFields if more than kFields - 1. Reads no byte outside the
// line.
inline __attribute__((always_inline)) size_t FindTabs(const char* line,
                                                      size_t size,
                                                      uint32_t* tab) {
  size_t n = 0;
  for (size_t base = 0; base < size; base += 64) {
    uint64_t m;
    if (base + 64 <= size) {
      m = TabMask(line + base);
    } else if (size >= 64) {  // the line's last 64 bytes, shifted
      m = TabMask(line + size - 64) >> (64 - (size - base));
    } else {
      char buf[64] = {};
      std::memcpy(buf, line + base, size - base);
      m = TabMask(buf);
    }
    const size_t k = Ones(m);
    uint32_t* p = tab + n;
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) {  // past the last: harmless junk
      p[j] = uint32_t(base + __builtin_ctzll(m | (uint64_t(1) << 63)));
      m &= m - 1;
    }
    for (int j = 8; m != 0; ++j) {
      p[j] = uint32_t(base + __builtin_ctzll(m));
      m &= m - 1;
    }
    n += k;
    if (n >= kFields) return kFields;
  }
  return n;
}

// FarmHash Fingerprint64 (farmhashna::Hash64, as libfarmhash and TF
// compute it) of a field of 8 bytes followed by its column's decimal
// index: strings of 9 or 10 bytes, which the function hashes with its
// 8-to-16-byte case. `w` is the field's bytes as a word.
constexpr uint64_t kK2 = 0x9ae16a3b2f90404full;

uint64_t Rotate(uint64_t v, int s) { return (v >> s) | (v << (64 - s)); }

struct ColumnHash {
  uint64_t mul;   // k2 + 2 * length
  int shift;      // 8 * (length - 8): the last 8 bytes start this far in
  uint64_t tail;  // the index's digits, where they land in the last 8
};

constexpr ColumnHash MakeColumnHash(int i) {
  const int digits = i >= 10 ? 2 : 1;
  const uint64_t suffix =
      i >= 10 ? uint64_t('0' + i / 10) | (uint64_t('0' + i % 10) << 8)
              : uint64_t('0' + i);
  return ColumnHash{kK2 + 2 * uint64_t(8 + digits), 8 * digits,
                    suffix << (64 - 8 * digits)};
}

inline __attribute__((always_inline)) uint64_t Fingerprint8(const ColumnHash& h,
                                                            uint64_t w) {
  const uint64_t a = w + kK2;
  const uint64_t b = (w >> h.shift) | h.tail;
  const uint64_t c = Rotate(b, 37) * h.mul + a;
  const uint64_t d = (Rotate(a, 25) + b) * h.mul;
  // HashLen16(c, d, mul)
  uint64_t x = (c ^ d) * h.mul;
  x ^= x >> 47;
  uint64_t y = (d ^ x) * h.mul;
  y ^= y >> 47;
  return y * h.mul;
}

// The buckets of the columns with few values (a vocabulary of at most
// kMemoVocab: 8 columns, of 3 to 155 values in Criteo), per thread: an
// 8-byte field seen before costs a look-up in a table that stays in the
// core's cache (64 KB) instead of a hash and a remainder. A slot holds the
// field's whole 8 bytes, so that a hit is exact; a field that collides
// with another is hashed again. Larger columns are hashed every time: on
// Criteo's cardinalities their tables would not stay in the cache, and a
// miss to memory costs more than the hash (measured: slower from
// vocabularies of a few thousand on).
constexpr uint64_t kMemoVocab = 256;

constexpr int SlotBits(uint64_t vocab) {
  int bits = 9;
  while ((uint64_t(1) << bits) < 2 * vocab) ++bits;
  return bits;
}

// Where column i's slots start (columns without a memo take none).
constexpr uint64_t MemoBase(int i) {
  uint64_t base = 0;
  for (int c = 0; c < i; ++c) {
    if (kVocab[c] <= kMemoVocab) base += uint64_t(1) << SlotBits(kVocab[c]);
  }
  return base;
}

struct MemoSlot {
  uint64_t word;
  uint64_t bucket;  // + 1; 0: empty (so that the table starts as zeros)
};

// This thread's memo, on the heap: an array in static TLS would sit at the
// top of every thread's stack in the process (civetweb's threads have
// 100 KiB), not only of the threads that parse.
MemoSlot* ThreadMemo() {
  thread_local std::unique_ptr<MemoSlot[]> memo(
      new MemoSlot[MemoBase(kCategorical)]());
  return memo.get();
}

// What decode_csv reads for an empty or "-1" categorical field.
constexpr char kDefaultCategorical[] = "00000000";

// Column i's bucket of field bytes s[0, n), n <= 4096: the general case.
uint32_t Bucket(int i, const char* s, size_t n) {
  char buf[4096 + 2];
  std::memcpy(buf, s, n);
  size_t k = n;
  if (i >= 10) buf[k++] = char('0' + i / 10);
  buf[k++] = char('0' + i % 10);
  return uint32_t(kVocabMod[i](util::Fingerprint64(buf, k)));
}

// TfLog1p of the counts below 2^16 (most of Criteo's): one look-up.
constexpr uint64_t kCountTable = 1 << 16;
const float* CountValues() {
  static const float* const table = [] {
    float* t = new float[kCountTable];
    for (uint64_t v = 0; v < kCountTable; ++v) {
      t[v] = TfLog1p(static_cast<float>(int64_t(v)));
    }
    return t;
  }();
  return table;
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

float Relu(float x) {
  // Subnormals are flushed to zero by TF's threads (FTZ/DAZ).
  return x >= 1.17549435e-38f || x != x ? x : 0.0f;
}

float TfLog1p(float x) {
  const float u = x + 1.0f;
  // x where u == 1 (x tiny or 0) or u == log(u) (u infinite).
  if (u == 1.0f || u > 3.40282347e38f) return x;
  // NaN: x times NaN, which is x quieted.
  if (u != u) return FromBits(Bits(x) | 0x00400000u);
  return x * (TfLog(u) / (u - 1.0f));
}

float Dense(float x) { return TfLog1p(Relu(x)); }

float ScalarDense(float x) {
  if (std::fabs(x) < 1.17549435e-38f) return std::copysign(0.0f, x);
  return std::log1p(x < 0.0f ? 0.0f : x);
}

namespace {

// The fields of a line whose tabs are known (tab[f] ends field f), one
// function per field so that each column's constants are the code's own
// (the loops unrolled): each stores its field's values; false, with `err`
// set, when the line is not an example.
struct Fields {
  const char* line;
  size_t size;
  const uint32_t* tab;
  ParsedLine* out;
  MemoSlot* memo = ThreadMemo();
  LineError err = LineError::kNone;

  // Field f's bytes: [First(f), tab[f]), the last's to the line's end.
  template <int F>
  __attribute__((always_inline)) size_t First() const {
    if constexpr (F == 0) {
      return 0;
    } else {
      return size_t(tab[F - 1]) + 1;
    }
  }

  // The label (F = 0) and the dense fields: up to 8 digits (or none)
  // converted at once, anything else through decode_csv's float. A field
  // before the categorical ones has at least 26 bytes after it: loading 9
  // from its start stays in the line.
  template <int F>
  __attribute__((always_inline)) bool Number(const float* counts) {
    const size_t at = First<F>();
    const size_t n = tab[F] - at;
    uint64_t v;
    float x;
    if (n <= 8 && Digits(Load8(line + at), n, &v)) {
      x = static_cast<float>(int64_t(v));
      if constexpr (F > 0) {
        out->counts[F - 1] = x;
        out->dense[F - 1] = v < kCountTable ? counts[v] : TfLog1p(x);
      }
    } else if (line[at] == '-' && n >= 2 && n <= 9 &&
               Digits(Load8(line + at + 1), n - 1, &v) && (n > 2 || v != 1)) {
      // A negative count (not the literal "-1", decode_csv's missing one):
      // its relu is 0.
      x = -static_cast<float>(int64_t(v));
      if constexpr (F > 0) {
        out->counts[F - 1] = x;
        out->dense[F - 1] = 0.0f;
      }
    } else {
      if (!ParseFloat(line + at, n, &x)) {
        err = LineError::kNotANumber;
        return false;
      }
      if constexpr (F > 0) {
        out->counts[F - 1] = x;
        out->dense[F - 1] = Dense(x);
      }
    }
    if constexpr (F == 0) out->label = x;
    return true;
  }

  // Categorical field I: 8 bytes (every non-empty field of Criteo's
  // files) or none hashed in registers, anything else in general.
  template <int I>
  __attribute__((always_inline)) bool Categorical() {
    constexpr int kF = 1 + kDense + I;
    const size_t at = First<kF>();
    const size_t n = (kF == kFields - 1 ? size : size_t(tab[kF])) - at;
    if (n == 8 || n == 0) {
      constexpr ColumnHash kHash = MakeColumnHash(I);
      constexpr FastMod kMod(kVocab[I]);
      const char* src = n == 8 ? line + at : kDefaultCategorical;
      const uint64_t w = Load8(src);
      if constexpr (kVocab[I] <= kMemoVocab) {
        MemoSlot& slot = memo[MemoBase(I) + ((w * 0x9e3779b97f4a7c15ull) >>
                                             (64 - SlotBits(kVocab[I])))];
        if (slot.word != w || slot.bucket == 0) {
          slot.word = w;
          slot.bucket = kMod(Fingerprint8(kHash, w)) + 1;
        }
        out->ids[I] = slot.bucket - 1;
      } else {
        out->ids[I] = kMod(Fingerprint8(kHash, w));
      }
    } else {
      const char* s = line + at;
      size_t len = n;
      if (Missing(s, len)) {
        s = kDefaultCategorical;
        len = 8;
      }
      if (len > 4096) {
        err = LineError::kFieldTooLong;
        return false;
      }
      out->ids[I] = Bucket(I, s, len);
    }
    return true;
  }

  template <size_t... F>
  __attribute__((always_inline)) bool Numbers(std::index_sequence<F...>) {
    const float* const counts = CountValues();
    return (Number<int(F)>(counts) && ...);
  }
  template <size_t... I>
  __attribute__((always_inline)) bool Categoricals(std::index_sequence<I...>) {
    return (Categorical<int(I)>() && ...);
  }
};

}  // namespace

LineError ParseLine(const char* line, size_t size, ParsedLine* out) {
  uint32_t tab[kTabRoom];
  // A line that is not an example is a field-count error first, as when
  // fields were split before any was parsed.
  if (FindTabs(line, size, tab) != kFields - 1) return LineError::kFieldCount;
  Fields f{line, size, tab, out};
  if (f.Numbers(std::make_index_sequence<1 + kDense>()) &&
      f.Categoricals(std::make_index_sequence<kCategorical>())) {
    return LineError::kNone;
  }
  return f.err;
}

}  // namespace criteo
}  // namespace batchd

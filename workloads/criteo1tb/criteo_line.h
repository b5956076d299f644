// One line of Criteo 1TB's TSV day files turned into AlgoPerf's values
// (algoperf/workloads/criteo1tb/input_pipeline.py, `_parse_example_fn`):
// a label, 13 dense features log(max(x, 0) + 1) and 26 categorical
// features hashed into their vocabularies.
//
// Thread safety: the functions are pure.
#ifndef BATCHD_WORKLOADS_CRITEO1TB_CRITEO_LINE_H_
#define BATCHD_WORKLOADS_CRITEO1TB_CRITEO_LINE_H_

#include <cstddef>
#include <cstdint>
#include <memory>

namespace batchd {
namespace criteo {

constexpr int kDense = 13;
constexpr int kCategorical = 26;
constexpr int kFields = 1 + kDense + kCategorical;  // 40
constexpr int kInputs = kDense + kCategorical;      // 39

// AlgoPerf's vocabulary size of each categorical column.
extern const uint64_t kVocab[kCategorical];

// TF's float32 log on CPU: Eigen's vectorised one (frexp range reduction to
// [sqrt(1/2), sqrt(2)), a (3,3) rational approximation of log(1 + x), then
// e * ln 2 added), evaluated with separate multiplies and adds as TF's
// wheels do (no FMA). Bit-exact against tf.math.log for every x >= 1 that
// the tests try; x must be finite and >= 1 here.
float TfLog(float x);

// x % d for the vocabulary sizes without a 64-bit division (Lemire, Kaser
// and Kurz, "Faster remainder by direct computation", 2019: with a 128-bit
// reciprocal M = ceil(2^128 / d), x % d = ((M * x mod 2^128) * d) >> 128,
// exact for every 64-bit x and every d > 1).
struct FastMod {
  unsigned __int128 m = 0;
  uint64_t d = 1;
  explicit FastMod(uint64_t divisor)
      : m(~(unsigned __int128)0 / divisor + 1), d(divisor) {}
  uint64_t operator()(uint64_t x) const {
    const unsigned __int128 low = m * x;  // mod 2^128
    const uint64_t lh = uint64_t(low >> 64), ll = uint64_t(low);
    const unsigned __int128 top =
        (unsigned __int128)lh * d + (((unsigned __int128)ll * d) >> 64);
    return uint64_t(top >> 64);
  }
};

// A line's values. Ids exact (before AlgoPerf's cast to float32).
struct ParsedLine {
  float label = 0;
  float dense[kDense] = {};
  uint64_t ids[kCategorical] = {};
};

// Why a line is not a Criteo example.
enum class LineError { kNone, kFieldCount, kNotANumber, kFieldTooLong };
const char* LineErrorName(LineError e);

// The buckets of categorical values already hashed, for one parser of a
// stream: a field of 8 lowercase hex characters (every non-empty field of
// Criteo's files) is its 32-bit value, and column c's bucket of that value
// never changes, so a value seen before costs a table look-up instead of a
// FarmHash and a remainder. Criteo's values are heavy-tailed (a few
// values make most of a column), which is what makes the memo pay.
// Direct-mapped, a column's table at most 2^16 slots (about 7 MB in all,
// zero pages until touched).
//
// Thread safety: Find and Keep may be called from any thread at once (a
// slot is one word, read and written atomically); a slot overwritten by
// another thread is only a miss.
class HashMemo {
 public:
  HashMemo();
  HashMemo(const HashMemo&) = delete;
  HashMemo& operator=(const HashMemo&) = delete;
  // Column c's bucket of value v, or UINT32_MAX when not kept.
  uint32_t Find(int c, uint32_t v) const {
    const uint64_t e =
        __atomic_load_n(&slots_[base_[c] + Slot(c, v)], __ATOMIC_RELAXED);
    return e != 0 && uint32_t(e >> 32) == v ? uint32_t(e) - 1 : UINT32_MAX;
  }
  void Prefetch(int c, uint32_t v) const {
    __builtin_prefetch(&slots_[base_[c] + Slot(c, v)]);
  }
  void Keep(int c, uint32_t v, uint32_t bucket) {
    __atomic_store_n(&slots_[base_[c] + Slot(c, v)],
                     (uint64_t(v) << 32) | (uint64_t(bucket) + 1),
                     __ATOMIC_RELAXED);
  }

 private:
  uint64_t Slot(int c, uint32_t v) const {
    return (v * 0x9e3779b1u) >> shift_[c];
  }
  struct Free {
    void operator()(uint64_t* p) const;
  };
  std::unique_ptr<uint64_t[], Free> slots_;  // 0: empty
  uint64_t base_[kCategorical] = {};
  int shift_[kCategorical] = {};
};

// Parses `line` (without its '\n') as AlgoPerf's decode_csv does with
// field_delim '\t' and na_value '-1': an empty field or "-1" takes the
// default (0.0; categoricals "00000000"); the label and dense fields are
// float32 numbers (other negatives are kept and then clipped by the
// log's max(x, 0)); categorical field i is FarmHash Fingerprint64 of its
// bytes followed by decimal i, modulo kVocab[i] (to_hash_bucket_fast).
// `memo` (may be null) keeps and supplies buckets already computed. One
// pass over the line for the usual fields (digits; 8 hex characters);
// anything else takes the general path. No allocation.
LineError ParseLine(const char* line, size_t size, ParsedLine* out,
                    HashMemo* memo = nullptr);

}  // namespace criteo
}  // namespace batchd

#endif  // BATCHD_WORKLOADS_CRITEO1TB_CRITEO_LINE_H_

// One line of Criteo 1TB's TSV day files turned into AlgoPerf's values
// (algoperf/workloads/criteo1tb/input_pipeline.py, `_parse_example_fn`):
// a label, 13 dense features log(relu(x) + 1) as TF computes it and 26
// categorical features hashed into their vocabularies.
//
// Thread safety: any thread may call the functions at once (ParseLine's
// memo of buckets is the calling thread's own).
#ifndef BATCHD_WORKLOADS_CRITEO1TB_CRITEO_LINE_H_
#define BATCHD_WORKLOADS_CRITEO1TB_CRITEO_LINE_H_

#include <cstddef>
#include <cstdint>

namespace batchd {
namespace criteo {

constexpr int kDense = 13;
constexpr int kCategorical = 26;
constexpr int kFields = 1 + kDense + kCategorical;  // 40
constexpr int kInputs = kDense + kCategorical;      // 39

// AlgoPerf's vocabulary size of each categorical column.
inline constexpr uint64_t kVocab[kCategorical] = {
    39884406, 39043,    17289,    7420,     20263,  3,     7120, 1543, 63,
    38532951, 2953546,  403346,   10,       2208,   11938, 155,  4,    976,
    14,       39979771, 25641295, 39664984, 585935, 12972, 108,  36};

// TF's float32 log on CPU: Eigen's vectorised one (frexp range reduction to
// [sqrt(1/2), sqrt(2)), a (3,3) rational approximation of log(1 + x), then
// e * ln 2 added), evaluated with separate multiplies and adds as TF's
// wheels do (no FMA). Bit-exact against tf.math.log for every x >= 1 that
// the tests try; x must be finite and >= 1 here.
float TfLog(float x);

// AlgoPerf's dense value of a count x (the field as decode_csv reads a
// float32: empty or "-1" is 0), in the two ways TF computes it.
// AlgoPerf's `tf.math.log(relu(x) + 1)` runs as a graph inside tf.data,
// whose optimizer rewrites log(x + 1) into log1p(x). TF computes a column
// of n rows 8 floats at a time (Eigen's packets), and its last (n mod 8)
// elements one at a time: AlgoPerf's batch of n rows has the scalar
// values in its rows from n - n % 8 on.
//
// Vectorised: relu (negatives, -0 and subnormals +0: TF's threads flush
// subnormals to zero; NaN stays), then Eigen's log1p: u = x + 1, x itself
// where u == 1 or u is infinite, NaN quieted, else x * (log(u) / (u - 1))
// with TfLog's log.
float Dense(float x);
// Scalar: relu as std::max(x, 0) (x < 0 ? 0 : x: -0 stays -0), subnormals
// flushed to a zero of their sign, then the C library's log1pf.
float ScalarDense(float x);
// The steps of Dense: relu, and log1p of a relu'd count.
float Relu(float x);
float TfLog1p(float x);

// x % d without a 64-bit division (which compilers emit for a 64-bit
// remainder by a constant), for 1 < d < 2^63: with M = ceil(2^64 / d),
// x * M / 2^64 lies in [x / d, x / d + 1), so q = (x * M) >> 64 is
// floor(x / d) or one more, and x - q * d is the remainder or the
// remainder - d (negative: d is added back, without a branch).
struct FastMod {
  uint64_t m = 0;
  uint64_t d = 1;
  constexpr explicit FastMod(uint64_t divisor)
      : m(~uint64_t(0) / divisor + 1), d(divisor) {}
  __attribute__((always_inline)) constexpr uint64_t operator()(
      uint64_t x) const {
    const uint64_t q = uint64_t(((unsigned __int128)x * m) >> 64);
    const int64_t r = int64_t(x - q * d);  // in [-d, d)
    return uint64_t(r + (int64_t(d) & (r >> 63)));
  }
};

// A line's values. Ids exact (before AlgoPerf's cast to float32).
struct ParsedLine {
  float label = 0;
  float dense[kDense] = {};   // Dense(counts[i])
  float counts[kDense] = {};  // the fields' values (before relu)
  uint64_t ids[kCategorical] = {};
};

// Why a line is not a Criteo example.
enum class LineError { kNone, kFieldCount, kNotANumber, kFieldTooLong };
const char* LineErrorName(LineError e);

// Parses `line` (without its '\n') as AlgoPerf's decode_csv does with
// field_delim '\t' and na_value '-1': an empty field or "-1" takes the
// default (0.0; categoricals "00000000"); the label and dense fields are
// float32 numbers (other negatives are kept, then clipped by relu);
// categorical field i is FarmHash Fingerprint64 of its bytes followed by
// decimal i, modulo kVocab[i] (to_hash_bucket_fast). One pass over the
// line: its tabs found 64 bytes at a time, a field of up to 8 digits
// converted at once, a categorical field of 8 bytes (or none) hashed in
// registers; anything else takes the general path. No allocation.
LineError ParseLine(const char* line, size_t size, ParsedLine* out);

}  // namespace criteo
}  // namespace batchd

#endif  // BATCHD_WORKLOADS_CRITEO1TB_CRITEO_LINE_H_

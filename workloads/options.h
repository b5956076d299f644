// A workload's options: declared once, in its registry entry, as a table of
// OptionSpec (key, type, default, bounds, help), and parsed against that
// table by CreateWorkload before the workload's factory runs
// (workloads/workload_entry.h). Unknown keys are refused naming the known
// ones, and a bad value is an error naming the workload, the option and
// what it must be ("wmt: option max_length='x' is not an integer in [1,
// 4096]"). Numbers are strict: digits alone, nothing around them (a
// caller's " 8\r\n" is refused, not read as 8). Messages quote values as
// given: whatever shows them escapes them (base/format.h's Printable).
// `batchd --help` and `batchctl plan` print the same table.
//
// Thread safety: OptionSpec tables are constant; OptionValues is
// immutable after Parse.
#ifndef BATCHD_WORKLOADS_OPTIONS_H_
#define BATCHD_WORKLOADS_OPTIONS_H_

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace batchd {

// Whether `v` is a plain decimal number: ASCII digits only (after one
// leading '-' when `allow_minus`), at most 20 of them; no sign, white space
// or other byte around them, which absl::SimpleAtoi would skip.
bool IsDecimal(absl::string_view v, bool allow_minus);

// A number of the form "1.5", "2", "1e-3": digits, a point, an exponent and
// signs only (no white space, no inf or nan); false otherwise.
bool ParseStrictDouble(absl::string_view v, double* out);

enum class OptionType : uint8_t {
  kUint,    // decimal digits, in [lo, hi]
  kNumber,  // a decimal number (ParseStrictDouble), in [min, max]
  kChoice,  // one of `choices`
  kText,    // any text; the workload checks it
};

// One option of a workload. Made with the functions below, so that a
// table reads as a list of declarations.
struct OptionSpec {
  const char* key = "";
  OptionType type = OptionType::kText;
  const char* help = "";  // one line: what it sets (its default and bounds are
                          // printed from the fields)
  uint64_t uint_default = 0, lo = 0, hi = UINT64_MAX;  // kUint
  double number_default = 0, min = 0, max = 0;         // kNumber
  const char* text_default = "";                       // kChoice, kText
  absl::Span<const char* const> choices;               // kChoice
};

// The fields every kind of option has; the constructors below add theirs.
constexpr OptionSpec OptionOf(const char* key, OptionType type,
                              const char* help) {
  OptionSpec o{};
  o.key = key;
  o.type = type;
  o.help = help;
  return o;
}
constexpr OptionSpec UintOption(const char* key, uint64_t def, uint64_t lo,
                                uint64_t hi, const char* help) {
  OptionSpec o = OptionOf(key, OptionType::kUint, help);
  o.uint_default = def;
  o.lo = lo;
  o.hi = hi;
  return o;
}
constexpr OptionSpec NumberOption(const char* key, double def, double min,
                                  double max, const char* help) {
  OptionSpec o = OptionOf(key, OptionType::kNumber, help);
  o.number_default = def;
  o.min = min;
  o.max = max;
  return o;
}
// `def` is one of `choices`.
constexpr OptionSpec ChoiceOption(const char* key, const char* def,
                                  absl::Span<const char* const> choices,
                                  const char* help) {
  OptionSpec o = OptionOf(key, OptionType::kChoice, help);
  o.text_default = def;
  o.choices = choices;
  return o;
}
constexpr OptionSpec TextOption(const char* key, const char* def,
                                const char* help) {
  OptionSpec o = OptionOf(key, OptionType::kText, help);
  o.text_default = def;
  return o;
}

// The default as a spec would spell it ("224", "1.25", "nhwc").
std::string OptionDefault(const OptionSpec& spec);
// What a value must be, for help text: "1 .. 4096", "1 .. 2^40" (powers
// of two from 2^20 on), "1 .. 8", "nhwc, nchw"; "" for text.
std::string OptionBounds(const OptionSpec& spec);

// A stream's options, parsed against its workload's table: each key's
// value, given or the default, by key.
class OptionValues {
 public:
  // InvalidArgument "<workload>: unknown option 'k' (known: a, b)" for a
  // key not in `specs`, else the first value that is not what its spec
  // says ("<workload>: option k='v' is not an integer in [lo, hi]").
  static absl::StatusOr<OptionValues> Parse(
      absl::string_view workload, absl::Span<const OptionSpec> specs,
      const std::map<std::string, std::string>& given);

  // The value of `key`, which must be in the table with that type (a
  // programming error aborts: the workload asked for an option it did not
  // declare).
  uint64_t Uint(absl::string_view key) const;
  double Number(absl::string_view key) const;
  const std::string& Text(absl::string_view key) const;  // kChoice, kText
  // Whether the spec gave `key` (else its value is the default).
  bool Given(absl::string_view key) const;
  // InvalidArgument "<workload>: option k='v' <what>", for checks of the
  // workload's own (a bound that depends on another option or the split).
  absl::Status Invalid(absl::string_view key, absl::string_view what) const;
  // Every option of the table, in its order, with its value as text.
  std::vector<std::pair<const OptionSpec*, std::string>> Listed() const;

 private:
  struct Value {
    const OptionSpec* spec = nullptr;
    bool given = false;
    std::string text;  // as given, or the default
    uint64_t uint = 0;
    double number = 0;
  };
  const Value& Find(absl::string_view key, OptionType type) const;

  std::string workload_;
  std::vector<Value> values_;  // the table's order
};

}  // namespace batchd

#endif  // BATCHD_WORKLOADS_OPTIONS_H_

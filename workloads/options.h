// A workload's options (WorkloadConfig::options), read the same way by every
// workload: unknown keys are refused naming the known ones, and a bad value
// is an error naming the workload, the option and what it must be
// ("wmt: option max_length='x' is not an integer in [1, 4096]"). Numbers
// are strict: digits alone, nothing around them (a caller's " 8\r\n" is
// refused, not read as 8). Messages quote values as given: whatever shows
// them escapes them (base/format.h's Printable).
//
// Thread safety: immutable after Create.
#ifndef BATCHD_WORKLOADS_OPTIONS_H_
#define BATCHD_WORKLOADS_OPTIONS_H_

#include <cstdint>
#include <initializer_list>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace batchd {

// Whether `v` is a plain decimal number: ASCII digits only (after one
// leading '-' when `allow_minus`), at most 20 of them; no sign, white space
// or other byte around them, which absl::SimpleAtoi would skip.
bool IsDecimal(absl::string_view v, bool allow_minus);

// A number of the form "1.5", "2", "1e-3": digits, a point, an exponent and
// signs only (no white space, no inf or nan); false otherwise.
bool ParseStrictDouble(absl::string_view v, double* out);

class WorkloadOptions {
 public:
  // InvalidArgument "<workload>: unknown option 'k' (known: a, b)" when an
  // option is not in `known`. `options` must outlive the result.
  static absl::StatusOr<WorkloadOptions> Create(
      const std::string& workload,
      const std::map<std::string, std::string>& options,
      std::initializer_list<const char*> known);

  bool Has(const std::string& key) const;
  // The value of `key`, or `def` when it is not given.
  std::string String(const std::string& key, const std::string& def) const;
  // `key` as an integer in [lo, hi], or `def` when it is not given (def
  // is not checked).
  absl::StatusOr<uint64_t> Uint(const std::string& key, uint64_t def,
                                uint64_t lo = 0,
                                uint64_t hi = UINT64_MAX) const;
  absl::StatusOr<int> Int(const std::string& key, int def, int lo,
                          int hi) const;
  // `key` as one of `choices`, or `def`.
  absl::StatusOr<std::string> Choice(
      const std::string& key, const std::string& def,
      std::initializer_list<const char*> choices) const;
  // InvalidArgument "<workload>: option k='v' <what>", for checks of
  // their own.
  absl::Status Invalid(const std::string& key, const std::string& what) const;

 private:
  WorkloadOptions(std::string workload,
                  const std::map<std::string, std::string>& options)
      : workload_(std::move(workload)), options_(&options) {}

  std::string workload_;
  const std::map<std::string, std::string>* options_;
};

}  // namespace batchd

#endif  // BATCHD_WORKLOADS_OPTIONS_H_

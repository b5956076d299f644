// Option parsing shared by every workload; see options.h.
#include "workloads/options.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace batchd {

bool IsDecimal(absl::string_view v, bool allow_minus) {
  if (allow_minus && !v.empty() && v[0] == '-') v.remove_prefix(1);
  return !v.empty() && v.size() <= 20 &&
         std::all_of(v.begin(), v.end(),
                     [](char c) { return c >= '0' && c <= '9'; });
}

bool ParseStrictDouble(absl::string_view v, double* out) {
  // absl::SimpleAtod skips white space and takes "inf" and "nan": digits,
  // one sign, a point and an exponent only.
  if (v.empty() || v.size() > 64) return false;
  for (char c : v) {
    const bool ok = (c >= '0' && c <= '9') || c == '.' || c == 'e' ||
                    c == 'E' || c == '+' || c == '-';
    if (!ok) return false;
  }
  return absl::SimpleAtod(v, out);
}

absl::StatusOr<WorkloadOptions> WorkloadOptions::Create(
    const std::string& workload,
    const std::map<std::string, std::string>& options,
    std::initializer_list<const char*> known) {
  for (const auto& entry : options) {
    // Not a structured binding: clang 14 (the fuzz build) cannot capture one.
    const std::string& key = entry.first;
    if (std::none_of(known.begin(), known.end(),
                     [&](const char* k) { return key == k; })) {
      return absl::InvalidArgumentError(
          absl::StrCat(workload, ": unknown option '", key,
                       "' (known: ", absl::StrJoin(known, ", "), ")"));
    }
  }
  return WorkloadOptions(workload, options);
}

bool WorkloadOptions::Has(const std::string& key) const {
  return options_->count(key) != 0;
}

std::string WorkloadOptions::String(const std::string& key,
                                    const std::string& def) const {
  auto it = options_->find(key);
  return it == options_->end() ? def : it->second;
}

absl::StatusOr<uint64_t> WorkloadOptions::Uint(const std::string& key,
                                               uint64_t def, uint64_t lo,
                                               uint64_t hi) const {
  auto it = options_->find(key);
  if (it == options_->end()) return def;
  uint64_t v;
  // Strict: absl::SimpleAtoi alone takes white space (CR, LF, VT, FF)
  // around the digits, and a '+'.
  if (!IsDecimal(it->second, /*allow_minus=*/false) ||
      !absl::SimpleAtoi(it->second, &v) || v < lo || v > hi) {
    return Invalid(
        key, lo == 0 && hi == UINT64_MAX
                 ? std::string("is not an unsigned integer")
                 : absl::StrCat("is not an integer in [", lo, ", ", hi, "]"));
  }
  return v;
}

absl::StatusOr<int> WorkloadOptions::Int(const std::string& key, int def,
                                         int lo, int hi) const {
  auto it = options_->find(key);
  if (it == options_->end()) return def;
  int v;
  if (!IsDecimal(it->second, /*allow_minus=*/true) ||
      !absl::SimpleAtoi(it->second, &v) || v < lo || v > hi) {
    return Invalid(key,
                   absl::StrCat("is not an integer in [", lo, ", ", hi, "]"));
  }
  return v;
}

absl::StatusOr<std::string> WorkloadOptions::Choice(
    const std::string& key, const std::string& def,
    std::initializer_list<const char*> choices) const {
  const std::string v = String(key, def);
  if (std::none_of(choices.begin(), choices.end(),
                   [&](const char* c) { return v == c; })) {
    return Invalid(
        key, absl::StrCat("is not one of ", absl::StrJoin(choices, ", ")));
  }
  return v;
}

absl::Status WorkloadOptions::Invalid(const std::string& key,
                                      const std::string& what) const {
  return absl::InvalidArgumentError(absl::StrCat(
      workload_, ": option ", key, "='", String(key, ""), "' ", what));
}

}  // namespace batchd

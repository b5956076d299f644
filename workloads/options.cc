// Option parsing shared by every workload; see options.h.
#include "workloads/options.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

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

std::string OptionDefault(const OptionSpec& spec) {
  switch (spec.type) {
    case OptionType::kUint:
      return absl::StrCat(spec.uint_default);
    case OptionType::kNumber:
      return absl::StrCat(spec.number_default);
    case OptionType::kChoice:
    case OptionType::kText:
      break;
  }
  return spec.text_default;
}

namespace {

// A bound as people write it: a power of two from 2^20 on as "2^k"
// (1099511627776 is 2^40), others in decimal.
std::string BoundText(uint64_t v) {
  if (v >= (uint64_t(1) << 20) && (v & (v - 1)) == 0) {
    int k = 0;
    while ((uint64_t(1) << k) != v) ++k;
    return absl::StrCat("2^", k);
  }
  return absl::StrCat(v);
}

}  // namespace

std::string OptionBounds(const OptionSpec& spec) {
  switch (spec.type) {
    case OptionType::kUint:
      return absl::StrCat(BoundText(spec.lo), " .. ", BoundText(spec.hi));
    case OptionType::kNumber:
      return absl::StrCat(spec.min, " .. ", spec.max);
    case OptionType::kChoice:
      return absl::StrJoin(spec.choices, ", ");
    case OptionType::kText:
      break;
  }
  return "";
}

absl::StatusOr<OptionValues> OptionValues::Parse(
    absl::string_view workload, absl::Span<const OptionSpec> specs,
    const std::map<std::string, std::string>& given) {
  OptionValues out;
  out.workload_ = std::string(workload);
  for (const auto& entry : given) {
    // Not a structured binding: clang 14 (the fuzz build) cannot capture one.
    const std::string& key = entry.first;
    if (std::none_of(specs.begin(), specs.end(),
                     [&](const OptionSpec& s) { return key == s.key; })) {
      std::vector<const char*> known;
      for (const OptionSpec& s : specs) known.push_back(s.key);
      return absl::InvalidArgumentError(
          absl::StrCat(workload, ": unknown option '", key,
                       "' (known: ", absl::StrJoin(known, ", "), ")"));
    }
  }
  for (const OptionSpec& spec : specs) {
    Value v;
    v.spec = &spec;
    auto it = given.find(spec.key);
    v.given = it != given.end();
    v.text = v.given ? it->second : OptionDefault(spec);
    out.values_.push_back(v);
  }
  for (Value& v : out.values_) {
    const OptionSpec& spec = *v.spec;
    switch (spec.type) {
      case OptionType::kUint:
        v.uint = spec.uint_default;
        // Strict: absl::SimpleAtoi alone takes white space (CR, LF, VT,
        // FF) around the digits, and a '+'.
        if (v.given && (!IsDecimal(v.text, /*allow_minus=*/false) ||
                        !absl::SimpleAtoi(v.text, &v.uint) ||
                        v.uint < spec.lo || v.uint > spec.hi)) {
          return out.Invalid(
              spec.key, spec.lo == 0 && spec.hi == UINT64_MAX
                            ? std::string("is not an unsigned integer")
                            : absl::StrCat("is not an integer in [", spec.lo,
                                           ", ", spec.hi, "]"));
        }
        break;
      case OptionType::kNumber:
        v.number = spec.number_default;
        if (v.given && (!ParseStrictDouble(v.text, &v.number) ||
                        !(v.number >= spec.min && v.number <= spec.max))) {
          return out.Invalid(
              spec.key, absl::StrCat("is not a number in [", spec.min, ", ",
                                     spec.max, "]"));
        }
        break;
      case OptionType::kChoice:
        if (std::none_of(spec.choices.begin(), spec.choices.end(),
                         [&](const char* c) { return v.text == c; })) {
          return out.Invalid(spec.key,
                             absl::StrCat("is not one of ",
                                          absl::StrJoin(spec.choices, ", ")));
        }
        break;
      case OptionType::kText:
        break;
    }
  }
  return out;
}

const OptionValues::Value& OptionValues::Find(absl::string_view key,
                                              OptionType type) const {
  for (const Value& v : values_) {
    if (key == v.spec->key && type == v.spec->type) return v;
  }
  // The workload reads an option its entry does not declare (or as
  // another type): a bug in the workload, never the caller's input.
  std::fprintf(stderr,
               "batchd: %s reads option '%.*s', which it does not "
               "declare as such\n",
               workload_.c_str(), int(key.size()), key.data());
  std::abort();
}

uint64_t OptionValues::Uint(absl::string_view key) const {
  return Find(key, OptionType::kUint).uint;
}

double OptionValues::Number(absl::string_view key) const {
  return Find(key, OptionType::kNumber).number;
}

const std::string& OptionValues::Text(absl::string_view key) const {
  for (const Value& v : values_) {
    if (key == v.spec->key && v.spec->type == OptionType::kChoice) {
      return v.text;
    }
  }
  return Find(key, OptionType::kText).text;
}

bool OptionValues::Given(absl::string_view key) const {
  for (const Value& v : values_) {
    if (key == v.spec->key) return v.given;
  }
  return false;
}

absl::Status OptionValues::Invalid(absl::string_view key,
                                   absl::string_view what) const {
  std::string value;
  for (const Value& v : values_) {
    if (key == v.spec->key && v.given) value = v.text;
  }
  return absl::InvalidArgumentError(
      absl::StrCat(workload_, ": option ", key, "='", value, "' ", what));
}

std::vector<std::pair<const OptionSpec*, std::string>> OptionValues::Listed()
    const {
  std::vector<std::pair<const OptionSpec*, std::string>> out;
  for (const Value& v : values_) out.emplace_back(v.spec, v.text);
  return out;
}

}  // namespace batchd

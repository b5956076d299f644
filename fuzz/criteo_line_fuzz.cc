// libFuzzer target for a Criteo 1TB line (workloads/criteo1tb/criteo_line.h),
// as the day files' lines are parsed: any bytes must give the line's values
// or a LineError, never a crash or a read past the line (the parse loads 8
// and 16 bytes at a time). A line that parses must have the rule's values,
// whichever path each field took: its fields split at the tabs, numbers
// through strtof (decode_csv's) then relu and TF's log1p, categorical fields
// through libfarmhash's Fingerprint64 of field + column, modulo the vocab.
#include <farmhash.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "fuzz/fuzz_util.h"
#include "workloads/criteo1tb/criteo_line.h"

namespace {

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace batchd::criteo;
  // libFuzzer's own buffer of exactly `size` bytes, so that AddressSanitizer
  // sees a read past them (a std::string copy would hold a terminator, and
  // a short one lives in the string's inline buffer).
  const char* const line = reinterpret_cast<const char*>(data);
  ParsedLine p;
  if (ParseLine(line, size, &p) != LineError::kNone) return 0;
  const std::string s(line, size);
  size_t at = 0;
  for (int f = 0; f < kFields; ++f) {
    const size_t tab = f + 1 < kFields ? s.find('\t', at) : s.size();
    std::string v = s.substr(at, tab - at);
    at = tab + 1;
    if (v.empty() || v == "-1") v = f <= kDense ? "0" : "00000000";
    if (f == 0 || f > kDense) {
      if (f == 0 && Bits(std::strtof(v.c_str(), nullptr)) != Bits(p.label)) {
        batchd::fuzz::Fail("a label off the rule");
      }
      if (f == 0) continue;
      const int i = f - 1 - kDense;
      v += std::to_string(i);
      if (p.ids[i] != util::Fingerprint64(v.data(), v.size()) % kVocab[i]) {
        batchd::fuzz::Fail("an id off the rule");
      }
      continue;
    }
    const float c = std::strtof(v.c_str(), nullptr);
    if (Bits(p.counts[f - 1]) != Bits(c) ||
        Bits(p.dense[f - 1]) != Bits(TfLog1p(Relu(c)))) {
      batchd::fuzz::Fail("a dense value off the rule");
    }
  }
  return 0;
}

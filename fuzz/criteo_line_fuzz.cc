// libFuzzer target for a Criteo 1TB line (workloads/criteo1tb/criteo_line.h),
// as the day files' lines are parsed: any bytes must give the line's values
// or a LineError, never a crash or a read past the line (the parse loads 8
// bytes at a time). The bucket memo must not change a result: each line is
// parsed without it, then twice through one memo kept across inputs (the
// second finds what the first kept, and earlier inputs' values collide in
// its slots).
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "fuzz/fuzz_util.h"
#include "workloads/criteo1tb/criteo_line.h"

namespace {

bool Same(const batchd::criteo::ParsedLine& a,
          const batchd::criteo::ParsedLine& b) {
  return std::memcmp(&a.label, &b.label, sizeof a.label) == 0 &&
         std::memcmp(a.dense, b.dense, sizeof a.dense) == 0 &&
         std::memcmp(a.ids, b.ids, sizeof a.ids) == 0;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace batchd::criteo;
  static HashMemo* memo = new HashMemo();
  // libFuzzer's own buffer of exactly `size` bytes, so that AddressSanitizer
  // sees a read past them (a std::string copy would hold a terminator, and
  // a short one lives in the string's inline buffer).
  const char* const line = reinterpret_cast<const char*>(data);
  ParsedLine plain, first, again;
  const LineError e = ParseLine(line, size, &plain);
  if (ParseLine(line, size, &first, memo) != e ||
      ParseLine(line, size, &again, memo) != e) {
    batchd::fuzz::Fail("the memo changed whether the line parses");
  }
  if (e != LineError::kNone) return 0;
  if (!Same(plain, first) || !Same(plain, again)) {
    batchd::fuzz::Fail("the memo changed a value");
  }
  for (int i = 0; i < kCategorical; ++i) {
    if (plain.ids[i] >= kVocab[i]) batchd::fuzz::Fail("an id past its vocab");
  }
  return 0;
}

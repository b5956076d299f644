// libFuzzer target for the WMT length table as the cache hands it back
// (workloads/wmt/length_cache.h, kind "wmt-lengths"): any value gives a
// table or a refusal, never a crash; a table is accepted only when it holds
// exactly the pairs asked for, each a length up to max_length or a mark,
// and it encodes back to the very bytes it was read from.
//
// Input: byte 0 is max_length (0-255); the rest is the value, read for as
// many pairs as it holds whole (and for one more, which must be refused).
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "fuzz/fuzz_util.h"
#include "workloads/wmt/length_cache.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint64_t max_length = data[0];
  const absl::string_view value(reinterpret_cast<const char*>(data) + 1,
                                size - 1);
  const uint64_t n = value.size() / 4;
  std::vector<batchd::wmt::PackedLengths> lengths;
  if (batchd::wmt::DecodeLengths(value, n + 1, max_length, &lengths)) {
    batchd::fuzz::Fail("a table of more pairs than the value holds");
  }
  if (!batchd::wmt::DecodeLengths(value, n, max_length, &lengths)) return 0;
  if (value.size() % 4 != 0) batchd::fuzz::Fail("a torn pair accepted");
  if (lengths.size() != n) batchd::fuzz::Fail("not the pairs asked for");
  for (size_t i = 0; i < n; ++i) {
    const auto& l = lengths[i];
    const bool mark =
        l.inputs >= batchd::wmt::kFirstMark && l.inputs == l.targets;
    if (!mark && (l.inputs > max_length || l.targets > max_length)) {
      batchd::fuzz::Fail(absl::StrCat("pair ", i, ": lengths ", l.inputs, ",",
                                      l.targets, " over ", max_length));
    }
  }
  if (batchd::wmt::EncodeLengths(lengths) != value) {
    batchd::fuzz::Fail("the table does not encode back to its value");
  }
  return 0;
}

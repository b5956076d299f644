// The WMT workload's constants, on the bottom floor: the longest packed
// length, what becomes of a pair, and the marks a dropped or untokenized
// pair leaves in a lengths table (the values of the persisted format,
// length_cache.h). Everything above includes this, not the length index.
#ifndef BATCHD_WORKLOADS_WMT_WMT_CONSTANTS_H_
#define BATCHD_WORKLOADS_WMT_WMT_CONSTANTS_H_

#include <cstdint>

#include "workloads/wmt/packing.h"

namespace batchd {
namespace wmt {

// The largest max_length an option may ask for.
constexpr uint64_t kMaxLength = 4096;

// What became of a pair.
enum class PairFate : uint8_t {
  kKept,
  kTooLong,  // a side over max_length tokens (AlgoPerf's filter)
  kEmpty,    // a side is empty text (dropped only when asked)
  kDamaged,  // invalid UTF-8 under InvalidUtf8::kDrop
};

// Marks of a lengths table, at or above kFirstMark: kLengthUnknown is "not
// tokenized yet"; a dropped pair has one of the kDropped marks in `inputs`
// (and `targets`). A kept pair's length is at most max_length <=
// kMaxLength, below every mark.
constexpr uint16_t kFirstMark = 0xfffc;
constexpr uint16_t kLengthUnknown = 0xfffc;
constexpr uint16_t kDroppedTooLong = 0xffff;
constexpr uint16_t kDroppedEmpty = 0xfffe;
constexpr uint16_t kDroppedDamaged = 0xfffd;

static_assert(kDroppedDamaged > kLengthUnknown && kMaxLength < kFirstMark,
              "the drop marks are marks of a persisted table "
              "(length_cache.h)");

inline bool Dropped(const PackedLengths& l) { return l.inputs > kMaxLength; }

// The lengths that mark a pair dropped for `fate` (not kKept).
inline PackedLengths DroppedMark(PairFate fate) {
  const uint16_t mark = fate == PairFate::kTooLong ? kDroppedTooLong
                        : fate == PairFate::kEmpty ? kDroppedEmpty
                                                   : kDroppedDamaged;
  return {mark, mark};
}

}  // namespace wmt
}  // namespace batchd

#endif  // BATCHD_WORKLOADS_WMT_WMT_CONSTANTS_H_

// Numbers for people: byte counts in binary units.
//
// Thread safety: pure functions.
#ifndef BATCHD_BASE_FORMAT_H_
#define BATCHD_BASE_FORMAT_H_

#include <string>

namespace batchd {

// 1536 -> "1.5 KiB", 3 -> "3 B", 5 << 30 -> "5.0 GiB": whole bytes under
// 1 KiB, else one decimal in KiB, MiB, GiB or TiB (the largest that keeps
// the number at or above 1).
std::string HumanBytes(double bytes);

}  // namespace batchd

#endif  // BATCHD_BASE_FORMAT_H_

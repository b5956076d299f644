// Byte counts in binary units; see format.h.
#include "base/format.h"

#include <cmath>

#include "absl/strings/str_format.h"

namespace batchd {

std::string HumanBytes(double n) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (std::fabs(n) >= 1024 && u < 4) {
    n /= 1024;
    ++u;
  }
  return u == 0 ? absl::StrFormat("%.0f B", n)
                : absl::StrFormat("%.1f %s", n, units[u]);
}

}  // namespace batchd

// Numbers and text for people: byte counts in binary units, and any string
// made safe to show on a terminal or to write into a log line.
//
// Thread safety: pure functions.
#ifndef BATCHD_BASE_FORMAT_H_
#define BATCHD_BASE_FORMAT_H_

#include <string>

#include "absl/strings/string_view.h"

namespace batchd {

// 1536 -> "1.5 KiB", 3 -> "3 B", 5 << 30 -> "5.0 GiB": whole bytes under
// 1 KiB, else one decimal in KiB, MiB, GiB or TiB (the largest that keeps
// the number at or above 1).
std::string HumanBytes(double bytes);

// `s` with nothing a terminal or a log shipper acts on: C-style escapes for
// the C0 controls and DEL (\n, \r, \t, else \x1b), "\\" for a backslash,
// \xNN for every byte that is not part of valid UTF-8, and \uXXXX for the
// C1 controls (U+0080..U+009F), the Unicode line and paragraph separators
// and the format characters that reorder or hide text (bidi embeddings,
// overrides and isolates, zero-width characters, the BOM). Printable text
// (ASCII and other UTF-8) is kept as it is, so that a name reads the same;
// the result is one line, whatever `s` holds. Strings that come from
// outside the program (file and directory names under the data root, spec
// fields and options, error messages naming them) go through this before
// batchctl shows them or the daemon logs them.
std::string Printable(absl::string_view s);

}  // namespace batchd

#endif  // BATCHD_BASE_FORMAT_H_

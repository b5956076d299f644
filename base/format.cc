// Byte counts in binary units and printable text; see format.h.
#include "base/format.h"

#include <cmath>
#include <cstdint>

#include "absl/strings/str_format.h"

namespace batchd {

namespace {

// The length of the valid UTF-8 sequence at s[i] and its code point; 0
// when the bytes there are not one (a stray continuation byte, a sequence
// cut short, an overlong form, a surrogate, beyond U+10FFFF).
size_t DecodeUtf8(absl::string_view s, size_t i, uint32_t* cp) {
  const uint8_t b = uint8_t(s[i]);
  size_t n;
  uint32_t min;
  if (b < 0x80) {
    *cp = b;
    return 1;
  } else if ((b & 0xE0) == 0xC0) {
    n = 2, min = 0x80, *cp = b & 0x1F;
  } else if ((b & 0xF0) == 0xE0) {
    n = 3, min = 0x800, *cp = b & 0x0F;
  } else if ((b & 0xF8) == 0xF0) {
    n = 4, min = 0x10000, *cp = b & 0x07;
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    const uint8_t c = uint8_t(s[i + k]);
    if ((c & 0xC0) != 0x80) return 0;
    *cp = (*cp << 6) | (c & 0x3F);
  }
  if (*cp < min || *cp > 0x10FFFF || (*cp >= 0xD800 && *cp <= 0xDFFF)) {
    return 0;
  }
  return n;
}

// Code points beyond ASCII that move the cursor, end a line for some
// readers, or change how the text around them is drawn.
bool Hidden(uint32_t cp) {
  return (cp >= 0x80 && cp <= 0x9F) ||      // C1 controls (CSI, OSC, NEL)
         cp == 0xAD ||                      // soft hyphen
         cp == 0x061C ||                    // Arabic letter mark
         (cp >= 0x200B && cp <= 0x200F) ||  // zero width, LRM, RLM
         (cp >= 0x2028 && cp <= 0x202E) ||  // separators, embeddings
         (cp >= 0x2060 && cp <= 0x206F) ||  // joiners, isolates
         cp == 0xFEFF ||                    // BOM, zero-width no-break
         (cp >= 0xFFF9 && cp <= 0xFFFB);    // interlinear annotations
}

}  // namespace

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

std::string Printable(absl::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    uint32_t cp = 0;
    const size_t n = DecodeUtf8(s, i, &cp);
    if (n == 0) {
      absl::StrAppendFormat(&out, "\\x%02x", uint8_t(s[i]));
      ++i;
      continue;
    }
    if (cp == '\\') {
      out += "\\\\";
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp == '\t') {
      out += "\\t";
    } else if (cp < 0x20 || cp == 0x7F) {
      absl::StrAppendFormat(&out, "\\x%02x", cp);
    } else if (Hidden(cp)) {
      absl::StrAppendFormat(&out, "\\u%04x", cp);
    } else {
      out.append(s.data() + i, n);
    }
    i += n;
  }
  return out;
}

}  // namespace batchd

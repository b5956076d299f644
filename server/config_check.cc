// Settings refused before they are used; see config_check.h.
#include "server/config_check.h"

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace batchd {

absl::StatusOr<std::string> ReadConfigFile(const std::string& path) {
  FILE* f = fopen(path.c_str(), "re");
  if (f == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("config ", path, ": ", strerror(errno)));
  }
  std::string text;
  char buf[65536];
  size_t n;
  // One byte beyond the limit tells a file at the limit from a larger one.
  while (text.size() <= kMaxConfigBytes &&
         (n = fread(buf, 1, sizeof(buf), f)) > 0) {
    text.append(buf, n);
  }
  const bool failed = ferror(f) != 0;
  fclose(f);
  if (failed) {
    return absl::InvalidArgumentError(
        absl::StrCat("config ", path, ": read error"));
  }
  if (text.size() > kMaxConfigBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("config ", path, " is larger than ", kMaxConfigBytes,
                     " bytes, the limit"));
  }
  return text;
}

absl::Status CheckConfigNesting(absl::string_view text,
                                const std::string& path) {
  int line = 1;
  int depth = 0;      // arrays and inline tables (and headers) open
  int line_dots = 0;  // '.' outside strings on this line
  auto deep = [&](const char* what) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config ", path, " line ", line, ": ", what, " nested deeper than ",
        kMaxConfigNesting, " levels (batchd's keys are top-level)"));
  };
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '\n') {
      ++line;
      line_dots = 0;
    } else if (c == '#') {  // a comment, to the end of the line
      while (i + 1 < text.size() && text[i + 1] != '\n') ++i;
    } else if (c == '"' || c == '\'') {
      const bool multi = text.substr(i, 3) == std::string(3, c);
      const bool escapes = c == '"';
      i += multi ? 3 : 1;
      for (; i < text.size(); ++i) {
        if (escapes && text[i] == '\\') {
          if (i + 1 < text.size() && text[i + 1] == '\n') ++line;
          ++i;
        } else if (text[i] == '\n') {
          ++line;
          line_dots = 0;
          if (!multi) break;  // unterminated: the parser says so
        } else if (text[i] == c &&
                   (!multi || text.substr(i, 3) == std::string(3, c))) {
          // A multi-line string may end with up to two more quotes.
          if (multi) {
            i += 2;
            while (i + 1 < text.size() && text[i + 1] == c) ++i;
          }
          break;
        }
      }
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxConfigNesting) return deep("arrays or tables");
    } else if (c == ']' || c == '}') {
      if (depth > 0) --depth;
    } else if (c == '.') {
      if (++line_dots > kMaxConfigNesting) return deep("a dotted key");
    }
  }
  return absl::OkStatus();
}

absl::Status CheckStringSetting(const std::string& name,
                                const std::string& value) {
  for (char c : value) {
    if (uint8_t(c) < 0x20 || c == 0x7f) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--", name, " '", value,
          "' holds a control character (a NUL would cut the value short, "
          "a newline forge a line)"));
    }
  }
  if (name != "shm-prefix") return absl::OkStatus();
  bool ok =
      !value.empty() && value.size() <= kMaxShmPrefixBytes && value[0] != '-';
  for (char c : value) {
    ok = ok && ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                (c >= '0' && c <= '9') || c == '_' || c == '-');
  }
  if (!ok) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--shm-prefix '", value.substr(0, 200),
        value.size() > 200 ? "...'" : "'", " (", value.size(),
        " bytes) must be 1 to ", kMaxShmPrefixBytes,
        " characters of A-Z a-z 0-9 _ -, not starting with -: segment "
        "names must fit in /dev/shm's 255"));
  }
  return absl::OkStatus();
}

}  // namespace batchd

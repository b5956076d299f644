// What the daemon refuses in its settings before it uses them: a config
// file too large or nested too deep for the TOML parser to read safely,
// and string values that cannot work (control characters, a segment-name
// prefix that no name in /dev/shm can hold).
//
// Thread safety: pure functions.
#ifndef BATCHD_SERVER_CONFIG_CHECK_H_
#define BATCHD_SERVER_CONFIG_CHECK_H_

#include <cstddef>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace batchd {

// The largest --config file read (batchd's own settings fit in a few KiB).
inline constexpr size_t kMaxConfigBytes = 1 << 20;
// Arrays and inline tables open at once, or key parts of one line (dotted
// keys, table headers): batchd's keys are top-level, and toml++ recurses
// per level (a 50,000-level dotted key overflowed its stack).
inline constexpr int kMaxConfigNesting = 32;
// The longest --shm-prefix: a segment's name (prefix, daemon uid, owner,
// stream, rank, random part) must fit in NAME_MAX (255) with the longest
// of the others (110 bytes).
inline constexpr size_t kMaxShmPrefixBytes = 128;

// The bytes of config file `path`; InvalidArgument naming the file when it
// cannot be read or is larger than kMaxConfigBytes.
absl::StatusOr<std::string> ReadConfigFile(const std::string& path);

// InvalidArgument "config PATH line N: ..." when `text` nests arrays or
// inline tables deeper than kMaxConfigNesting, or a line has more key
// parts than that; scanned before the parser sees the text. Strings and
// comments are skipped (a dot in a quoted path is no key part).
absl::Status CheckConfigNesting(absl::string_view text,
                                const std::string& path);

// InvalidArgument naming --`name` when a string setting holds a control
// character (a NUL cuts a C string short; a newline forges a line), or
// when --shm-prefix is not 1 to kMaxShmPrefixBytes of [A-Za-z0-9_-].
// Messages quote the value as given; main escapes what it prints.
absl::Status CheckStringSetting(const std::string& name,
                                const std::string& value);

}  // namespace batchd

#endif  // BATCHD_SERVER_CONFIG_CHECK_H_

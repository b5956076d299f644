// The daemon's log: one line per event on stderr,
//   batchd: ts=2026-12-02T09:40:01.123Z level=warn event=client_gone k=v ...
// with a level threshold, and repeats of the same event and message folded:
// at most one line per 10 s each, the next one saying how many were dropped.
//
// Thread safety: thread-safe.
#ifndef BATCHD_SERVER_LOG_H_
#define BATCHD_SERVER_LOG_H_

#include <string>
#include <utility>
#include <vector>

namespace batchd {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };

// "debug", "info", "warn", "error"; anything else is info.
void SetLogLevel(const std::string& level);

// Writes `event` with `fields` (values are quoted when they hold spaces or
// quotes). Events of level warn and error are rate-limited per
// (event, fields) key.
void Log(LogLevel level, const std::string& event,
         const std::vector<std::pair<std::string, std::string>>& fields = {});

}  // namespace batchd

#endif  // BATCHD_SERVER_LOG_H_

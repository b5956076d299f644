// The log of batchd's processes (the daemon and the workloads it runs): one
// line per event on stderr,
//   batchd: ts=2026-12-02T09:40:01.123Z level=warn event=client_gone k=v ...
// with a level threshold, and repeats of the same warning folded: at most
// one line per 10 s per key, the next one saying how many were dropped.
//
// Thread safety: thread-safe.
#ifndef BATCHD_BASE_LOG_H_
#define BATCHD_BASE_LOG_H_

#include <string>
#include <utility>
#include <vector>

namespace batchd {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };

// "debug", "info", "warn", "error"; anything else is info.
void SetLogLevel(const std::string& level);

using LogFields = std::vector<std::pair<std::string, std::string>>;

// Writes `event` with `fields`: every value escaped by Printable
// (base/format.h: no control character, invalid UTF-8 or bidi override is
// written raw, so a line is one event whatever it quotes), and quoted when
// it holds a space, a quote, '=' or an escape. Events of level warn and
// error are rate-limited per (event, fields) key.
void Log(LogLevel level, const std::string& event,
         const LogFields& fields = {});

// The same, but warn and error lines are rate-limited per `key` alone,
// whatever their fields: for events whose fields differ every time (the
// file of a decode error), which per-(event, fields) folding would not
// limit. Lines of other keys are not affected.
void LogKeyed(LogLevel level, const std::string& key, const std::string& event,
              const LogFields& fields = {});

}  // namespace batchd

#endif  // BATCHD_BASE_LOG_H_

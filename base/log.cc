// key=value event lines with rate limiting; see log.h.
#include "base/log.h"

#include <time.h>

#include <atomic>
#include <cstdio>
#include <map>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "base/clock.h"
#include "base/format.h"

namespace batchd {

namespace {

std::atomic<int> g_level{int(LogLevel::kInfo)};

const char* LevelName(LogLevel l) {
  switch (l) {
    case LogLevel::kDebug:
      return "debug";
    case LogLevel::kInfo:
      return "info";
    case LogLevel::kWarn:
      return "warn";
    case LogLevel::kError:
      return "error";
  }
  return "info";
}

// A value as one token of the line: escaped by Printable (so that no
// control character, invalid UTF-8 or bidi override reaches the log raw:
// shippers that split at CR, and terminals that tail the log, act on them),
// then quoted when it holds a space, a quote, '=' or an escape.
std::string Quote(const std::string& v) {
  const std::string p = Printable(v);
  bool plain = !p.empty() && p == v;
  for (char c : p) {
    if (c == ' ' || c == '"' || c == '=') plain = false;
  }
  if (plain) return p;
  std::string out = "\"";
  for (char c : p) {
    if (c == '"') out += '\\';
    out += c;
  }
  return out + "\"";
}

struct Limiter {
  absl::Mutex mu;
  struct Entry {
    uint64_t last_ns = 0;
    uint64_t dropped = 0;
  };
  std::map<std::string, Entry> entries ABSL_GUARDED_BY(mu);
};

Limiter& limiter() {
  static Limiter* l = new Limiter;
  return *l;
}

constexpr uint64_t kRepeatNs = 10ULL * 1000 * 1000 * 1000;

std::string Fields(const LogFields& fields) {
  std::string line;
  for (const auto& [k, v] : fields) {
    line += " " + Printable(k) + "=" + Quote(v);
  }
  return line;
}

// Writes one line unless `key` was written less than kRepeatNs ago (warn and
// error only).
void Write(LogLevel level, const std::string& event, const std::string& key,
           std::string line) {
  uint64_t dropped = 0;
  if (level >= LogLevel::kWarn) {
    Limiter& lim = limiter();
    absl::MutexLock lock(&lim.mu);
    Limiter::Entry& e = lim.entries[key];
    const uint64_t now = MonotonicNanos();
    if (e.last_ns != 0 && now - e.last_ns < kRepeatNs) {
      ++e.dropped;
      return;
    }
    dropped = e.dropped;
    e.dropped = 0;
    e.last_ns = now;
    if (lim.entries.size() > 10000) lim.entries.clear();  // bounded memory
  }
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  tm t;
  gmtime_r(&ts.tv_sec, &t);
  char when[40];
  strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%S", &t);
  if (dropped > 0) line += " repeats_dropped=" + std::to_string(dropped);
  fprintf(stderr, "batchd: ts=%s.%03ldZ level=%s event=%s%s\n", when,
          ts.tv_nsec / 1000000, LevelName(level), Printable(event).c_str(),
          line.c_str());
}

}  // namespace

void SetLogLevel(const std::string& level) {
  LogLevel l = LogLevel::kInfo;
  if (level == "debug") l = LogLevel::kDebug;
  if (level == "warn") l = LogLevel::kWarn;
  if (level == "error") l = LogLevel::kError;
  g_level.store(int(l));
}

void Log(LogLevel level, const std::string& event, const LogFields& fields) {
  if (int(level) < g_level.load()) return;
  std::string line = Fields(fields);
  // Keys of this kind start with the event; LogKeyed's with '\0'.
  const std::string key = event + line;
  Write(level, event, key, std::move(line));
}

void LogKeyed(LogLevel level, const std::string& key, const std::string& event,
              const LogFields& fields) {
  if (int(level) < g_level.load()) return;
  Write(level, event, std::string(1, '\0') + key, Fields(fields));
}

}  // namespace batchd

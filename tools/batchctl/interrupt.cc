// The interrupt flag; see interrupt.h.
#include "tools/batchctl/interrupt.h"

#include <signal.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <ctime>

#include "base/clock.h"

namespace batchd::batchctl {
namespace {

volatile sig_atomic_t g_interrupted = 0;
void OnInterrupt(int) { g_interrupted = 1; }

}  // namespace

void CatchInterrupts() {
  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = OnInterrupt;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

bool Interrupted() { return g_interrupted != 0; }

bool SleepUnlessInterrupted(double seconds) {
  const uint64_t end = MonotonicNanos() + uint64_t(seconds * 1e9);
  while (!g_interrupted) {
    const uint64_t now = MonotonicNanos();
    if (now >= end) return true;
    const uint64_t step = std::min<uint64_t>(end - now, 50'000'000);
    struct timespec ts = {time_t(step / 1'000'000'000),
                          long(step % 1'000'000'000)};
    nanosleep(&ts, nullptr);
  }
  return false;
}

}  // namespace batchd::batchctl

// A thread's clocks: blocked time of a read; see readahead_clock.h.
#include "server/readahead_clock.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

#include "base/clock.h"

namespace batchd {

namespace {

uint64_t ThreadCpuNanos() {
  // Settles the thread's run time up to now (schedstat's figure lags by
  // the part of the current time slice not yet accounted).
  struct timespec ts;
  if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0) return 0;
  return uint64_t(ts.tv_sec) * 1000000000u + uint64_t(ts.tv_nsec);
}

uint64_t VoluntarySwitches() {
  struct rusage u;
  return getrusage(RUSAGE_THREAD, &u) == 0 ? uint64_t(u.ru_nvcsw) : 0;
}

uint64_t Minus(uint64_t a, uint64_t b) { return a > b ? a - b : 0; }

}  // namespace

ThreadClock& ThreadClock::Self() {
  static thread_local ThreadClock clock;
  return clock;
}

ThreadClock::ThreadClock() {
  schedstat_fd_ = open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC);
  stat_fd_ = open("/proc/thread-self/stat", O_RDONLY | O_CLOEXEC);
  uint64_t run, queued;
  if (schedstat_fd_ >= 0 && !ReadSchedstat(&run, &queued)) {
    close(schedstat_fd_);
    schedstat_fd_ = -1;
  }
}

absl::Mutex& ThreadClock::LifetimeMutex() {
  ABSL_CONST_INIT static absl::Mutex mu(absl::kConstInit);
  return mu;
}

ThreadClock::~ThreadClock() {
  absl::MutexLock lock(&LifetimeMutex());
  if (schedstat_fd_ >= 0) close(schedstat_fd_);
  if (stat_fd_ >= 0) close(stat_fd_);
}

bool ThreadClock::ReadSchedstat(uint64_t* run_ns, uint64_t* queued_ns) const {
  // "<run ns> <run delay ns> <time slices>\n"
  char buf[96];
  const ssize_t n = pread(schedstat_fd_, buf, sizeof(buf) - 1, 0);
  if (n <= 0) return false;
  buf[n] = '\0';
  unsigned long long run = 0, queued = 0;
  if (sscanf(buf, "%llu %llu", &run, &queued) != 2) return false;
  *run_ns = run;
  *queued_ns = queued;
  return true;
}

ThreadSample ThreadClock::Sample() const {
  ThreadSample s;
  s.cpu_ns = ThreadCpuNanos();
  uint64_t run;
  if (schedstat_fd_ < 0 || !ReadSchedstat(&run, &s.queued_ns)) {
    s.voluntary_switches = VoluntarySwitches();
  }
  s.wall_ns = MonotonicNanos();
  return s;
}

uint64_t ThreadClock::BlockedNs(const ThreadSample& start,
                                const ThreadSample& end) const {
  const uint64_t off_cpu =
      Minus(end.wall_ns - start.wall_ns, end.cpu_ns - start.cpu_ns);
  if (schedstat_fd_ < 0) {
    return end.voluntary_switches == start.voluntary_switches ? 0 : off_cpu;
  }
  return Minus(off_cpu, end.queued_ns - start.queued_ns);
}

uint64_t ThreadClock::BlockedNowNs(const ThreadSample& start,
                                   uint64_t now_ns) const {
  const uint64_t wall = Minus(now_ns, start.wall_ns);
  if (stat_fd_ < 0) return wall;
  // "<pid> (<comm>) <state> ...": the state follows the last ')'.
  char buf[512];
  const ssize_t n = pread(stat_fd_, buf, sizeof(buf) - 1, 0);
  if (n <= 0) return wall;
  buf[n] = '\0';
  const char* paren = strrchr(buf, ')');
  if (paren == nullptr || paren[1] != ' ') return wall;
  if (paren[2] == 'R') return 0;  // running, or runnable
  // Blocked now: its run time and run delay stopped when it blocked.
  uint64_t run, queued;
  if (schedstat_fd_ < 0 || !ReadSchedstat(&run, &queued)) return wall;
  return Minus(Minus(wall, Minus(run, start.cpu_ns)),
               Minus(queued, start.queued_ns));
}

}  // namespace batchd

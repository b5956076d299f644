// Process facts read from /proc, and the futex calls the rings wait with.
#include "base/process.h"

#include <linux/futex.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

namespace batchd {

namespace {

// Reads /proc/<pid>/stat; returns false if it cannot. `state` and
// `start_ticks` are fields 3 and 22.
bool ReadStat(int pid, char* state, uint64_t* start_ticks) {
  char path[64];
  snprintf(path, sizeof(path), "/proc/%d/stat", pid);
  FILE* f = fopen(path, "re");
  if (f == nullptr) return false;
  char buf[1024];
  size_t n = fread(buf, 1, sizeof(buf) - 1, f);
  fclose(f);
  buf[n] = '\0';
  // The command name (field 2) may hold spaces and parentheses: parse after
  // the last ')'.
  char* p = strrchr(buf, ')');
  if (p == nullptr) return false;
  p += 2;
  *state = *p;
  // Field 3 is at p; skip to field 22: 19 more fields.
  for (int field = 3; field < 22; ++field) {
    p = strchr(p, ' ');
    if (p == nullptr) return false;
    ++p;
  }
  *start_ticks = strtoull(p, nullptr, 10);
  return true;
}

}  // namespace

uint64_t ProcessStartTicks(int pid) {
  char state;
  uint64_t ticks;
  return ReadStat(pid, &state, &ticks) ? ticks : 0;
}

uint64_t SelfPidNamespace() {
  struct stat st;
  if (stat("/proc/self/ns/pid", &st) != 0) return 0;
  return uint64_t(st.st_ino);
}

bool ProcessAlive(uint32_t pid, uint64_t start_ticks, uint64_t pid_ns) {
  if (pid == 0) return false;
  if (pid_ns != 0 && pid_ns != SelfPidNamespace()) return true;
  char state;
  uint64_t ticks;
  if (!ReadStat(int(pid), &state, &ticks)) return false;
  if (state == 'Z' || state == 'X' || state == 'x') return false;
  return start_ticks == 0 || ticks == start_ticks;
}

int SelfThreadCount() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("Threads:", 0) == 0) return std::stoi(line.substr(8));
  }
  return 0;
}

uint64_t SelfRssBytes(bool include_shared_memory) {
  std::ifstream in("/proc/self/status");
  std::string line;
  uint64_t rss_kb = 0, shmem_kb = 0;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) rss_kb = std::stoull(line.substr(6));
    if (line.rfind("RssShmem:", 0) == 0) shmem_kb = std::stoull(line.substr(9));
  }
  if (!include_shared_memory && shmem_kb <= rss_kb) rss_kb -= shmem_kb;
  return rss_kb * 1024;
}

namespace {

// Calls `io` (read or write) until `n` bytes have moved; false on an error
// or at the end of the file.
template <typename Char, typename Io>
bool MoveAll(int fd, Char* c, size_t n, Io io) {
  while (n > 0) {
    const ssize_t done = io(fd, c, n);
    if (done < 0 && errno == EINTR) continue;
    if (done <= 0) return false;
    c += done;
    n -= size_t(done);
  }
  return true;
}

}  // namespace

bool WriteAll(int fd, const void* data, size_t n) {
  return MoveAll(fd, static_cast<const char*>(data), n, write);
}

bool ReadAll(int fd, void* data, size_t n) {
  return MoveAll(fd, static_cast<char*>(data), n, read);
}

void FutexWait(const void* word, uint32_t expected, uint64_t timeout_ns) {
  timespec ts;
  ts.tv_sec = time_t(timeout_ns / 1000000000ULL);
  ts.tv_nsec = long(timeout_ns % 1000000000ULL);
  // Not FUTEX_PRIVATE: the word lives in memory shared between processes.
  syscall(SYS_futex, word, FUTEX_WAIT, expected, &ts, nullptr, 0);
}

void FutexWakeAll(const void* word) {
  syscall(SYS_futex, word, FUTEX_WAKE, INT32_MAX, nullptr, nullptr, 0);
}

}  // namespace batchd

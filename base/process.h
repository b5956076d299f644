// Facts about processes that either side of a ring needs to tell a dead peer
// from a slow one (process start times, pid namespaces), the calling
// process's own figures, whole reads and writes on pipes, and the futex calls
// the rings wait with. The clocks are base/clock.h. All functions are
// thread-safe.
#ifndef BATCHD_BASE_PROCESS_H_
#define BATCHD_BASE_PROCESS_H_

#include <cstddef>
#include <cstdint>
#include <string>

namespace batchd {

// Field 22 of /proc/<pid>/stat (start time in clock ticks since boot); 0 if
// the process does not exist.
uint64_t ProcessStartTicks(int pid);

// Inode of /proc/self/ns/pid: processes with equal values see the same pids.
uint64_t SelfPidNamespace();

// True unless the process `pid` started at `start_ticks` is gone (no such
// pid, a zombie, or a newer process that reuses the pid). When the peer lives
// in another pid namespace (pid_ns differs from ours) nothing can be said from
// the pid and this returns true: heartbeats decide then.
bool ProcessAlive(uint32_t pid, uint64_t start_ticks, uint64_t pid_ns);

// Number of threads of the calling process.
int SelfThreadCount();
// Resident bytes of the calling process; without shared memory (the rings'
// pages, which the segments account for) unless asked.
uint64_t SelfRssBytes(bool include_shared_memory = false);

// Writes / reads exactly n bytes on a pipe or socket, retrying on EINTR;
// false on an error or (reading) an early end of file.
bool WriteAll(int fd, const void* data, size_t n);
bool ReadAll(int fd, void* data, size_t n);

// Waits on a futex word shared between processes until it differs from
// `expected`, a wake arrives, or `timeout_ns` passes. Spurious returns happen.
void FutexWait(const void* word, uint32_t expected, uint64_t timeout_ns);
// Wakes every waiter on the shared futex word.
void FutexWakeAll(const void* word);

}  // namespace batchd

#endif  // BATCHD_BASE_PROCESS_H_

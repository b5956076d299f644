// The one way the daemon starts a thread. A thread that cannot start (the
// daemon is at its task limit: a pids cgroup, systemd's TasksMax,
// RLIMIT_NPROC or the kernel's threads-max) is an error with one message
// that names the thread and the flag that bounds it, never an exception
// that nothing catches.
//
// Thread: a started thread, joined or detached by its owner.
// ThreadGroup: threads joined with a deadline, together or (an elastic
// pool's, which end one by one) as each returns; those stuck past the
// deadline (a read of storage that does not answer) are waited for again
// later, or abandoned, counted, and left to end with the process.
#ifndef BATCHD_BASE_THREADS_H_
#define BATCHD_BASE_THREADS_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace batchd {

// A started thread. Move-only; the destructor joins a thread that was
// neither joined nor detached.
//
// Thread safety: one owner calls Join or Detach.
class Thread {
 public:
  Thread() = default;
  ~Thread();  // Join()
  Thread(Thread&& other) noexcept;
  Thread& operator=(Thread&& other) noexcept;
  Thread(const Thread&) = delete;
  Thread& operator=(const Thread&) = delete;

  bool joinable() const { return started_; }
  // Waits for the thread to return (nothing if not joinable()).
  void Join();
  // Lets the thread run on alone (nothing if not joinable()).
  void Detach();

 private:
  friend absl::StatusOr<Thread> StartThread(absl::string_view,
                                            absl::string_view,
                                            std::function<void()>, size_t);
  unsigned long handle_ = 0;  // pthread_t
  bool started_ = false;
};

// Runs `fn` on a new thread with a stack of `stack_bytes` (0: the system's
// default). `name` says which thread, as a noun phrase ("the heartbeat
// thread", "worker thread 2 of --threads 4"); `bound` is the flag that
// sets how many such threads run ("--threads"), empty when none does.
// ResourceExhausted when the thread cannot be started:
//   cannot start <name> (<the system's error>): the daemon is at its thread
//   limit (a pids cgroup, systemd's TasksMax, RLIMIT_NPROC or the kernel's
//   threads-max); raise it[ or lower <bound>]
absl::StatusOr<Thread> StartThread(absl::string_view name,
                                   absl::string_view bound,
                                   std::function<void()> fn,
                                   size_t stack_bytes = 0);

// Threads that each run one function: JoinUntil waits for them to return,
// up to a deadline, and abandons those that have not; WaitUntil waits the
// same way and abandons none; JoinReturned joins those that have returned
// while others run on (a pool that ends its idle threads). Abandoned
// threads keep nothing of the group's: they may outlive it (but not
// whatever their function uses, which the owner must then keep).
//
// Thread safety: not thread-safe; its owner makes one call at a time (from
// one thread, or under a lock of its own).
class ThreadGroup {
 public:
  ThreadGroup();
  ~ThreadGroup();  // JoinUntil(0)
  ThreadGroup(const ThreadGroup&) = delete;
  ThreadGroup& operator=(const ThreadGroup&) = delete;

  // StartThread(name, bound, fn, stack_bytes), as a thread of the group.
  absl::Status Start(absl::string_view name, absl::string_view bound,
                     std::function<void()> fn, size_t stack_bytes = 0);
  // Waits until every thread started has returned, or until deadline_ns
  // (MonotonicNanos) passes; 0 waits without bound. Joins those that
  // returned; those still running are abandoned (detached) and counted, in
  // abandoned() and in AbandonedThreads(). Returns how many were abandoned
  // by this call. The group is empty afterwards: Start may start more.
  int JoinUntil(uint64_t deadline_ns);
  // Waits as JoinUntil does and joins those that returned; those still
  // running at the deadline stay in the group, for a later wait. True when
  // none runs.
  bool WaitUntil(uint64_t deadline_ns);
  // Joins the threads that have returned (at once: they are ending) and
  // returns how many; the others run on.
  int JoinReturned();
  // Threads started and not yet returned.
  int running() const;
  // Threads this group has abandoned, in all.
  int abandoned() const { return abandoned_; }

 private:
  // Shared with the threads, which may outlive the group.
  struct State {
    absl::Mutex mu;
    absl::CondVar exited;  // running dropped
    int running ABSL_GUARDED_BY(mu) = 0;
    std::vector<uint64_t> returned ABSL_GUARDED_BY(mu);  // not yet joined
  };
  // Waits until no thread runs or deadline_ns; returns how many run.
  int WaitForThreads(uint64_t deadline_ns);

  // The owner's alone; a new State once threads are abandoned (they keep
  // the old one).
  std::shared_ptr<State> state_;
  std::map<uint64_t, Thread> threads_;  // by the id each was started with
  uint64_t next_id_ = 0;
  int abandoned_ = 0;
};

// Threads the process has abandoned (ThreadGroup::JoinUntil, and
// NoteAbandonedThreads): while any may still run, the process must end
// with _exit, not with static destructors under them.
int AbandonedThreads();
// Counts `n` threads abandoned by a part that joins its own.
void NoteAbandonedThreads(int n);

}  // namespace batchd

#endif  // BATCHD_BASE_THREADS_H_

// The server's side of liveness: a thread that stamps the heartbeat of
// every ring it is given ~10x/s and does nothing else, so that a busy
// server never looks dead to its clients.
//
// Thread safety: thread-safe (Start and Stop from one thread); its own
// lock, so that nothing else ever delays a heartbeat.
#ifndef BATCHD_SERVER_HEARTBEAT_H_
#define BATCHD_SERVER_HEARTBEAT_H_

#include <atomic>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "base/threads.h"
#include "server/engine.h"

namespace batchd {

class Heartbeat {
 public:
  Heartbeat() = default;
  // Stop()s.
  ~Heartbeat();
  Heartbeat(const Heartbeat&) = delete;
  Heartbeat& operator=(const Heartbeat&) = delete;

  // `producer`'s ring beats from now on, until Remove.
  void Add(std::shared_ptr<RankProducer> producer);
  void Remove(const std::shared_ptr<RankProducer>& producer);
  // Starts the thread; StartThread's error when it cannot be started.
  absl::Status Start();
  // Ends the thread (idempotent; the rings stop beating).
  void Stop();

 private:
  void Loop();

  absl::Mutex mu_;
  std::vector<std::shared_ptr<RankProducer>> beating_ ABSL_GUARDED_BY(mu_);
  std::atomic<bool> stop_{false};
  Thread thread_;
};

}  // namespace batchd

#endif  // BATCHD_SERVER_HEARTBEAT_H_

// The supervisor thread: ~10x/s it frees the rings of clients that let go
// or died and forgets idle streams (StreamRegistry::ReapDeadClients),
// writes each stream's indexing progress into its rings' wait reason and
// the log, and logs a throughput line per stream every
// throughput_log_seconds.
//
// Thread safety: Start() starts the thread, Stop() (or the destructor)
// ends it, both from one thread; the fields below are the thread's alone.
#ifndef BATCHD_SERVER_SUPERVISOR_H_
#define BATCHD_SERVER_SUPERVISOR_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <utility>

#include "absl/status/status.h"
#include "base/threads.h"
#include "server/status.h"
#include "server/stream_registry.h"

namespace batchd {

struct CoreOptions;

class Supervisor {
 public:
  // Everything given must outlive the supervisor.
  Supervisor(const CoreOptions& options, StreamRegistry& registry,
             const StatusReporter& status);
  ~Supervisor();
  Supervisor(const Supervisor&) = delete;
  Supervisor& operator=(const Supervisor&) = delete;

  // Starts the thread; StartThread's error when it cannot be started.
  absl::Status Start();
  // Ends the thread (idempotent).
  void Stop();

 private:
  void Loop();
  void LogThroughput(uint64_t now);
  // Each stream's indexing in progress: written into its rings' wait reason
  // (cleared once done), and logged (event indexing) every
  // kIndexingLogSeconds.
  void ReportIndexing(uint64_t now);

  const CoreOptions& options_;
  StreamRegistry& registry_;
  const StatusReporter& status_;

  // The thread's alone.
  uint64_t last_throughput_ns_;
  uint64_t last_indexing_log_ns_ = 0;
  std::map<StreamKey, std::pair<uint64_t, uint64_t>> last_totals_;

  std::atomic<bool> stop_{false};
  Thread thread_;
};

}  // namespace batchd

#endif  // BATCHD_SERVER_SUPERVISOR_H_

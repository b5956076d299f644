// What the read-ahead suites share (readahead_test, readahead_engine_test,
// readahead_worker_test, and the workloads' read-ahead suites): a lane's
// plain order, a source that records what it was asked for, a budget, a gate
// that holds reads like a mount that stops answering, and the ways a served
// stream reads (Reading). Test-only.
//
// Thread safety: a RecordingReader's function and a Gate may be called
// from any thread.
#ifndef BATCHD_TESTS_READAHEAD_TESTUTIL_H_
#define BATCHD_TESTS_READAHEAD_TESTUTIL_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "server/readahead.h"

namespace batchd {
namespace readahead_testutil {

inline constexpr uint64_t kBatch = 4;  // examples a step of the fake lane
inline constexpr uint64_t kExampleBytes = 1000;

// Step s holds positions [s*kBatch, (s+1)*kBatch) of epoch 0, id = position.
inline LaneOrderFn PlainOrder(uint64_t steps = 1000) {
  return [steps](uint64_t step, std::vector<ReadAheadKey>* keys) {
    if (step >= steps) return false;
    for (uint64_t i = 0; i < kBatch; ++i) {
      keys->push_back({0, step * kBatch + i, step * kBatch + i});
    }
    return true;
  };
}

// A reader that records the ids it was asked for and returns kExampleBytes
// bytes of the id.
struct RecordingReader {
  std::mutex mu;
  std::vector<uint64_t> ids;
  ExampleReadFn Fn() {
    return [this](uint64_t id, std::string* bytes, int64_t* label) {
      {
        std::lock_guard<std::mutex> lock(mu);
        ids.push_back(id);
      }
      bytes->assign(kExampleBytes, char('a' + id % 26));
      *label = int64_t(id);
      return absl::OkStatus();
    };
  }
  std::set<uint64_t> Set() {
    std::lock_guard<std::mutex> lock(mu);
    return std::set<uint64_t>(ids.begin(), ids.end());
  }
  size_t Count() {
    std::lock_guard<std::mutex> lock(mu);
    return ids.size();
  }
};

inline ReadAhead::Options Budget(uint64_t bytes, int threads = 4) {
  ReadAhead::Options o;
  o.budget_bytes = bytes;
  o.io_threads = threads;
  return o;
}

// Blocks every read while closed, like a mount that stops answering;
// `entered` counts the reads that reached it.
struct Gate {
  std::mutex mu;
  std::condition_variable cv;
  bool open = true;
  int entered = 0;
  void Set(bool o) {
    std::lock_guard<std::mutex> lock(mu);
    open = o;
    cv.notify_all();
  }
  void Pass() {
    std::unique_lock<std::mutex> lock(mu);
    ++entered;
    cv.notify_all();
    cv.wait(lock, [this] { return open; });
  }
  bool WaitEntered(int n, double seconds) {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, std::chrono::duration<double>(seconds),
                       [&] { return entered >= n; });
  }
};

// How a stream served in a test reads its examples: without read-ahead, with
// it, and with it over storage seen to answer at once (a read under a second
// counts as returning at once, so reads are made inline as on local disk).
enum class Reading { kOff, kAhead, kInline };

// The read-ahead for `reading`: two I/O threads and `budget_bytes` (none
// when off).
inline ReadAhead::Options ReadingOptions(Reading reading,
                                         uint64_t budget_bytes) {
  ReadAhead::Options o =
      Budget(reading == Reading::kOff ? 0 : budget_bytes, /*threads=*/2);
  if (reading == Reading::kInline) o.inline_read_ns = uint64_t(1e9);
  return o;
}

}  // namespace readahead_testutil
}  // namespace batchd

#endif  // BATCHD_TESTS_READAHEAD_TESTUTIL_H_

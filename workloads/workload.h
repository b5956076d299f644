// What a workload is to the server: a data set of N examples, a schedule
// that makes batches of items (examples, or rows packed from them), and each
// item turned into a fixed-size part of every tensor of a batch, written
// straight into the ring slot (DALI's split: the sizes are known first, then
// each item is written into memory it is given).
//
// The interface only: the table of workloads is workloads/registry.h, and
// docs/workloads.md says how to add one.
//
// Thread safety: Create() runs once; every const method may be called from
// any number of worker threads at once.
#ifndef BATCHD_WORKLOADS_WORKLOAD_H_
#define BATCHD_WORKLOADS_WORKLOAD_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/cord.h"
#include "base/executor.h"
#include "client/include/batchd/dtype.h"
#include "workloads/common/read_access.h"
#include "workloads/options.h"
#include "workloads/sampler.h"
#include "workloads/schedule.h"
#include "workloads/split.h"

namespace batchd {

class CacheDir;    // workloads/common/cache_dir.h
class SharedWork;  // workloads/shared_work.h

// One tensor of a batch; the batch shape is [B] + example_shape.
struct TensorLayout {
  std::string name;
  DType dtype;
  std::vector<int64_t> example_shape;

  uint64_t ExampleBytes() const {
    uint64_t n = DTypeSize(dtype);
    for (int64_t d : example_shape) n *= uint64_t(d);
    return n;
  }
};

struct WorkloadConfig {
  std::string data_path;  // absolute, already confined to --data-root
  // The server's --data-root (resolved): workloads open every file through
  // it (workloads/common/data_file.h). Empty: data_path is the root.
  std::string data_root;
  // Whose permissions every file is opened with: the caller's, so that a
  // stream reads only what its owner could read (workloads/common/
  // read_access.h). Default: the daemon's (tools and tests).
  ReadAccess access;
  // The split as the spec spells it; a workload parses it once with
  // ParseSplit (workloads/split.h), naming the splits it serves.
  std::string split;
  uint64_t seed = 0;
  std::map<std::string, std::string> options;
  // The daemon's --cache-dir, where a workload keeps what it learnt about
  // its data (indexes, token lengths) across restarts. Null or disabled:
  // nothing is kept.
  std::shared_ptr<const CacheDir> cache;
  // The daemon's pool for indexing and counting work (base/executor.h),
  // borrowed: it outlives the workload and everything the workload
  // submits. Workloads run their parallel and background work there and
  // never start threads of their own. Null: Executor::Default() (tools
  // and tests that run workloads outside a daemon); a workload takes it
  // from pool(), the one place that falls back.
  Executor* executor = nullptr;
  // What the daemon's streams share (loaded models, running passes, the
  // models' memory budget), borrowed: it outlives the workload. Null:
  // nothing is shared, and a workload's passes end with it.
  SharedWork* shared = nullptr;

  // `executor`, or Executor::Default() when it is null (which may itself be
  // null where no thread can start: work then runs on the caller).
  Executor* pool() const {
    return executor != nullptr ? executor : Executor::Default();
  }
};

// Counters a workload keeps while filling (decode errors, skips).
struct WorkloadCounters {
  std::atomic<uint64_t> decode_errors{0};
  std::atomic<uint64_t> skipped_examples{0};
};

// What a workload is indexing while a stream prepares (WMT's length pass):
// `done` of `total` units of `what` (e.g. "wmt lengths", in pairs), at
// `rate` units per second, `eta_seconds` to go (0 while the rate is
// unknown).
struct IndexProgress {
  std::string what;
  std::string unit;  // what done/total count ("pairs")
  uint64_t done = 0;
  uint64_t total = 0;
  double rate = 0;
  double eta_seconds = 0;
};

// Where a workload gets the stored bytes of the examples it decodes when the
// server reads ahead (server/readahead.h). The read-ahead stage calls the
// workload's own ExampleReadFn, so every rule of the source (how files are
// opened, size caps) applies unchanged.
//
// Thread safety: Read may be called from any number of worker threads.
class ExamplePrefetch {
 public:
  virtual ~ExamplePrefetch() = default;
  // Example `id` at (epoch, position) of the stream: the bytes read ahead when
  // that read succeeded, else a read through the same function, whose error
  // is returned exactly as the source reports it (a failed read ahead is
  // never delivered: the read is made again, as it would have been made
  // without read-ahead).
  //
  // On the server's workers, Read never waits for storage: when the bytes
  // are not there yet it returns a status for which IsReadPending is true.
  // FillItem must then return that status at once, unchanged, counting and
  // logging nothing for it (no decode error, no substitute): the engine
  // runs the item again, from its start, once the bytes are there, and the
  // reads it made before then succeed at once with the same bytes.
  virtual absl::Status Read(uint64_t epoch, uint64_t position, uint64_t id,
                            std::string* bytes, int64_t* label) = 0;
};

// The status of an ExamplePrefetch::Read whose bytes are not there yet.
inline constexpr char kReadPendingPayload[] = "batchd.dev/read-pending";
inline absl::Status ReadPendingError() {
  absl::Status s = absl::UnavailableError("the example's bytes are not read yet");
  s.SetPayload(kReadPendingPayload, absl::Cord("1"));
  return s;
}
inline bool IsReadPending(const absl::Status& s) {
  return absl::IsUnavailable(s) && s.GetPayload(kReadPendingPayload).has_value();
}

// Example `id`'s stored bytes (and, for sources that keep them beside the
// bytes, its label). Must be callable from any thread.
using ExampleReadFn = std::function<absl::Status(
    uint64_t id, std::string* bytes, int64_t* label)>;

class Workload {
 public:
  virtual ~Workload() = default;

  // The stream's schedule: which items make up each batch. Default: the
  // examples of the sampler's order (ExampleSchedule). A workload that
  // packs rows returns its own (PackedSchedule); the schedule may keep a
  // reference to this workload, which outlives it.
  virtual std::unique_ptr<Schedule> MakeSchedule(const Sampler& sampler) const {
    return std::make_unique<ExampleSchedule>(sampler);
  }

  // Read-ahead. A workload that reads each example from storage on its own
  // (ImageNet's files and records, WMT's TFDS records) returns that read
  // here; empty (the default): the workload is not read ahead (synthetic
  // data, WMT text files). Which examples a step reads, and their keys, is
  // the schedule's ExamplesOf.
  virtual ExampleReadFn example_reader() const { return nullptr; }
  // What example_reader reads for `id`, for messages (the file, or the
  // shard and record): "/data/train/n01/x.JPEG". Never does I/O.
  // Default: "example <id>".
  virtual std::string DescribeExample(uint64_t id) const {
    return "example " + std::to_string(id);
  }
  // FillItem then takes the first read of each example it reads from
  // `prefetch`, keyed as the schedule's ExamplesOf keys it (the ItemRef's
  // epoch and position for items that are examples). Set once,
  // before the first FillItem; `prefetch` outlives every FillItem.
  // Default: ignored.
  virtual void set_prefetch(ExamplePrefetch* prefetch) {}

  // The indexing in progress, if any; nullopt when none runs (the
  // default). Cheap (a few atomic loads); callable from any thread while
  // another thread indexes.
  virtual std::optional<IndexProgress> progress() const {
    return std::nullopt;
  }

  // Bytes this stream's workload keeps resident (its model), charged to
  // the stream's owner. A model shared by several streams counts in each
  // of them. Cheap; callable from any thread. Default: 0.
  virtual uint64_t resident_bytes() const { return 0; }

  virtual uint64_t num_examples() const = 0;
  // Training streams shuffle and repeat; others run once in order.
  virtual bool shuffle() const = 0;
  virtual const std::vector<TensorLayout>& tensors() const = 0;
  // Writes item `item` of the schedule (an example, or a packed row) into
  // out[k], the item's bytes of tensor k (each tensors()[k].ExampleBytes()
  // long). Called for padding too (item.valid false), which must be
  // written deterministically (zeros, weight 0).
  virtual absl::Status FillItem(const ItemRef& item, uint8_t* const* out,
                                WorkloadCounters* counters) const = 0;
};

}  // namespace batchd

#endif  // BATCHD_WORKLOADS_WORKLOAD_H_

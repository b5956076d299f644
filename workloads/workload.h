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
#include "base/work_context.h"
#include "client/include/batchd/dtype.h"
#include "storage/data_file.h"
#include "storage/read_access.h"
#include "workloads/fill_context.h"
#include "workloads/options.h"
#include "workloads/sampler.h"
#include "workloads/schedule.h"
#include "workloads/split.h"

namespace batchd {

class CacheDir;    // storage/cache_dir.h
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
  // it (storage/data_file.h). Empty: data_path is the root.
  std::string data_root;
  // Whose permissions every file is opened with: the caller's, so that a
  // stream reads only what its owner could read (workloads/common/
  // read_access.h). Default: the daemon's (tools and tests).
  ReadAccess access;
  // No data file larger than this is opened (batchd
  // --max-data-file-bytes): refused, naming the file, before any pass over
  // it. Default: kDefaultMaxDataFileBytes (256 GiB).
  uint64_t max_data_file_bytes = kDefaultMaxDataFileBytes;
  // Whom the stream is made for and whether its request still wants it
  // (base/work_context.h): CreateWorkload runs the workload's factory
  // under it, so that the tasks the factory submits are the owner's and
  // its long loops (CheckCancelled, ParallelFor) stop with CANCELLED once
  // the request is cancelled. Default: the daemon's own, never cancelled.
  WorkContext work;
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
  // The root every file of the stream is opened through: data_root
  // (data_path when that is empty), with `access`'s permissions and
  // max_data_file_bytes.
  absl::StatusOr<std::shared_ptr<const DataRoot>> OpenDataRoot() const {
    return DataRoot::Open(data_root.empty() ? data_path : data_root, access,
                          max_data_file_bytes);
  }
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

  // Where the examples this workload reads are stored (its files, its
  // records), or null (the default) when it reads nothing through the
  // context: synthetic data, text files held in memory. The server reads
  // ahead from it: which examples a step reads, and their keys, is the
  // schedule's ExamplesOf, and FillItem reads exactly those, through its
  // context. Lives as long as the workload.
  virtual const ExampleSource* source() const { return nullptr; }

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
  // Whether one example makes many rows of a batch (criteo1tb's examples
  // are blocks of lines, its schedule's rows the lines): a training epoch
  // may then hold fewer examples than one global batch, and its schedule
  // checks the rows instead. Default: false.
  virtual bool examples_hold_many_rows() const { return false; }
  // Training streams shuffle and repeat; others run once in order.
  virtual bool shuffle() const = 0;
  virtual const std::vector<TensorLayout>& tensors() const = 0;
  // Writes item ctx.item() of the schedule (an example, or a packed row)
  // into out[k], the item's bytes of tensor k (each
  // tensors()[k].ExampleBytes() long), counting into ctx.counters() (may be
  // null). Called for padding too (item.valid false), which must be written
  // deterministically (zeros, weight 0). Stored bytes are read only through
  // ctx.Read, which follows the pending rule (workloads/fill_context.h).
  virtual absl::Status FillItem(FillContext& ctx,
                                uint8_t* const* out) const = 0;

  // FillItem outside the engine (tools, tests): reads from source(), without
  // read-ahead.
  absl::Status FillItem(const ItemRef& item, uint8_t* const* out,
                        WorkloadCounters* counters) const {
    FillContext ctx(item, counters, source());
    return FillItem(ctx, out);
  }
};

}  // namespace batchd

#endif  // BATCHD_WORKLOADS_WORKLOAD_H_

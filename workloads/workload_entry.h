// What a workload declares of itself, once: its entry (name, one line of
// help, the splits it serves, its options with their defaults and bounds,
// whether it reads files, and its factory), and the prologue every
// workload shares, which CreateWorkload runs before the factory: the
// options parsed against the entry's table, the split against its splits,
// the data root opened (with the stream owner's permissions and the
// daemon's size limit), all under the request's work context. The factory
// is handed the result (WorkloadContext) and builds the workload.
//
// The daemon's table of entries is workloads/registry.h; `batchd --help`,
// `batchctl plan` and the tests read splits and options from the entries,
// so nothing outside a workload's folder restates them. Options several
// workloads take are declared once here (EvalTrainExamples, MaxFileBytes,
// IndexThreads), as DALI's readers inherit LoaderBase's; an entry names
// them with its own default.
//
// Thread safety: entries are constant; CreateWorkload may be called from
// any thread.
#ifndef BATCHD_WORKLOADS_WORKLOAD_ENTRY_H_
#define BATCHD_WORKLOADS_WORKLOAD_ENTRY_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "storage/data_file.h"
#include "workloads/options.h"
#include "workloads/split.h"
#include "workloads/workload.h"

namespace batchd {

// What a factory is handed: the stream's config, and what the prologue
// made of it. Borrowed for the factory's call.
struct WorkloadContext {
  const WorkloadConfig& config;  // seed, cache, executor, shared, as given
  const OptionValues& options;   // every option of the entry, by key
  Split split;                   // the split, parsed
  // The data root every file is opened through (storage/data_file.h):
  // the daemon's --data-root (data_path in tools and tests
  // that give none), with the owner's permissions and max_data_file_bytes.
  // Null for an entry that reads no files.
  std::shared_ptr<const DataRoot> root;

  // The data set's path, already confined to the root ("" when none).
  const std::string& data_path() const { return config.data_path; }
  // The split as the spec spells it (for messages, and for a workload
  // whose files are named as spelt: ImageNet's "val").
  const std::string& split_name() const { return config.split; }
  uint64_t seed() const { return config.seed; }
  // The daemon's pool for indexing (WorkloadConfig::pool).
  Executor* pool() const { return config.pool(); }
};

using WorkloadFactory =
    absl::StatusOr<std::unique_ptr<Workload>> (*)(const WorkloadContext&);

struct WorkloadEntry {
  const char* name;                // the spec's `workload`
  const char* help;                // what it serves, in one line of ~66 chars
  absl::Span<const Split> splits;  // those it serves, train first
  absl::Span<const OptionSpec> options;  // every option it takes
  WorkloadFactory factory;               // builds one stream's workload
  // Whether it reads a data set (files under the data path): the
  // prologue then opens the data root. Only a generator says false.
  bool reads_files = true;
};

// `entry`'s workload for `config`: the prologue, then the factory, both
// under config.work (what the factory does is the stream's owner's, and
// stops when its request is cancelled). The errors are the prologue's
// ("<name>: unknown option 'k' (known: ...)", "<name>: unknown split 's'
// (known: ...)", the data root's) or the factory's.
absl::StatusOr<std::unique_ptr<Workload>> CreateWorkload(
    const WorkloadEntry& entry, const WorkloadConfig& config);

// The options several workloads take, declared once.

// The largest eval_train_examples: every workload clamps it to the train
// split's size, so the bound only keeps figures sane.
inline constexpr uint64_t kMaxEvalTrainExamples = uint64_t(1) << 40;
// The largest max_file_bytes a stream may ask for.
inline constexpr uint64_t kMaxFileBytesLimit = uint64_t(256) << 20;
// The largest index_threads (more means all the daemon's threads).
inline constexpr uint64_t kMaxIndexThreads = uint64_t(1) << 20;

// eval_train_examples: the size of the eval_train split, `algoperf` by
// default (the workload's num_eval_train_examples in AlgoPerf).
constexpr OptionSpec EvalTrainExamples(uint64_t algoperf) {
  return UintOption("eval_train_examples", algoperf, 1, kMaxEvalTrainExamples,
                    "examples of the eval_train split (AlgoPerf's "
                    "num_eval_train_examples; at most the train split's)");
}
// max_file_bytes: the largest file one example is read from.
constexpr OptionSpec MaxFileBytes() {
  return UintOption("max_file_bytes", kDefaultMaxFileBytes, 1,
                    kMaxFileBytesLimit,
                    "the largest file one example is read from; a larger "
                    "one is a decode error");
}
// index_threads: a bound on one stream's share of the daemon's indexing
// threads (batchd --index-threads), never a count of threads to start.
constexpr OptionSpec IndexThreads() {
  return UintOption("index_threads", 0, 0, kMaxIndexThreads,
                    "the daemon's indexing threads one stream's indexing "
                    "may use at once (0 or more than there are: all)");
}

}  // namespace batchd

#endif  // BATCHD_WORKLOADS_WORKLOAD_ENTRY_H_

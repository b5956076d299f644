// How a workload reads the examples it decodes. A workload that reads
// storage declares where its examples are stored (an ExampleSource, from
// Workload::source()) and reads them only through the FillContext the engine
// passes to FillItem. The context reads through the server's read-ahead when
// it is on and from the source when it is off: the workload never knows
// which, and never branches on it.
//
// The pending rule (the one rule a workload follows for read-ahead): a Read
// may return a status for which IsReadPending is true (the bytes are being
// read and the worker does not wait for storage). FillItem then returns that
// status at once, unchanged, counting and logging nothing for it (no decode
// error, no substitute). The engine runs the item again, from its start,
// once the bytes are there, and every read the item made before then
// returns at once with the same bytes.
//
// Thread safety: an ExampleSource is called from any number of threads at
// once; a FillContext belongs to one item on one thread.
#ifndef BATCHD_WORKLOADS_FILL_CONTEXT_H_
#define BATCHD_WORKLOADS_FILL_CONTEXT_H_

#include <cstdint>
#include <string>
#include <utility>

#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "workloads/schedule.h"
#include "workloads/workload_counters.h"

namespace batchd {

// Where a workload's examples are stored: one read per example, of the bytes
// the workload decodes (a file, a record). Every rule of the storage (how
// files are opened through the data root, size caps) lives in Read, so the
// read-ahead, which calls it on its own threads, applies them unchanged.
class ExampleSource {
 public:
  virtual ~ExampleSource() = default;
  // The stored bytes of `key` (key.id, numbered as key.kind says) and, for
  // sources that keep one beside the bytes, its label (else 0). The error is
  // the storage's own, naming the file. Never depends on key.epoch or
  // key.position: the same example reads the same bytes wherever it falls.
  // *bytes may hold an earlier example's bytes (a buffer reused for its
  // memory): Read replaces them.
  virtual absl::Status Read(const ExampleKey& key, std::string* bytes,
                            int64_t* label) const = 0;
  // What Read reads for `key`, for messages ("/data/train/n01/x.JPEG").
  // Never does I/O. Default: "example <id>".
  virtual std::string Describe(const ExampleKey& key) const {
    return absl::StrCat("example ", key.id);
  }
};

// The status of a read whose bytes are not there yet (the pending rule).
inline constexpr char kReadPendingPayload[] = "batchd.dev/read-pending";
inline absl::Status ReadPendingError() {
  absl::Status s =
      absl::UnavailableError("the example's bytes are not read yet");
  s.SetPayload(kReadPendingPayload, absl::Cord("1"));
  return s;
}
inline bool IsReadPending(const absl::Status& s) {
  return absl::IsUnavailable(s) &&
         s.GetPayload(kReadPendingPayload).has_value();
}

// What a FillContext reads through when the server reads ahead (the
// engine's; server/readahead.h). Read follows the pending rule.
class ExampleReader {
 public:
  virtual absl::Status Read(const ExampleKey& key, std::string* bytes,
                            int64_t* label) = 0;

 protected:
  ~ExampleReader() = default;
};

// One item's fill: the item, the counters it adds to, and its reads.
class FillContext {
 public:
  // `source` (may be null: the workload reads nothing) and `reader` (null:
  // read the source directly) outlive the context.
  FillContext(const ItemRef& item, WorkloadCounters* counters,
              const ExampleSource* source, ExampleReader* reader = nullptr)
      : item_(item), counters_(counters), source_(source), reader_(reader) {}
  FillContext(const FillContext&) = delete;
  FillContext& operator=(const FillContext&) = delete;

  const ItemRef& item() const { return item_; }
  // Where FillItem counts decode errors and skipped examples; may be null.
  WorkloadCounters* counters() const { return counters_; }
  // The item's own example (for items that are examples).
  ExampleKey key() const { return {item_.epoch, item_.position, item_.id}; }

  // The stored bytes of `key` (see ExampleSource::Read), read ahead or not;
  // follows the pending rule. An item reads each key at most once an
  // attempt.
  absl::Status Read(const ExampleKey& k, std::string* bytes, int64_t* label) {
    for (Given& g : given_) {
      if (g.taken || !(g.key == k)) continue;
      g.taken = true;
      if (!g.status.ok()) return g.status;
      bytes->swap(g.bytes);
      *label = g.label;
      return absl::OkStatus();
    }
    if (reader_ != nullptr) {
      // A read not handed in: the workload calls back into the server.
      ++reader_reads_;
      return reader_->Read(k, bytes, label);
    }
    if (source_ == nullptr) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the workload reads example ", k.id,
          " but declares no source of stored examples (Workload::source)"));
    }
    return source_->Read(k, bytes, label);
  }

  // The engine: the read of one example the item reads (its status, its
  // bytes: Schedule::ExamplesOfItem), made before FillItem (read ahead, or
  // inline), so that the item's first Read of `k` returns it without
  // another call.
  void Give(const ExampleKey& k, const absl::Status& read, std::string* bytes,
            int64_t label) {
    given_.emplace_back();
    Given& g = given_.back();
    g.key = k;
    g.status = read;
    g.bytes.swap(*bytes);
    g.label = label;
  }
  // The item's own example (items that are examples).
  void Give(const absl::Status& read, std::string* bytes, int64_t label) {
    Give(key(), read, bytes, label);
  }

  // The engine, after FillItem: buffer i for the next item's reads (what
  // the workload's Read left in exchange for the i-th bytes given), so that
  // reads reuse memory rather than allocate it.
  void ReturnBuffer(size_t i, std::string* buffer) {
    if (i < given_.size()) buffer->swap(given_[i].bytes);
  }
  void ReturnBuffer(std::string* buffer) { ReturnBuffer(0, buffer); }

  // The reads this context passed to the server's reader (ExampleReader)
  // rather than answering them from what was given: each is a call from the
  // workload back across the server/workload line.
  uint64_t reader_reads() const { return reader_reads_; }

 private:
  struct Given {
    ExampleKey key;
    absl::Status status;
    std::string bytes;
    int64_t label = 0;
    bool taken = false;
  };
  const ItemRef item_;
  WorkloadCounters* const counters_;
  const ExampleSource* const source_;
  ExampleReader* const reader_;
  absl::InlinedVector<Given, 1> given_;
  uint64_t reader_reads_ = 0;
};

}  // namespace batchd

#endif  // BATCHD_WORKLOADS_FILL_CONTEXT_H_

// One item a worker fills with read-ahead on, across the attempts it takes:
// the reads it made (kept until ReadAhead::FinishItem, so that an attempt
// after a pending read finds the same bytes) and what it waits for. It is
// the ExampleReader behind the item's FillContext: a workload's reads go
// through it to its stream (server/readahead.h).
//
// Bytes read ahead are copied into the worker's buffer while the item may
// still run again, and handed over (no copy) once it may not: the engine's
// ReadInto hands over every example of the item when none is missing, and
// from then on, until the attempt ends, a read the item makes is never
// pending (a substitute for a corrupt file is read by the worker itself,
// or waited for when in flight), so the item never needs those bytes again.
//
// Thread safety: owned by the engine, used by one thread at a time.
#ifndef BATCHD_SERVER_READAHEAD_ITEM_H_
#define BATCHD_SERVER_READAHEAD_ITEM_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "server/readahead_types.h"
#include "workloads/fill_context.h"

namespace batchd {

class ReadAheadItem : public ExampleReader {
 public:
  // `stream` must outlive the item; `lane` is the rank's lane (demand reads
  // count against it), `step` the step decoded.
  ReadAheadItem(ReadAheadStream* stream, uint64_t lane, uint64_t step)
      : stream_(stream), lane_(lane), step_(step) {}
  ReadAheadItem(const ReadAheadItem&) = delete;
  ReadAheadItem& operator=(const ReadAheadItem&) = delete;

  // The item's read of `key` (ReadAheadStream::Read for this item).
  absl::Status Read(const ExampleKey& key, std::string* bytes,
                    int64_t* label) override;
  // The engine, before FillItem: reads the examples the item reads
  // (Schedule::ExamplesOfItem), into `buffers` (grown to keys.size()), and
  // gives each to `ctx`; or, when one is not there yet, gives nothing and
  // the item is pending().
  void ReadInto(const std::vector<ExampleKey>& keys,
                std::vector<std::string>* buffers, FillContext* ctx);

  // The engine, before each attempt: what the last one waited for landed.
  void BeginAttempt();
  // A read of the last attempt found no bytes yet: run the item again
  // once landed() is true.
  bool pending() const { return wait_ != nullptr; }
  // The bytes waited for are there (or will never be: their lane or stream
  // went). True when nothing is pending.
  bool landed() const {
    return wait_ == nullptr || wait_->landed.load(std::memory_order_acquire);
  }
  // When the item began to wait (MonotonicNanos); 0 when not pending.
  uint64_t pending_since_ns() const { return pending_since_ns_; }

  // What the items waiting for one read share: set once it lands.
  struct Wait {
    std::atomic<bool> landed{false};
  };

 private:
  friend class ReadAhead;
  friend class ReadAheadReader;
  friend class ReadAheadStream;
  using Key = ReadAheadEntryKey;

  ReadAheadStream* const stream_;
  const uint64_t lane_;
  const uint64_t step_;
  std::vector<Key> taken_;      // entries this item holds
  Key waiting_for_{};           // the entry of wait_
  std::shared_ptr<Wait> wait_;  // null: nothing pending
  uint64_t pending_since_ns_ = 0;
  uint64_t waited_ns_ = 0;  // over the earlier attempts
  // Bytes were handed over in this attempt: it must not be pending.
  bool handed_over_ = false;
};

}  // namespace batchd

#endif  // BATCHD_SERVER_READAHEAD_ITEM_H_

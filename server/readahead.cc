// The read-ahead stage: its streams and lanes, the reads of workers and of
// the I/O threads; see readahead.h.
#include "server/readahead.h"

#include <utility>

#include "absl/container/inlined_vector.h"
#include "absl/time/time.h"
#include "base/clock.h"
#include "server/readahead_clock.h"

namespace batchd {

namespace {

// A source made of functions (tests, tools).
class FunctionSource : public ExampleSource {
 public:
  FunctionSource(ExampleReadFn read, ExampleDescribeFn describe)
      : read_(std::move(read)), describe_(std::move(describe)) {}
  absl::Status Read(const ExampleKey& key, std::string* bytes,
                    int64_t* label) const override {
    return read_(key.id, bytes, label);
  }
  std::string Describe(const ExampleKey& key) const override {
    return describe_ ? describe_(key.id) : ExampleSource::Describe(key);
  }

 private:
  const ExampleReadFn read_;
  const ExampleDescribeFn describe_;
};

}  // namespace

// ------------------------------------------------------------ items, streams

absl::Status ReadAheadItem::Read(const ExampleKey& key, std::string* bytes,
                                 int64_t* label) {
  return stream_->Read(this, key, bytes, label);
}

void ReadAheadItem::ReadInto(const std::vector<ExampleKey>& keys,
                             std::vector<std::string>* buffers,
                             FillContext* ctx) {
  stream_->owner_->ReadInto(this, keys, buffers, ctx);
}

void ReadAheadItem::BeginAttempt() {
  handed_over_ = false;
  if (wait_ != nullptr) {
    waited_ns_ += MonotonicNanos() - pending_since_ns_;
    wait_.reset();
    pending_since_ns_ = 0;
  }
}

ReadAheadStream::~ReadAheadStream() { owner_->RemoveStream(this); }

absl::Status ReadAheadStream::Read(ReadAheadItem* item, const ExampleKey& key,
                                   std::string* bytes, int64_t* label) {
  if (item == nullptr || item->stream_ != this) {
    return owner_->ReadOutsideItem(this, key, bytes, label);
  }
  return owner_->ReadForItem(this, item, key, bytes, label);
}

ReadAheadStats ReadAheadStream::stats() const { return owner_->Stats(this); }

void ReadAheadStream::Forgo(const ExampleKey& key) { owner_->Forgo(this, key); }

std::string ReadAheadStream::StallReason(const ReadAheadItem& item,
                                         uint64_t now_ns) const {
  return owner_->StallReason(this, item, now_ns);
}

// ------------------------------------------------------------ ReadAhead

ReadAhead::ReadAhead(const Options& options)
    : options_(options),
      lanes_(options.budget_bytes),
      reader_({options.io_threads, options.inline_read_ns}, &lanes_),
      pool_(options.io_threads, kIdleExitSeconds,
            [this](std::string* buffer) { return RunOne(buffer); }) {}

ReadAhead::~ReadAhead() { Stop(0); }

std::shared_ptr<ReadAheadStream> ReadAhead::AddStream(
    const std::string& name, std::shared_ptr<const ExampleSource> source) {
  if (!enabled() || source == nullptr) return nullptr;
  std::shared_ptr<ReadAheadStream> stream(new ReadAheadStream(this, name));
  stream->source_ = source.get();
  absl::MutexLock lock(&mu_);
  stream->inline_ = reader_.AddStream(stream.get(), std::move(source));
  return stream;
}

std::shared_ptr<ReadAheadStream> ReadAhead::AddStream(
    const std::string& name, ExampleReadFn read, ExampleDescribeFn describe) {
  if (!read) return nullptr;
  return AddStream(name, std::make_shared<FunctionSource>(std::move(read),
                                                          std::move(describe)));
}

absl::Status ReadAhead::EnsureThread() {
  if (!enabled()) return absl::OkStatus();
  return pool_.EnsureThread();
}

void ReadAhead::RemoveStream(ReadAheadStream* stream) {
  std::shared_ptr<const ExampleSource> gone;
  bool landed = false;
  {
    absl::MutexLock lock(&mu_);
    for (LaneId id : lanes_.LanesOf(stream)) lanes_.Remove(id);
    reader_.Closing(stream);  // nothing more is issued for the stream
    // Reads of storage that answers are waited for, as their function may
    // use what goes with the stream; a read that has not returned within
    // kRemoveWaitSeconds of its start (a stalled mount) is not.
    for (uint64_t newest; (newest = reader_.NewestReadStart(stream)) != 0;) {
      const uint64_t until = newest + uint64_t(kRemoveWaitSeconds * 1e9);
      const uint64_t now = MonotonicNanos();
      if (now >= until) break;
      done_cv_.WaitWithTimeout(&mu_, absl::Nanoseconds(until - now));
    }
    landed = reader_.RemoveStream(stream, &gone);
    done_cv_.SignalAll();
    Wake(true);  // the other streams' shares grew
  }
  if (landed) CallOnLanded();
  gone.reset();  // the source (and what it holds) goes here
}

ReadAhead::LaneId ReadAhead::AddLane(
    const std::shared_ptr<ReadAheadStream>& stream, LaneOrderFn order,
    uint64_t first_step) {
  if (stream == nullptr) return 0;
  absl::MutexLock lock(&mu_);
  const LaneId id = lanes_.Add(stream.get(), std::move(order), first_step);
  Wake(true);
  return id;
}

void ReadAhead::RemoveLane(LaneId id) {
  if (id == 0) return;
  bool landed = false;
  {
    absl::MutexLock lock(&mu_);
    const ReadAheadStream* stream = lanes_.StreamOf(id);
    if (stream == nullptr) return;
    landed = reader_.DropLane(stream, id);
    lanes_.Remove(id);
    Wake(true);            // the other lanes' shares grew
    done_cv_.SignalAll();  // a waiter may wait for an entry just dropped
  }
  if (landed) CallOnLanded();
}

void ReadAhead::Decoding(LaneId id, uint64_t step) {
  if (id == 0) return;
  absl::MutexLock lock(&mu_);
  if (!lanes_.Decoding(id, step)) return;
  // While the workers read inline there is nothing to issue: the I/O
  // threads sleep (and end), rather than wake at every step.
  if (!reader_.ReadsInline(lanes_.StreamOf(id))) Wake(true);
}

void ReadAhead::FinishItem(ReadAheadItem* item) {
  if (item->stream_ != nullptr &&
      (!item->taken_.empty() || item->waited_ns_ != 0)) {
    absl::MutexLock lock(&mu_);
    if (reader_.FinishItem(item)) Wake(false);  // budget freed
  }
  item->taken_.clear();
  item->waited_ns_ = 0;
  item->wait_.reset();
  item->pending_since_ns_ = 0;
  item->handed_over_ = false;
}

void ReadAhead::Forgo(ReadAheadStream* stream, const ExampleKey& key) {
  absl::MutexLock lock(&mu_);
  if (reader_.Forgo(stream, EntryKeyOf(key))) Wake(false);  // share freed
}

void ReadAhead::SetOnLanded(std::function<void()> on_landed) {
  absl::MutexLock lock(&landed_mu_);
  on_landed_ = std::move(on_landed);
}

void ReadAhead::CallOnLanded() {
  absl::MutexLock lock(&landed_mu_);
  if (on_landed_) on_landed_();
}

uint64_t ReadAhead::max_total_held_bytes() const {
  absl::MutexLock lock(&mu_);
  return lanes_.max_total_held();
}

ReadAheadStats ReadAhead::Stats(const ReadAheadStream* stream) const {
  absl::MutexLock lock(&mu_);
  return reader_.Stats(stream);
}

std::string ReadAhead::StallReason(const ReadAheadStream* stream,
                                   const ReadAheadItem& item,
                                   uint64_t now_ns) const {
  absl::MutexLock lock(&mu_);
  return reader_.StallReason(stream, item, now_ns, pool_.live(),
                             pool_.thread_error());
}

void ReadAhead::Wake(bool all) { pool_.Wake(all, reader_.StuckThreads()); }

bool ReadAhead::Stop(uint64_t deadline_ns) { return pool_.Stop(deadline_ns); }

void ReadAhead::WaitIdleForTest() {
  absl::MutexLock lock(&mu_);
  while (true) {
    Pick pick;
    if (reader_.Idle() && !NextRead(&pick)) return;
    Wake(true);
    done_cv_.WaitWithTimeout(&mu_, absl::Milliseconds(5));
  }
}

// ------------------------------------------------------------ a worker's reads

template <typename ReadFn>
bool ReadAhead::ReadInline(ReadAheadStream* stream, size_t n,
                           const ReadFn& read) {
  ReadAheadInline* path = stream->inline_;
  const uint64_t bound =
      ReadAheadReader::kInlineStallFactor * options_.inline_read_ns;
  int slot;
  if (path == nullptr || !path->Begin(MonotonicNanos(), bound, &slot)) {
    return false;
  }
  path->Count(n);  // as the locked path counts: when decided
  const ThreadClock& clock = ThreadClock::Self();
  absl::InlinedVector<uint64_t, 2> slow;  // how long each slow read blocked
  for (size_t i = 0; i < n; ++i) {
    const ThreadSample start = clock.Sample();
    path->Start(slot, clock, start);
    read(i);
    const ThreadSample end = clock.Sample();
    path->Returned(slot);
    const uint64_t blocked = clock.BlockedNs(start, end);
    if (blocked > options_.inline_read_ns) slow.push_back(blocked);
  }
  path->End(slot);
  if (!slow.empty()) {
    // Noted as a read under the lock notes it (EndSelfRead): the path
    // closes, and enough of them send the stream back to reading ahead.
    absl::MutexLock lock(&mu_);
    bool ahead_again = false;
    for (uint64_t ns : slow)
      ahead_again |= reader_.NoteSlowInlineRead(stream, ns);
    if (ahead_again) Wake(true);
  }
  return true;
}

absl::Status ReadAhead::ReadSelf(ReadAheadReader::SelfRead* read,
                                 const ExampleKey& key, std::string* bytes,
                                 int64_t* label) {
  if (!read->begun) reader_.BeginSelfRead(read);
  const ThreadClock& clock = ThreadClock::Self();
  mu_.Unlock();
  absl::Status status = read->source->Read(key, bytes, label);
  const ThreadSample end = clock.Sample();
  // Returned: however long this thread now waits for the lock, no other
  // worker takes it for stalled storage.
  read->in_flight->returned.store(true, std::memory_order_release);
  mu_.Lock();
  if (reader_.EndSelfRead(*read, clock.BlockedNs(read->start, end))) {
    Wake(true);
  }
  return status;
}

absl::Status ReadAhead::ReadForItem(ReadAheadStream* stream,
                                    ReadAheadItem* item, const ExampleKey& key,
                                    std::string* bytes, int64_t* label) {
  absl::Status status;
  if (ReadInline(stream, 1, [&](size_t) {
        status = stream->source_->Read(key, bytes, label);
      })) {
    return status;
  }
  absl::MutexLock lock(&mu_);
  while (true) {
    WorkerRead r = reader_.ForItem(stream, item, EntryKeyOf(key), bytes, label,
                                   MonotonicNanos());
    switch (r.kind) {
      case WorkerRead::kGiven:
        return r.status;
      case WorkerRead::kPending:
        if (r.queued) Wake(false);
        return ReadPendingError();
      case WorkerRead::kSelf:
        return ReadSelf(&r.self, key, bytes, label);
      case WorkerRead::kWait:
        // A substitute in flight for an item that holds bytes handed over.
        done_cv_.Wait(&mu_);
        break;
    }
  }
}

void ReadAhead::ReadInto(ReadAheadItem* item,
                         const std::vector<ExampleKey>& keys,
                         std::vector<std::string>* buffers, FillContext* ctx) {
  if (buffers->size() < keys.size()) buffers->resize(keys.size());
  ReadAheadReader::WorkerReads reads;
  ReadAheadReader::Labels labels;
  reads.resize(keys.size());
  labels.resize(keys.size());
  if (ReadInline(item->stream_, keys.size(), [&](size_t i) {
        reads[i].status =
            item->stream_->source_->Read(keys[i], &(*buffers)[i], &labels[i]);
      })) {
    for (size_t i = 0; i < keys.size(); ++i) {
      ctx->Give(keys[i], reads[i].status, &(*buffers)[i], labels[i]);
    }
    return;
  }
  {
    absl::MutexLock lock(&mu_);
    const WorkerRead all = reader_.ForItemAll(
        item->stream_, item, keys, buffers, &reads, &labels, MonotonicNanos());
    if (all.kind == WorkerRead::kPending) {
      if (all.queued) Wake(false);
      return;
    }
    for (size_t i = 0; i < keys.size(); ++i) {
      if (reads[i].kind != WorkerRead::kSelf) continue;
      reads[i].status =
          ReadSelf(&reads[i].self, keys[i], &(*buffers)[i], &labels[i]);
    }
  }
  for (size_t i = 0; i < keys.size(); ++i) {
    ctx->Give(keys[i], reads[i].status, &(*buffers)[i], labels[i]);
  }
}

absl::Status ReadAhead::ReadOutsideItem(ReadAheadStream* stream,
                                        const ExampleKey& k, std::string* bytes,
                                        int64_t* label) {
  const uint64_t start = MonotonicNanos();
  const ReadAheadEntryKey key = EntryKeyOf(k);
  absl::MutexLock lock(&mu_);
  if (reader_.InFlight(stream, key, /*count_wait=*/true)) {
    while (reader_.InFlight(stream, key, false)) done_cv_.Wait(&mu_);
  }
  bool dropped;
  const bool taken =
      reader_.TakeOutsideItem(stream, key, bytes, label, &dropped);
  if (dropped) Wake(false);  // budget freed
  if (taken) {
    reader_.AddIoWait(stream, MonotonicNanos() - start);
    return absl::OkStatus();
  }
  // Not read ahead, or the read ahead failed: read now, as without
  // read-ahead, so that the error is the source's own.
  const ExampleSource* source = reader_.SyncRead(stream);
  mu_.Unlock();
  absl::Status status = source->Read(k, bytes, label);
  mu_.Lock();
  reader_.AddIoWait(stream, MonotonicNanos() - start);
  return status;
}

// ------------------------------------------------------------ I/O threads

bool ReadAhead::NextRead(Pick* pick) {
  if (reader_.NextDemand(pick)) return true;
  ReadAheadLanes::Pick ahead;
  if (!lanes_.Next(reader_, &ahead)) return false;
  pick->stream = ahead.stream;
  pick->key = ahead.key;
  pick->lane = ahead.lane;
  pick->step = ahead.step;
  pick->steps_ahead = ahead.steps_ahead;
  pick->demand = false;
  return true;
}

bool ReadAhead::RunOne(std::string* buffer) {
  absl::MutexLock lock(&mu_);
  Pick pick;
  if (!NextRead(&pick)) return false;
  if (!pick.demand) {
    lanes_.Issued(
        {pick.stream, pick.key, pick.lane, pick.step, pick.steps_ahead});
  }
  ReadAheadReader::Job job;
  if (!reader_.Start(pick, &job)) return true;  // a twin's bytes copied
  // This thread may not come back (a stalled mount): whatever else waits
  // must find another, idle or new.
  Pick next;
  if (pool_.idle() == 0 && NextRead(&next)) Wake(false);
  reader_.LendSpare(buffer);
  const ThreadClock& clock = ThreadClock::Self();
  mu_.Unlock();
  const ThreadSample start = clock.Sample();
  int64_t label = 0;
  absl::Status status = job.source->Read(ExampleKeyOf(job.key), buffer, &label);
  const ThreadSample end = clock.Sample();
  mu_.Lock();
  bool landed, wake_all;
  std::shared_ptr<const ExampleSource> gone;
  reader_.Finish(job, std::move(status), buffer, label,
                 clock.BlockedNs(start, end), &landed, &wake_all, &gone);
  done_cv_.SignalAll();
  if (wake_all) Wake(true);
  if (landed || gone != nullptr) {
    mu_.Unlock();
    gone.reset();  // a stream that went: its source goes with its last read
    if (landed) CallOnLanded();
    mu_.Lock();
  }
  return true;
}

}  // namespace batchd

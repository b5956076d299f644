// The worker pool and the per-rank producers; see engine.h.
#include "server/engine.h"

#include <pthread.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "base/clock.h"
#include "base/log.h"
#include "base/test_hooks.h"

namespace batchd {

absl::StatusOr<BatchLayout> BatchLayout::Make(
    const std::vector<TensorLayout>& tensors, uint64_t per_rank_batch) {
  BatchLayout layout;
  layout.per_rank_batch = per_rank_batch;
  uint64_t offset = shm::kSlotHeaderBytes;
  for (const TensorLayout& t : tensors) {
    // TensorLayout::ExampleBytes wraps; the sizes here come from requests.
    uint64_t example = shm::DTypeSize(uint32_t(t.dtype));
    bool bad = example == 0;
    for (int64_t d : t.example_shape) {
      bad |= d < 0 || __builtin_mul_overflow(example, uint64_t(d), &example);
    }
    uint64_t rank_bytes = 0, end = 0;
    if (bad || __builtin_mul_overflow(example, per_rank_batch, &rank_bytes) ||
        __builtin_add_overflow(offset, rank_bytes, &end) ||
        !shm::CheckedAlignUp(end, shm::kTensorAlign, &end) ||
        end > shm::kMaxSlotBytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor ", t.name, " of ", per_rank_batch,
          " examples per rank does not fit in a ring slot (the limit is ",
          shm::kMaxSlotBytes,
          " bytes a slot): use a smaller batch per rank or smaller examples"));
    }
    layout.entries.push_back(Entry{t, offset, example});
    offset = end;
  }
  layout.payload_bytes = offset - shm::kSlotHeaderBytes;
  return layout;
}

std::shared_ptr<Schedule> SharedSchedule(std::shared_ptr<StreamSetup> stream) {
  Schedule* schedule = stream->schedule.get();
  return std::shared_ptr<Schedule>(std::move(stream), schedule);
}

std::shared_ptr<Schedule> OwnSchedule(std::shared_ptr<StreamSetup> stream) {
  // The schedule goes before the stream whose workload it reads.
  struct Owned {
    std::shared_ptr<StreamSetup> stream;
    std::unique_ptr<Schedule> schedule;
    ~Owned() { schedule.reset(); }
  };
  auto owned = std::make_shared<Owned>();
  owned->schedule = stream->workload->MakeSchedule(stream->sampler);
  owned->stream = std::move(stream);
  Schedule* schedule = owned->schedule.get();
  return std::shared_ptr<Schedule>(std::move(owned), schedule);
}

RankProducer::RankProducer(std::shared_ptr<StreamSetup> stream, uint32_t rank,
                           uint64_t start_step,
                           std::unique_ptr<RingWriter> ring,
                           std::shared_ptr<Schedule> schedule)
    : stream_(std::move(stream)),
      rank_(rank),
      start_step_(start_step),
      ring_(std::move(ring)),
      schedule_(std::move(schedule)) {
  engine_state_.next_step = start_step;
}

Engine::Engine(int threads, ReadAhead* readahead, double read_stall_seconds,
               FillShare* share)
    : thread_count_(std::max(1, threads)),
      readahead_(readahead),
      share_(share),
      read_stall_ns_(uint64_t(std::max(0.0, read_stall_seconds) * 1e9)) {
  if (readahead_ != nullptr) {
    // A worker may be waiting for the chunk whose bytes just landed.
    readahead_->SetOnLanded([this] {
      absl::MutexLock lock(&mu_);
      cv_.Signal();
    });
  }
  for (int i = 0; i < thread_count_; ++i) {
    {
      absl::MutexLock lock(&mu_);
      ++live_workers_;
    }
    status_ = workers_.Start(
        absl::StrCat("worker thread ", i + 1, " of --threads ", thread_count_),
        "--threads", [this] { WorkerLoop(); });
    if (!status_.ok()) {
      {
        absl::MutexLock lock(&mu_);
        --live_workers_;
      }
      Stop();
      break;
    }
  }
}

Engine::~Engine() {
  Stop();
  if (readahead_ != nullptr) readahead_->SetOnLanded(nullptr);
}

bool Engine::Stop(uint64_t deadline_ns) {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
    cv_.SignalAll();
  }
  // Workers stuck in a call that has not returned (storage read by a
  // workload that reads nothing through its context) are abandoned.
  if (const int stuck = workers_.JoinUntil(deadline_ns); stuck > 0) {
    Log(LogLevel::kWarn, "workers_abandoned",
        {{"threads", std::to_string(stuck)},
         {"msg",
          "workers stuck in a call that has not returned are left "
          "to end with the process"}});
  }
  absl::MutexLock lock(&mu_);
  return live_workers_ == 0;
}

absl::Status Engine::Prepare(StreamSetup* stream) {
  if (readahead_ == nullptr || stream->source == nullptr) {
    return absl::OkStatus();
  }
  // The source holds the workload: a read stuck in a stalled mount may
  // return after the stream has gone.
  stream->readahead = readahead_->AddStream(stream->name, stream->source);
  if (stream->readahead == nullptr) return absl::OkStatus();  // off
  if (absl::Status s = readahead_->EnsureThread(); !s.ok()) {
    stream->readahead.reset();
    return s;
  }
  return absl::OkStatus();
}

void Engine::Add(std::shared_ptr<RankProducer> producer) {
  if (readahead_ != nullptr && producer->stream_->readahead != nullptr) {
    // The lane reads what RunTask will ask for, in its order. The stream
    // outlives the lane (its ReadAheadStream drops its lanes when it goes).
    std::shared_ptr<Schedule> schedule = producer->schedule_;
    const uint32_t rank = producer->rank_;
    producer->readahead_lane = readahead_->AddLane(
        producer->stream_->readahead,
        [schedule, rank](uint64_t step, std::vector<ReadAheadKey>* keys) {
          return schedule->ExamplesOf(step, rank, keys);
        },
        producer->start_step_);
  }
  if (ShareMember* share = producer->stream_->share.get()) {
    share->AddRank(producer.get());
  }
  {
    absl::MutexLock lock(&mu_);
    producers_.push_back(std::move(producer));
  }
  cv_.SignalAll();
}

void Engine::Retire(const std::shared_ptr<RankProducer>& producer) {
  if (readahead_ != nullptr) readahead_->RemoveLane(producer->readahead_lane);
  if (ShareMember* share = producer->stream_->share.get()) {
    share->RemoveRank(producer.get());
  }
  absl::MutexLock lock(&mu_);
  State(*producer).retired = true;
  DropParked(*producer);
  producers_.erase(std::remove(producers_.begin(), producers_.end(), producer),
                   producers_.end());
  // Fills its parked chunks had claimed were given up: their waiters may
  // fill them now.
  cv_.SignalAll();
}

void Engine::DropParked(RankProducer& p) {
  for (RankProducer::Job& job : State(p).inflight) {
    for (RankProducer::Parked& parked : job.parked) {
      if (readahead_ != nullptr && parked.item != nullptr) {
        readahead_->FinishItem(parked.item.get());
      }
    }
    job.parked.clear();  // gives up the fills they claimed
  }
}

namespace {

// The slot header of rank `items`' batch of `step`, written once, before
// the batch is published.
void WriteSlotHeader(const BatchLayout& layout, const StepItems& items,
                     const RowCursor& batch_cursor, uint64_t step,
                     uint64_t pos, shm::SlotHeader* h) {
  h->sequence = pos;
  h->step = step;
  h->epoch = items.epoch;
  h->position = items.first;
  h->cursor_epoch = items.cursor.epoch;
  h->cursor_window = items.cursor.window;
  h->cursor_row = items.cursor.row;
  h->batch_cursor_epoch = batch_cursor.epoch;
  h->batch_cursor_window = batch_cursor.window;
  h->batch_cursor_row = batch_cursor.row;
  h->valid_count = uint32_t(items.valid);
  // Test hook: a daemon that does not say where epochs end (one from
  // before the fields; every step of a packed epoch still being counted).
  static const bool hide_epochs =
      TestHook("BATCHD_TEST_HIDE_EPOCH_STEPS") != nullptr;
  h->epoch_first_step = hide_epochs ? 0 : items.epoch_first_step;
  h->epoch_steps = hide_epochs ? 0 : items.epoch_steps;
  h->num_tensors = uint32_t(layout.entries.size());
  h->payload_bytes = layout.payload_bytes;
  for (size_t k = 0; k < layout.entries.size(); ++k) {
    const BatchLayout::Entry& e = layout.entries[k];
    shm::TensorDesc& d = h->tensors[k];
    memset(&d, 0, sizeof(d));
    snprintf(d.name, sizeof(d.name), "%s", e.tensor.name.c_str());
    d.dtype = uint32_t(e.tensor.dtype);
    d.ndim = uint32_t(1 + e.tensor.example_shape.size());
    d.shape[0] = int64_t(layout.per_rank_batch);
    for (size_t i = 0; i < e.tensor.example_shape.size(); ++i) {
      d.shape[i + 1] = e.tensor.example_shape[i];
    }
    d.offset = e.offset;
    d.nbytes = e.example_bytes * layout.per_rank_batch;
  }
}

}  // namespace

bool Engine::FindTask(Task* task, bool* some_ring_full) {
  *some_ring_full = false;
  const size_t n = producers_.size();
  const uint64_t now = MonotonicNanos();
  const uint32_t max_chunks = uint32_t(2 * thread_count_);
  for (size_t i = 0; i < n; ++i) {
    const size_t idx = (round_robin_ + i) % n;
    const std::shared_ptr<RankProducer>& p = producers_[idx];
    if (p->failed.load(std::memory_order_relaxed)) continue;
    // Chunks whose bytes landed, then unclaimed chunks of batches already
    // started, come first.
    if (FindParked(p, now, task)) {
      round_robin_ = idx + 1;
      return true;
    }
    if (p->failed.load(std::memory_order_relaxed)) continue;  // stalled
    for (RankProducer::Job& job : State(*p).inflight) {
      if (job.next_chunk < job.chunks) {
        task->producer = p;
        task->step = job.step;
        task->pos = job.pos;
        task->chunk = job.next_chunk++;
        task->chunks = job.chunks;
        task->next_item = kChunkStart;
        task->item.reset();
        round_robin_ = idx + 1;
        return true;
      }
    }
    const StreamSetup& s = *p->stream_;
    // Where the next step lies may take epochs of counting (packed rows):
    // that happens on the schedule's own thread, never here, so that no
    // stream's preparation holds a worker (or the engine's lock) from the
    // others.
    const absl::Status ready = p->schedule_->Ready(State(*p).next_step);
    if (absl::IsUnavailable(ready)) continue;  // being prepared
    if (absl::IsOutOfRange(ready)) {           // a finite stream ended
      if (!State(*p).ended && State(*p).inflight.empty()) {
        State(*p).ended = true;
        p->ring_->SetState(shm::kStateEnded);
      }
      continue;
    }
    if (!ready.ok()) {
      Fail(*p, State(*p).next_step, ready);
      continue;
    }
    uint64_t pos;
    if (!p->ring_->TryClaim(&pos)) {
      if (State(*p).blocked_since_ns == 0) State(*p).blocked_since_ns = MonotonicNanos();
      *some_ring_full = true;
      continue;
    }
    if (State(*p).blocked_since_ns != 0) {
      p->server_wait_ns.fetch_add(MonotonicNanos() - State(*p).blocked_since_ns,
                                  std::memory_order_relaxed);
      State(*p).blocked_since_ns = 0;
    }
    const uint64_t step = State(*p).next_step++;
    if (readahead_ != nullptr) readahead_->Decoding(p->readahead_lane, step);
    const uint32_t chunks = uint32_t(std::max<uint64_t>(
        1, std::min<uint64_t>(s.layout.per_rank_batch, max_chunks)));
    State(*p).inflight.push_back({step, pos, chunks, 1, 0, absl::OkStatus(), {}});
    task->producer = p;
    task->step = step;
    task->pos = pos;
    task->chunk = 0;
    task->chunks = chunks;
    task->next_item = kChunkStart;
    task->item.reset();
    round_robin_ = idx + 1;
    return true;
  }
  return false;
}

bool Engine::FindParked(const std::shared_ptr<RankProducer>& p, uint64_t now,
                        Task* task) {
  for (RankProducer::Job& job : State(*p).inflight) {
    for (size_t k = 0; k < job.parked.size(); ++k) {
      RankProducer::Parked& parked = job.parked[k];
      const bool landed = parked.share.waiting()
                              ? parked.share.settled()
                              : parked.item == nullptr || parked.item->landed();
      if (landed) {
        task->producer = p;
        task->step = job.step;
        task->pos = job.pos;
        task->chunk = parked.chunk;
        task->chunks = job.chunks;
        task->next_item = parked.next_item;
        task->item = std::move(parked.item);
        task->share = std::move(parked.share);
        job.parked.erase(job.parked.begin() + k);
        return true;
      }
      // A fill waited for is another worker's, which ends: no deadline.
      if (parked.item == nullptr || parked.share.waiting()) continue;
      const uint64_t since = parked.item->pending_since_ns();
      if (read_stall_ns_ != 0 && since != 0 && now > since &&
          now - since >= read_stall_ns_) {
        // Its storage does not answer: the rank ends with the reason, so
        // that its client knows, and it holds nothing of the others.
        const std::string why = absl::StrCat(
            "storage stalled: ",
            p->stream_->readahead->StallReason(*parked.item, now),
            " (--read-stall-seconds ",
            absl::StrFormat("%g", double(read_stall_ns_) / 1e9), ")");
        Fail(*p, job.step, absl::DeadlineExceededError(why));
        return false;
      }
    }
  }
  return false;
}

bool Engine::RunTask(Task* task, absl::Status* status,
                     std::vector<std::string>* read_buffers) {
  Task& t = *task;
  StreamSetup& s = *t.producer->stream_;
  // FindTask saw the step ready: this does not wait.
  Schedule& schedule = *t.producer->schedule_;
  absl::StatusOr<StepItems> items = schedule.Locate(t.step, t.producer->rank_);
  if (!items.ok()) {
    *status = items.status();
    return false;
  }
  if (t.chunk == 0 && t.next_item == kChunkStart) {
    // The global batch's cursor is rank 0's.
    RowCursor batch_cursor = items->cursor;
    if (t.producer->rank_ != 0) {
      absl::StatusOr<StepItems> first = schedule.Locate(t.step, 0);
      if (!first.ok()) {
        *status = first.status();
        return false;
      }
      batch_cursor = first->cursor;
    }
    WriteSlotHeader(s.layout, *items, batch_cursor, t.step, t.pos,
                    t.producer->ring_->Slot(t.pos));
  }
  const uint64_t lo = items->count * t.chunk / t.chunks;
  const uint64_t hi = items->count * (t.chunk + 1) / t.chunks;
  uint8_t* base = t.producer->ring_->SlotBase(t.pos);
  const size_t nt = s.layout.entries.size();
  std::vector<uint8_t*> out(nt);
  ReadAheadStream* const ra = s.readahead.get();
  if (ra != nullptr && t.item == nullptr) {
    t.item = std::make_unique<ReadAheadItem>(ra, t.producer->readahead_lane,
                                             t.step);
  }
  // With read-ahead on, the examples an item reads are read here and
  // handed in the context (Schedule::ExamplesOfItem): the workload's reads
  // never call back into the read-ahead.
  std::vector<ExampleKey> keys;
  std::vector<std::string>& buffers = *read_buffers;
  ShareMember* const share = s.share.get();
  for (uint64_t e = t.next_item == kChunkStart ? lo : t.next_item; e < hi;
       ++e) {
    const ItemRef item = schedule.Item(*items, e);
    for (size_t k = 0; k < nt; ++k) {
      const BatchLayout::Entry& entry = s.layout.entries[k];
      out[k] = base + entry.offset + e * entry.example_bytes;
    }
    if (share != nullptr) {
      // Another stream of the same content may have filled the item, or be
      // filling it now (server/fill_share.h).
      const ShareMember::Begin begin =
          share->BeginItem(t.step, item, out.data(), &s.counters, &t.share);
      if (begin == ShareMember::Begin::kWait) {
        t.next_item = e;
        return true;
      }
      if (begin == ShareMember::Begin::kCopied) {
        // What was read ahead for the item is not needed.
        keys.clear();
        if (ra != nullptr && schedule.ExamplesOfItem(*items, e, &keys)) {
          for (const ExampleKey& key : keys) ra->Forgo(key);
        }
        continue;
      }
    }
    // A fill kept for other streams is made in the window's buffer, which
    // no client can write, and copied here by EndItem.
    uint8_t* const* target = t.share.claimed() ? t.share.targets() : out.data();
    // Counted per item when the item may run again (read ahead) or its
    // counts go with its fill (shared); else straight into the stream's.
    WorkloadCounters counted;
    const bool per_item = ra != nullptr || t.share.claimed();
    absl::Status st;
    if (ra == nullptr) {
      FillContext ctx(item, per_item ? &counted : &s.counters, s.source.get());
      st = s.workload->FillItem(ctx, target);
    } else {
      // Counted only once the item is done: an item put back runs again.
      FillContext ctx(item, &counted, s.source.get(), t.item.get());
      t.item->BeginAttempt();
      keys.clear();
      if (item.valid && schedule.ExamplesOfItem(*items, e, &keys)) {
        // Read (or found read ahead) here; pending: the chunk waits
        // without entering the workload.
        t.item->ReadInto(keys, &buffers, &ctx);
      }
      if (!t.item->pending()) st = s.workload->FillItem(ctx, target);
      for (size_t k = 0; k < keys.size(); ++k) ctx.ReturnBuffer(k, &buffers[k]);
      counted.reader_reads.fetch_add(ctx.reader_reads(),
                                     std::memory_order_relaxed);
      if (t.item->pending()) {
        t.next_item = e;
        return true;
      }
      readahead_->FinishItem(t.item.get());
    }
    if (per_item) {
      // Added only when not 0: the stream's counters are shared by every
      // worker, and most items count nothing.
      for (auto [to, from] :
           {std::pair{&s.counters.decode_errors, &counted.decode_errors},
            std::pair{&s.counters.skipped_examples, &counted.skipped_examples},
            std::pair{&s.counters.reader_reads, &counted.reader_reads}}) {
        const uint64_t n = from->load(std::memory_order_relaxed);
        if (n != 0) to->fetch_add(n, std::memory_order_relaxed);
      }
    }
    if (share != nullptr) share->EndItem(&t.share, st, out.data(), counted);
    if (!st.ok()) {
      *status = absl::Status(
          st.code(), absl::StrCat(st.message(), " (stream ", s.name,
                                  ", item ", item.id, ", epoch ", item.epoch,
                                  ", position ", item.position, ")"));
      return false;
    }
  }
  return false;
}

void Engine::Park(Task* task) {
  RankProducer& p = *task->producer;
  if (!State(p).retired && !p.failed.load(std::memory_order_relaxed)) {
    for (RankProducer::Job& job : State(p).inflight) {
      if (job.step == task->step) {
        job.parked.push_back({task->chunk, task->next_item,
                              std::move(task->item), std::move(task->share)});
        return;
      }
    }
  }
  // Its rank went or failed meanwhile: nothing waits for the chunk (and a
  // fill it claimed is given up with the task).
  if (readahead_ != nullptr && task->item != nullptr) {
    readahead_->FinishItem(task->item.get());
  }
}

void Engine::Finish(const Task& t, absl::Status status) {
  RankProducer& p = *t.producer;
  for (RankProducer::Job& job : State(p).inflight) {
    if (job.step == t.step) {
      ++job.done_chunks;
      if (!status.ok() && job.status.ok()) job.status = status;
      break;
    }
  }
  // Publish, in order, every finished batch at the front.
  while (!State(p).inflight.empty() &&
         State(p).inflight.front().done_chunks == State(p).inflight.front().chunks) {
    RankProducer::Job& job = State(p).inflight.front();
    if (!job.status.ok()) {
      // A batch that could not be made ends this rank's ring rather than
      // publishing garbage; the client sees the stream closed, and why.
      Fail(p, job.step, job.status);
      return;
    }
    if (!State(p).retired) p.ring_->Publish(job.pos);
    p.published_steps.fetch_add(1, std::memory_order_relaxed);
    p.examples.fetch_add(p.stream_->layout.per_rank_batch,
                         std::memory_order_relaxed);
    p.bytes.fetch_add(p.stream_->layout.payload_bytes,
                      std::memory_order_relaxed);
    State(p).inflight.pop_front();
  }
}

void Engine::Fail(RankProducer& p, uint64_t step, const absl::Status& why) {
  p.failed.store(true, std::memory_order_relaxed);
  Log(LogLevel::kError, "batch_failed",
      {{"stream", p.stream_->name},
       {"rank", std::to_string(p.rank_)},
       {"step", std::to_string(step)},
       {"msg", std::string(why.message())}});
  p.ring_->Close(absl::StrCat("step ", step, " failed: ", why.message()));
  DropParked(p);
  State(p).inflight.clear();
}

void Engine::WorkerLoop() {
  pthread_setname_np(pthread_self(), "batchd-worker");
  // Read buffers, kept across tasks (a 2.3 MB volume slice read into a
  // buffer of its size neither allocates nor zeroes pages).
  std::vector<std::string> buffers;
  mu_.Lock();
  while (!stop_) {
    Task task;
    bool ring_full = false;
    if (!FindTask(&task, &ring_full)) {
      // Clients free slots without telling us (no lock or doorbell in shared
      // memory), so full rings are polled, by one worker at a time; the
      // others sleep until new work arrives. A poll that finds nothing
      // doubles the next sleep (up to kMaxPoll), so that thousands of idle
      // full rings cost next to nothing while a consumer that is reading
      // sees its slots refilled within a poll of kMinPoll.
      if (ring_full && !poller_active_) {
        poller_active_ = true;
        cv_.WaitWithTimeout(&mu_, absl::FromChrono(poll_interval_));
        poll_interval_ = std::min(poll_interval_ * 2, kMaxPoll);
        poller_active_ = false;
      } else {
        cv_.WaitWithTimeout(&mu_, absl::Milliseconds(100));
      }
      continue;
    }
    poll_interval_ = kMinPoll;
    // More work may be there for another worker.
    cv_.Signal();
    mu_.Unlock();
    absl::Status status;
    const bool parked = RunTask(&task, &status, &buffers);
    mu_.Lock();
    if (parked) {
      Park(&task);
    } else {
      Finish(task, std::move(status));
    }
    // The task may hold the last reference to its rank and stream (both
    // closed meanwhile): they go without the engine's lock.
    std::shared_ptr<RankProducer> producer = std::move(task.producer);
    mu_.Unlock();
    producer.reset();
    mu_.Lock();
  }
  --live_workers_;
  mu_.Unlock();
}

}  // namespace batchd

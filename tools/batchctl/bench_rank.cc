// batchctl bench's consumer process: one rank, the real batchd::Loader.
#include <unistd.h>

#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/clock.h"
#include "base/process.h"
#include "tools/batchctl/bench.h"

namespace batchd::batchctl {

uint64_t TouchTensor(const Tensor& t, Touch touch) {
  const uint8_t* p = static_cast<const uint8_t*>(t.data);
  const size_t n = t.nbytes;
  if (n == 0) return 0;
  uint64_t sum = 0;
  if (touch == Touch::kPage) {
    for (size_t i = 0; i < n; i += 4096) sum += p[i];
    return sum + p[n - 1];
  }
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    memcpy(&w, p + i, 8);
    sum += w;
  }
  for (; i < n; ++i) sum += p[i];
  return sum;
}

void RunRank(const BenchConfig& cfg, uint32_t rank, int out_fd, int go_fd) {
  RankMessage msg;
  msg.rank = rank;
  auto fail = [&](const std::string& what) {
    msg.kind = RankMessage::kError;
    snprintf(msg.error, sizeof(msg.error), "rank %u: %s", rank, what.c_str());
    WriteAll(out_fd, &msg, sizeof(msg));
    _exit(1);
  };
  LoaderOptions o = cfg.loader;
  o.rank = int(rank);
  o.timeout_seconds = cfg.timeout;
  o.connect_timeout_seconds = cfg.timeout;
  absl::StatusOr<std::unique_ptr<Loader>> opened = Loader::Open(o);
  if (!opened.ok()) fail(opened.status().ToString());
  Loader& loader = **opened;
  msg.slots = loader.info().slots;
  msg.slot_bytes = loader.info().slot_bytes;

  uint64_t expected_step = loader.info().start_step;
  uint64_t checksum = 0;
  // Takes up to `n` batches; counts them into msg when `timed`. False when
  // the stream ended first.
  auto take = [&](uint64_t n, bool timed) {
    for (uint64_t k = 0; k < n; ++k) {
      absl::StatusOr<Batch> b = loader.Next();
      if (absl::IsOutOfRange(b.status())) return false;
      if (!b.ok()) fail(b.status().ToString());
      if (b->step() != expected_step) {
        fail(absl::StrCat("expected step ", expected_step, ", got step ",
                          b->step()));
      }
      ++expected_step;
      uint64_t bytes = 0;
      for (const Tensor& t : b->tensors()) {
        checksum += TouchTensor(t, cfg.touch);
        bytes += t.nbytes;
      }
      if (timed) {
        const std::vector<Tensor>& ts = b->tensors();
        const uint64_t rows =
            !ts.empty() && !ts[0].shape.empty() ? uint64_t(ts[0].shape[0]) : 0;
        msg.examples += b->valid_count() != 0 ? b->valid_count() : rows;
        msg.bytes += bytes;
        ++msg.steps;
      }
    }
    return true;
  };

  // An evaluation stream is one pass: time all of it unless told otherwise.
  const bool train = cfg.loader.split == "train";
  const uint64_t default_warmup = train ? 2 * uint64_t(msg.slots) : 0;
  const uint64_t warmup =
      cfg.warmup_steps >= 0 ? uint64_t(cfg.warmup_steps) : default_warmup;
  bool more = take(warmup, false);
  msg.kind = RankMessage::kReady;
  if (!WriteAll(out_fd, &msg, sizeof(msg))) _exit(1);
  char go;
  if (!ReadAll(go_fd, &go, 1)) _exit(1);  // the parent gave up
  // The ring filled while this rank waited for the others.
  if (more && train) more = take(msg.slots, false);
  msg.start_ns = MonotonicNanos();
  const double wait0 = loader.wait_seconds();
  if (more) more = take(cfg.steps, true);
  msg.end_ns = MonotonicNanos();
  msg.wait_seconds = loader.wait_seconds() - wait0;
  msg.ended = more ? 0 : 1;
  msg.checksum = checksum;
  msg.kind = RankMessage::kReport;
  WriteAll(out_fd, &msg, sizeof(msg));
  opened->reset();  // joins the heartbeat thread, unmaps the ring
  _exit(0);
}

}  // namespace batchd::batchctl

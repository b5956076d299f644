// ring_bench: how close one rank's shared-memory ring comes to the machine's
// memcpy, and how long a consumer takes to see a published batch.
//
// In one run it measures
//   1. memcpy bandwidth for buffers of 1 MiB, 128x224x224x3 bytes (one
//      ImageNet batch of 128, ~19 MB) and 64 MiB;
//   2. ring delivery for the same slot sizes: this process is the producer
//      (a real RingWriter; one memcpy from a source buffer into each slot,
//      the one copy the design allows), a forked child is the consumer (a
//      real RingReader on its own mapping) that acquires, touches and
//      releases each slot. Bandwidth counts payload bytes from the first
//      timed claim until the consumer has released the last slot;
//   3. publish-to-Acquire latency on a nearly empty ring: the producer stamps
//      MonotonicNanos into the slot just before Publish and then sleeps, so
//      the consumer is parked in its futex wait and the figure is a wake-up.
//
// The design's targets (docs/design.md, "Performance targets"): ring bandwidth
// >= 0.8x memcpy, a published batch is read in < 50 us.
#include <sched.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/clock.h"
#include "base/process.h"
#include "ring/ring.h"
#include "ring/shm_layout.h"

namespace batchd {
namespace {

constexpr uint64_t kPage = 4096;

struct Flags {
  uint32_t slots = 4;
  double seconds = 0.5;  // per ring measurement
  uint32_t latency_samples = 2000;
  uint32_t latency_gap_us = 200;  // producer sleep between publishes
  bool json = false;
};

constexpr char kUsage[] = R"(usage: ring_bench [--slots K] [--seconds S]
                  [--latency-samples N] [--latency-gap-us U] [--json]

Measures, in one run, memcpy bandwidth (1 MiB, 128x224x224x3 B, 64 MiB),
the bandwidth of one rank's shared-memory ring between a producer process
(RingWriter, one memcpy per slot) and a consumer process (RingReader) for
the same slot sizes, and the publish-to-Acquire wake-up latency.

  --slots K            ring slots (default 4)
  --seconds S          target length of each ring measurement (default 0.5)
  --latency-samples N  batches in the latency measurement (default 2000)
  --latency-gap-us U   producer pause between those batches (default 200)
  --json               print one JSON object instead of tables

Exit status: 0 ok, 1 a measurement failed, 2 usage error.
)";

// Consumer's treatment of each acquired slot.
enum class Touch {
  kPage,  // read one word per 4 KiB page: the pages are mapped and delivered
  kAll,   // read every word: what a host-to-device copy costs the consumer
};

const char* TouchName(Touch t) { return t == Touch::kPage ? "page" : "all"; }

struct MemcpyResult {
  uint64_t bytes = 0;
  uint32_t destinations = 1;
  double gb_per_s = 0;
};

struct RingResult {
  uint64_t slot_payload_bytes = 0;
  Touch touch = Touch::kPage;
  uint64_t batches = 0;
  double seconds = 0;
  double gb_per_s = 0;
  double ratio_to_memcpy = 0;           // to memcpy of one buffer
  double ratio_to_memcpy_rotating = 0;  // to memcpy over `slots` buffers
  double producer_wait_fraction = 0;    // time the ring was full
};

struct LatencyResult {
  uint64_t samples = 0;
  double median_us = 0, p99_us = 0, max_us = 0, min_us = 0;
};

// Keeps the compiler from dropping reads whose results are never used.
volatile uint64_t g_sink;

// Faults in every page of a buffer so that the first timed pass measures
// copying, not page faults.
void Prefault(uint8_t* p, uint64_t n) {
  for (uint64_t i = 0; i < n; i += kPage) p[i] = uint8_t(i);
}

uint64_t TouchPages(const uint8_t* p, uint64_t n) {
  uint64_t sum = 0;
  for (uint64_t i = 0; i < n; i += kPage) sum += p[i];
  return sum;
}

uint64_t TouchAll(const uint8_t* p, uint64_t n) {
  const uint64_t* w = reinterpret_cast<const uint64_t*>(p);
  uint64_t a = 0, b = 0, c = 0, d = 0;
  uint64_t i = 0;
  for (; i + 4 <= n / 8; i += 4) {
    a += w[i];
    b += w[i + 1];
    c += w[i + 2];
    d += w[i + 3];
  }
  for (; i < n / 8; ++i) a += w[i];
  return a + b + c + d;
}

// Bandwidth of memcpy(dst, src, bytes): the best of several timed rounds,
// each long enough (~50 ms) to dwarf the clock. With `destinations` > 1 the
// copies rotate over that many destination buffers, as a producer rotates
// over ring slots, so the working set matches the ring's.
MemcpyResult MeasureMemcpy(uint64_t bytes, uint32_t destinations) {
  std::unique_ptr<uint8_t[]> src(new uint8_t[bytes]);
  std::vector<std::unique_ptr<uint8_t[]>> dst;
  Prefault(src.get(), bytes);
  for (uint32_t d = 0; d < destinations; ++d) {
    dst.emplace_back(new uint8_t[bytes]);
    Prefault(dst.back().get(), bytes);
    memcpy(dst.back().get(), src.get(), bytes);
  }
  const uint64_t per_round = std::max<uint64_t>(
      destinations, (uint64_t(1) << 29) / bytes);  // ~512 MiB
  double best = 0;
  for (int round = 0; round < 5; ++round) {
    const uint64_t t0 = MonotonicNanos();
    for (uint64_t k = 0; k < per_round; ++k) {
      uint8_t* to = dst[k % destinations].get();
      memcpy(to, src.get(), bytes);
      // An empty asm with a memory clobber keeps each copy observable.
      asm volatile("" : : "r"(to) : "memory");
    }
    const uint64_t ns = MonotonicNanos() - t0;
    best = std::max(best, double(bytes) * double(per_round) / double(ns));
  }
  g_sink = dst[0][bytes / 2];
  return {bytes, destinations, best};  // bytes per ns == GB/s
}

// A unique segment name for this process.
std::string SegmentName(const std::string& what) {
  return absl::StrCat("/batchd.", getuid(), ".ring_bench-", getpid(), "-", what,
                      ".0");
}

// What a consumer child writes back through its pipe.
struct ConsumerReport {
  int32_t ok = 0;
  char error[200] = {0};
  uint64_t batches = 0;
  uint64_t checksum = 0;
  uint64_t latency_count = 0;
  double median_us = 0, p99_us = 0, max_us = 0, min_us = 0;
};


// The consumer process: attaches to `segment` and drains it until the ring
// ends. With `latency` it reads the producer's stamp at the start of each
// payload right after Acquire returns; otherwise it touches the payload.
[[noreturn]] void RunConsumer(int fd, const std::string& segment,
                              uint64_t payload_bytes, Touch touch,
                              bool latency) {
  ConsumerReport report;
  auto fail = [&](const absl::Status& s) {
    report.ok = 0;
    snprintf(report.error, sizeof(report.error), "%s", s.ToString().c_str());
    WriteAll(fd, &report, sizeof(report));
    _exit(1);
  };
  absl::StatusOr<std::unique_ptr<RingReader>> reader =
      RingReader::Attach(segment);
  if (!reader.ok()) fail(reader.status());
  std::vector<uint64_t> latencies;
  if (latency) latencies.reserve(1 << 16);
  uint64_t checksum = 0;
  for (;;) {
    absl::StatusOr<uint64_t> pos = (*reader)->Acquire(30.0);
    if (latency && pos.ok()) {
      const uint64_t now = MonotonicNanos();
      uint64_t stamp;
      memcpy(&stamp, (*reader)->SlotBase(*pos) + shm::kSlotHeaderBytes,
             sizeof(stamp));
      latencies.push_back(now - stamp);
    }
    if (absl::IsOutOfRange(pos.status())) break;
    if (!pos.ok()) fail(pos.status());
    const uint8_t* payload = (*reader)->SlotBase(*pos) + shm::kSlotHeaderBytes;
    if (!latency) {
      checksum += touch == Touch::kPage ? TouchPages(payload, payload_bytes)
                                        : TouchAll(payload, payload_bytes);
    }
    (*reader)->Release(*pos);
    ++report.batches;
  }
  if (!latencies.empty()) {
    std::sort(latencies.begin(), latencies.end());
    const size_t n = latencies.size();
    report.latency_count = n;
    report.min_us = double(latencies.front()) / 1e3;
    report.median_us = double(latencies[n / 2]) / 1e3;
    report.p99_us = double(latencies[std::min(n - 1, n * 99 / 100)]) / 1e3;
    report.max_us = double(latencies.back()) / 1e3;
  }
  report.ok = 1;
  report.checksum = checksum;
  WriteAll(fd, &report, sizeof(report));
  _exit(0);
}

// A ring and its consumer process; the destructor reaps the child and
// removes the segment.
class Session {
 public:
  static absl::StatusOr<std::unique_ptr<Session>> Start(const std::string& what,
                                                        uint32_t slots,
                                                        uint64_t payload_bytes,
                                                        Touch touch,
                                                        bool latency) {
    const std::string name = SegmentName(what);
    RingGeometry g;
    g.slot_count = slots;
    g.payload_bytes = payload_bytes;
    g.stream_name = "ring_bench";
    absl::StatusOr<std::unique_ptr<RingWriter>> writer =
        RingWriter::Create(name, g);
    if (!writer.ok()) return writer.status();
    int fds[2];
    if (pipe(fds) != 0) {
      return absl::InternalError(absl::StrCat("pipe: ", strerror(errno)));
    }
    fflush(nullptr);
    const pid_t pid = fork();
    if (pid < 0) {
      close(fds[0]);
      close(fds[1]);
      return absl::InternalError(absl::StrCat("fork: ", strerror(errno)));
    }
    if (pid == 0) {
      close(fds[0]);
      RunConsumer(fds[1], name, payload_bytes, touch, latency);
    }
    close(fds[1]);
    auto s =
        std::unique_ptr<Session>(new Session(std::move(*writer), pid, fds[0]));
    // The consumer stamps its pid once attached; start only then.
    const uint64_t t0 = MonotonicNanos();
    while (s->writer_->client().pid == 0) {
      if (MonotonicNanos() - t0 > 10'000'000'000ULL) {
        return absl::DeadlineExceededError("consumer did not attach in 10 s");
      }
      if (waitpid(pid, nullptr, WNOHANG) == pid) {
        s->pid_ = -1;
        ConsumerReport r;
        if (ReadAll(s->fd_, &r, sizeof(r)) && !r.ok) {
          return absl::InternalError(absl::StrCat("consumer: ", r.error));
        }
        return absl::InternalError("consumer exited before attaching");
      }
      usleep(1000);
    }
    return s;
  }

  ~Session() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    close(fd_);
  }

  RingWriter& writer() { return *writer_; }

  // Claims the next slot, waiting while the ring is full; adds the time
  // spent waiting to *wait_ns.
  uint64_t Claim(uint64_t* wait_ns) {
    uint64_t pos;
    if (writer_->TryClaim(&pos)) return pos;
    const uint64_t t0 = MonotonicNanos();
    // Polls, as the server's pool does: a release rings no doorbell.
    for (int polls = 0; !writer_->TryClaim(&pos); ++polls) PollPause(polls);
    *wait_ns += MonotonicNanos() - t0;
    return pos;
  }

  // Between two polls of a full ring: yields first (a slot is usually
  // released within microseconds), then sleeps, beating meanwhile.
  void PollPause(int polls) {
    if (polls < 1000) {
      sched_yield();
      return;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
    writer_->Heartbeat(MonotonicNanos());
  }

  // Waits until the consumer has released every published slot.
  void Drain() {
    for (int polls = 0; writer_->released() < writer_->published(); ++polls) {
      PollPause(polls);
    }
  }

  // Ends the ring and collects the consumer's report.
  absl::StatusOr<ConsumerReport> Finish() {
    writer_->SetState(shm::kStateEnded);
    ConsumerReport r;
    const bool got = ReadAll(fd_, &r, sizeof(r));
    int wstatus = 0;
    waitpid(pid_, &wstatus, 0);
    pid_ = -1;
    if (!got) return absl::InternalError("consumer died without a report");
    if (!r.ok) return absl::InternalError(absl::StrCat("consumer: ", r.error));
    return r;
  }

 private:
  Session(std::unique_ptr<RingWriter> writer, pid_t pid, int fd)
      : writer_(std::move(writer)), pid_(pid), fd_(fd) {}

  std::unique_ptr<RingWriter> writer_;
  pid_t pid_;
  int fd_;
};

absl::StatusOr<RingResult> MeasureRing(const Flags& flags, uint64_t bytes,
                                       Touch touch, const MemcpyResult& single,
                                       const MemcpyResult& rotating) {
  absl::StatusOr<std::unique_ptr<Session>> session = Session::Start(
      absl::StrCat("bw", bytes, TouchName(touch)), flags.slots, bytes, touch,
      /*latency=*/false);
  if (!session.ok()) return session.status();
  Session& s = **session;
  RingWriter& w = s.writer();
  std::unique_ptr<uint8_t[]> src(new uint8_t[bytes]);
  for (uint64_t i = 0; i < bytes; ++i) src[i] = uint8_t(i * 131 + 7);

  auto produce = [&](uint64_t count, uint64_t* wait_ns) {
    uint64_t last_beat = 0;
    for (uint64_t k = 0; k < count; ++k) {
      const uint64_t pos = s.Claim(wait_ns);
      uint8_t* slot = w.SlotBase(pos);
      memcpy(slot + shm::kSlotHeaderBytes, src.get(), bytes);
      shm::SlotHeader* h = w.Slot(pos);
      h->sequence = pos;
      h->step = pos;
      h->payload_bytes = bytes;
      w.Publish(pos);
      const uint64_t now = MonotonicNanos();
      if (now - last_beat > 50'000'000) {
        w.Heartbeat(now);
        last_beat = now;
      }
    }
  };

  // Warm-up: two passes over every slot fault in both mappings.
  uint64_t ignored = 0;
  produce(2 * flags.slots, &ignored);
  s.Drain();

  // Aim at flags.seconds given the memcpy rate; at least 4 passes over the
  // ring.
  const double target_bytes = flags.seconds * single.gb_per_s * 1e9;
  const uint64_t count = std::max<uint64_t>(
      4 * flags.slots, uint64_t(target_bytes / double(bytes)));
  uint64_t wait_ns = 0;
  const uint64_t t0 = MonotonicNanos();
  produce(count, &wait_ns);
  s.Drain();
  const uint64_t ns = MonotonicNanos() - t0;

  absl::StatusOr<ConsumerReport> report = s.Finish();
  if (!report.ok()) return report.status();
  if (report->batches != count + 2 * flags.slots) {
    return absl::InternalError(absl::StrCat("consumer saw ", report->batches,
                                            " batches, expected ",
                                            count + 2 * flags.slots));
  }
  RingResult r;
  r.slot_payload_bytes = bytes;
  r.touch = touch;
  r.batches = count;
  r.seconds = double(ns) / 1e9;
  r.gb_per_s = double(bytes) * double(count) / double(ns);
  r.ratio_to_memcpy = r.gb_per_s / single.gb_per_s;
  r.ratio_to_memcpy_rotating = r.gb_per_s / rotating.gb_per_s;
  r.producer_wait_fraction = double(wait_ns) / double(ns);
  return r;
}

absl::StatusOr<LatencyResult> MeasureLatency(const Flags& flags) {
  constexpr uint64_t kBytes = 4096;
  absl::StatusOr<std::unique_ptr<Session>> session = Session::Start(
      "latency", flags.slots, kBytes, Touch::kPage, /*latency=*/true);
  if (!session.ok()) return session.status();
  Session& s = **session;
  RingWriter& w = s.writer();
  const timespec gap = {0, long(flags.latency_gap_us) * 1000};
  uint64_t ignored = 0;
  for (uint32_t k = 0; k < flags.latency_samples; ++k) {
    const uint64_t pos = s.Claim(&ignored);
    shm::SlotHeader* h = w.Slot(pos);
    h->sequence = pos;
    h->step = pos;
    h->payload_bytes = kBytes;
    w.Heartbeat(MonotonicNanos());
    const uint64_t stamp = MonotonicNanos();
    memcpy(w.SlotBase(pos) + shm::kSlotHeaderBytes, &stamp, sizeof(stamp));
    w.Publish(pos);
    nanosleep(&gap, nullptr);
  }
  s.Drain();
  absl::StatusOr<ConsumerReport> report = s.Finish();
  if (!report.ok()) return report.status();
  LatencyResult r;
  r.samples = report->latency_count;
  r.median_us = report->median_us;
  r.p99_us = report->p99_us;
  r.max_us = report->max_us;
  r.min_us = report->min_us;
  return r;
}

std::string SizeLabel(uint64_t bytes) {
  if (bytes % (1 << 20) == 0) return absl::StrCat(bytes >> 20, " MiB");
  return absl::StrFormat("%.1f MiB", double(bytes) / double(1 << 20));
}

bool ParseFlags(int argc, char** argv, Flags* flags, std::string* error) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    std::string value;
    bool has_value = false;
    if (const size_t eq = a.find('=');
        a.rfind("--", 0) == 0 && eq != std::string::npos) {
      value = a.substr(eq + 1);
      a = a.substr(0, eq);
      has_value = true;
    }
    auto next = [&]() -> bool {
      if (has_value) return true;
      if (i + 1 >= argc) {
        *error = absl::StrCat(a, " needs a value");
        return false;
      }
      value = argv[++i];
      return true;
    };
    auto bad = [&]() {
      *error = absl::StrCat("bad value for ", a, ": '", value, "'");
      return false;
    };
    if (a == "--json") {
      flags->json = true;
    } else if (a == "--slots") {
      if (!next()) return false;
      if (!absl::SimpleAtoi(value, &flags->slots) || flags->slots == 0) {
        return bad();
      }
    } else if (a == "--seconds") {
      if (!next()) return false;
      if (!absl::SimpleAtod(value, &flags->seconds) || flags->seconds <= 0) {
        return bad();
      }
    } else if (a == "--latency-samples") {
      if (!next()) return false;
      if (!absl::SimpleAtoi(value, &flags->latency_samples) ||
          flags->latency_samples == 0) {
        return bad();
      }
    } else if (a == "--latency-gap-us") {
      if (!next()) return false;
      if (!absl::SimpleAtoi(value, &flags->latency_gap_us)) return bad();
    } else {
      *error = absl::StrCat("unknown argument '", argv[i], "'");
      return false;
    }
  }
  return true;
}

int Main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      fputs(kUsage, stdout);
      return 0;
    }
  }
  Flags flags;
  std::string error;
  if (!ParseFlags(argc, argv, &flags, &error)) {
    fprintf(stderr, "ring_bench: %s\n\n%s", error.c_str(), kUsage);
    return 2;
  }
  const std::vector<uint64_t> sizes = {
      uint64_t(1) << 20, uint64_t(128) * 224 * 224 * 3, uint64_t(64) << 20};
  std::vector<MemcpyResult> copies, rotating;
  for (uint64_t b : sizes) {
    copies.push_back(MeasureMemcpy(b, 1));
    // Rotate over as many buffers as the ring has slots, within 2 GiB.
    const uint64_t most = std::max<uint64_t>(1, (uint64_t(2) << 30) / b);
    rotating.push_back(
        MeasureMemcpy(b, uint32_t(std::min<uint64_t>(flags.slots, most))));
  }

  std::vector<RingResult> rings;
  for (size_t i = 0; i < sizes.size(); ++i) {
    for (Touch t : {Touch::kPage, Touch::kAll}) {
      absl::StatusOr<RingResult> r =
          MeasureRing(flags, sizes[i], t, copies[i], rotating[i]);
      if (!r.ok()) {
        fprintf(stderr, "ring_bench: ring of %s slots: %s\n",
                SizeLabel(sizes[i]).c_str(), r.status().ToString().c_str());
        return 1;
      }
      rings.push_back(*r);
    }
  }
  absl::StatusOr<LatencyResult> lat = MeasureLatency(flags);
  if (!lat.ok()) {
    fprintf(stderr, "ring_bench: latency: %s\n",
            lat.status().ToString().c_str());
    return 1;
  }

  if (flags.json) {
    std::string out = "{\"memcpy\":[";
    for (size_t i = 0; i < copies.size(); ++i) {
      absl::StrAppendFormat(&out,
                            "%s{\"bytes\":%u,\"gb_per_s\":%.3f,"
                            "\"rotating_destinations\":%u,"
                            "\"rotating_gb_per_s\":%.3f}",
                            i ? "," : "", copies[i].bytes, copies[i].gb_per_s,
                            rotating[i].destinations, rotating[i].gb_per_s);
    }
    absl::StrAppendFormat(&out, "],\"ring\":{\"slots\":%u,\"results\":[",
                          flags.slots);
    for (size_t i = 0; i < rings.size(); ++i) {
      const RingResult& r = rings[i];
      absl::StrAppendFormat(
          &out,
          "%s{\"slot_payload_bytes\":%u,\"touch\":\"%s\",\"batches\":%u,"
          "\"seconds\":%.4f,\"gb_per_s\":%.3f,\"ratio_to_memcpy\":%.3f,"
          "\"ratio_to_memcpy_rotating\":%.3f,"
          "\"producer_wait_fraction\":%.3f}",
          i ? "," : "", r.slot_payload_bytes, TouchName(r.touch), r.batches,
          r.seconds, r.gb_per_s, r.ratio_to_memcpy, r.ratio_to_memcpy_rotating,
          r.producer_wait_fraction);
    }
    absl::StrAppendFormat(
        &out,
        "]},\"latency\":{\"samples\":%u,\"gap_us\":%u,\"min_us\":%.2f,"
        "\"median_us\":%.2f,\"p99_us\":%.2f,\"max_us\":%.2f}}\n",
        lat->samples, flags.latency_gap_us, lat->min_us, lat->median_us,
        lat->p99_us, lat->max_us);
    fputs(out.c_str(), stdout);
    return 0;
  }

  printf("memcpy, one thread, best of 5 rounds\n");
  printf("  %-10s %10s %18s\n", "buffer", "GB/s", "GB/s, rotating");
  for (size_t i = 0; i < copies.size(); ++i) {
    printf("  %-10s %10.2f %9.2f (%u dst)\n",
           SizeLabel(copies[i].bytes).c_str(), copies[i].gb_per_s,
           rotating[i].gb_per_s, rotating[i].destinations);
  }
  printf(
      "\nring: producer process (memcpy into the slot) -> consumer process, "
      "%u slots\n",
      flags.slots);
  printf("  %-10s %-6s %8s %8s %9s %9s %12s %10s\n", "slot", "touch", "batches",
         "seconds", "GB/s", "x memcpy", "x rotating", "ring full");
  for (const RingResult& r : rings) {
    printf("  %-10s %-6s %8llu %8.3f %9.2f %9.2f %12.2f %9.0f%%\n",
           SizeLabel(r.slot_payload_bytes).c_str(), TouchName(r.touch),
           static_cast<unsigned long long>(r.batches), r.seconds, r.gb_per_s,
           r.ratio_to_memcpy, r.ratio_to_memcpy_rotating,
           100 * r.producer_wait_fraction);
  }
  printf(
      "\npublish -> Acquire latency (%llu batches, %u us apart)\n"
      "  min %.1f us   median %.1f us   p99 %.1f us   max %.1f us\n",
      static_cast<unsigned long long>(lat->samples), flags.latency_gap_us,
      lat->min_us, lat->median_us, lat->p99_us, lat->max_us);
  return 0;
}

}  // namespace
}  // namespace batchd

int main(int argc, char** argv) { return batchd::Main(argc, argv); }

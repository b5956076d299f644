// The suites' shared fixtures; see testutil.h.
#include "tests/testutil.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/work_context.h"
#include "gtest/gtest.h"
#include "ring/ring.h"
#include "server/engine.h"
#include "workloads/common/tf_example.h"
#include "workloads/common/tfrecord.h"

namespace batchd {
namespace testutil {

std::string MakeTempDir(absl::string_view tag) {
  std::string tmpl = absl::StrCat("/tmp/batchd-", tag, "-XXXXXX");
  if (mkdtemp(tmpl.data()) == nullptr) {
    ADD_FAILURE() << "mkdtemp " << tmpl << ": " << strerror(errno)
                  << " (is /tmp writable and not full?)";
    return tmpl;
  }
  char resolved[PATH_MAX];
  return realpath(tmpl.c_str(), resolved) == nullptr ? tmpl : resolved;
}

void RemoveTree(const std::string& path) {
  std::error_code ec;
  std::filesystem::remove_all(path, ec);
  EXPECT_FALSE(ec) << "removing " << path << ": " << ec.message();
}

std::string TempDir::Path(absl::string_view rel) const {
  return absl::StrCat(path_, "/", rel);
}

void WriteFile(const std::string& path, absl::string_view data) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(data.data(), std::streamsize(data.size()));
  out.close();
  EXPECT_TRUE(out) << "cannot write " << data.size() << " bytes to " << path;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string ReadLine(int fd, int timeout_ms) {
  std::string line;
  char c;
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, timeout_ms) <= 0 || read(fd, &c, 1) != 1) return line;
    if (c == '\n') return line;
    line += c;
  }
}

std::string RunInChild(const std::function<std::string()>& fn, int* status) {
  int pipefd[2];
  if (pipe(pipefd) != 0) return "pipe failed";
  const pid_t child = fork();
  if (child < 0) {
    close(pipefd[0]);
    close(pipefd[1]);
    return "fork failed";
  }
  if (child == 0) {
    close(pipefd[0]);
    const std::string report = fn();
    (void)!write(pipefd[1], report.data(), report.size());
    _exit(0);
  }
  close(pipefd[1]);
  std::string report;
  char buf[512];
  for (ssize_t n; (n = read(pipefd[0], buf, sizeof(buf))) > 0;) {
    report.append(buf, size_t(n));
  }
  close(pipefd[0]);
  int got = -1;  // not an exit: waitpid failed
  if (waitpid(child, &got, 0) != child) got = -1;
  if (status != nullptr) *status = got;
  return report;
}

std::shared_ptr<Cancellation> GoneAfter(int polls) {
  auto asked = std::make_shared<std::atomic<int>>(0);
  return std::make_shared<Cancellation>(
      [asked, polls] { return ++*asked > polls; }, /*deadline_ns=*/0,
      /*poll_ns=*/0);
}

bool WaitFor(const std::function<bool()>& cond, double seconds, int poll_ms) {
  const auto end = std::chrono::steady_clock::now() +
                   std::chrono::milliseconds(int64_t(seconds * 1000));
  while (std::chrono::steady_clock::now() < end) {
    if (cond()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(poll_ms));
  }
  return cond();
}

std::string ImageExample(absl::string_view image, int64_t label,
                         absl::string_view file_name) {
  ExampleFeatures f;
  f.bytes["image"] = {std::string(image)};
  f.int64s["label"] = {label};
  if (!file_name.empty()) f.bytes["file_name"] = {std::string(file_name)};
  return SerializeExample(f);
}

std::vector<std::string> WriteTfdsShards(
    const std::string& dir, absl::string_view dataset, absl::string_view split,
    const std::vector<std::vector<std::string>>& shards) {
  std::vector<std::string> paths;
  for (size_t s = 0; s < shards.size(); ++s) {
    paths.push_back(absl::StrFormat("%s/%s-%s.tfrecord-%05d-of-%05d", dir,
                                    dataset, split, s, shards.size()));
    const absl::Status st = WriteTFRecordFile(paths.back(), shards[s]);
    EXPECT_TRUE(st.ok()) << paths.back() << ": " << st;
  }
  return paths;
}

RowBuffers::RowBuffers(const std::vector<TensorLayout>& tensors) {
  for (const TensorLayout& t : tensors) {
    buffers_.emplace_back(t.ExampleBytes());
  }
  for (std::vector<uint8_t>& b : buffers_) pointers_.push_back(b.data());
}

ServedRanks::ServedRanks(std::shared_ptr<StreamSetup> stream, uint32_t world,
                         uint64_t start, uint32_t slots)
    : stream_(std::move(stream)), world_(world) {
  static std::atomic<int> rings{0};
  for (uint32_t r = 0; r < world; ++r) {
    RingGeometry geo;
    geo.slot_count = slots;
    geo.payload_bytes = stream_->layout.payload_bytes;
    geo.rank = r;
    const std::string name = absl::StrCat("/bdtest", getpid(), ".", rings++);
    absl::StatusOr<std::unique_ptr<RingWriter>> ring =
        RingWriter::Create(name, geo);
    EXPECT_TRUE(ring.ok()) << name << ": " << ring.status();
    if (!ring.ok()) return;
    absl::StatusOr<std::unique_ptr<RingReader>> reader =
        RingReader::Attach(name);
    EXPECT_TRUE(reader.ok()) << name << ": " << reader.status();
    if (!reader.ok()) return;
    readers_.push_back(*std::move(reader));
    producers_.push_back(std::make_shared<RankProducer>(
        stream_, r, start, *std::move(ring), SharedSchedule(stream_)));
  }
}

ServedRanks::~ServedRanks() = default;

void ServedRanks::AddTo(Engine& engine) {
  engine_ = &engine;
  for (const auto& p : producers_) engine.Add(p);
}

void ServedRanks::Retire() {
  for (const auto& p : producers_) {
    if (engine_ != nullptr) engine_->Retire(p);
    p->ring().Unlink();
  }
  engine_ = nullptr;
}

absl::StatusOr<RankBatch> ServedRanks::Next(uint32_t rank,
                                            double timeout_seconds) {
  RingReader& reader = *readers_[rank];
  absl::StatusOr<uint64_t> pos = reader.Acquire(timeout_seconds);
  if (!pos.ok()) return pos.status();
  const BatchLayout& layout = stream_->layout;
  RankBatch batch;
  batch.step = reader.Slot(*pos)->step;
  const uint8_t* base = reader.SlotBase(*pos);
  for (const BatchLayout::Entry& e : layout.entries) {
    batch.tensors.emplace_back(reinterpret_cast<const char*>(base + e.offset),
                               e.example_bytes * layout.per_rank_batch);
  }
  reader.Release(*pos);
  return batch;
}

// Server, client and tool tests.

int ExitCodeInChild(const std::function<int()>& fn, unsigned alarm_seconds) {
  const pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    if (alarm_seconds > 0) alarm(alarm_seconds);
    _exit(fn());
  }
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

bool BecomeUser(uid_t uid, gid_t gid, const std::vector<gid_t>& groups) {
  return setgroups(groups.size(), groups.data()) == 0 && setgid(gid) == 0 &&
         setuid(uid) == 0;
}

Child::Child(std::vector<std::string> argv,
             const std::vector<std::string>& args,
             const std::function<void()>& in_child) {
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<char*> cargv;
  for (std::string& a : argv) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  int in[2], out[2], err[2];
  if (pipe2(in, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0 ||
      pipe2(err, O_CLOEXEC) != 0) {
    abort();
  }
  pid_ = fork();
  if (pid_ == 0) {
    dup2(in[0], 0);
    dup2(out[1], 1);
    dup2(err[1], 2);
    // This side's ends: a process in_child forks and keeps (a namespace's
    // parent) must not hold the child's stdin open.
    close(in[1]);
    close(out[0]);
    close(err[0]);
    if (in_child) in_child();
    execv(cargv[0], cargv.data());
    _exit(94);
  }
  close(in[0]);
  close(out[1]);
  close(err[1]);
  stdin_ = in[1];
  stdout_ = out[0];
  stderr_ = err[0];
}

Child::~Child() {
  CloseStdin();
  Kill9();
  close(stdout_);
  close(stderr_);
}

std::string Child::Line(int timeout_ms) {
  return ReadLine(stdout_, timeout_ms);
}

void Child::CloseStdin() {
  if (stdin_ >= 0) close(stdin_);
  stdin_ = -1;
}

int Child::Wait(double seconds) {
  for (int i = 0; i < int(seconds * 100); ++i) {
    int status;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return -1;
}

std::string Child::Err() {
  std::string text;
  char buf[4096];
  for (ssize_t n; (n = read(stderr_, buf, sizeof(buf))) > 0;) {
    text.append(buf, size_t(n));
  }
  return text;
}

void Child::Kill9() {
  if (pid_ <= 0) return;
  kill(pid_, SIGKILL);
  waitpid(pid_, nullptr, 0);
  pid_ = -1;
}

std::vector<std::string> SharedDaemonFlags(const std::string& dir,
                                           std::vector<std::string> extra) {
  EXPECT_EQ(chmod(dir.c_str(), 0755), 0) << dir << ": " << strerror(errno);
  extra.insert(extra.end(), {"--socket-mode", "0666", "--shm-group", "65534"});
  return extra;
}

std::string SegmentName(absl::string_view tag) {
  static std::atomic<int> made{0};
  return absl::StrCat("/bd", tag, getpid(), ".", made++);
}

RingGeometry RingGeometryOf(uint32_t slots, uint64_t payload_bytes) {
  RingGeometry geometry;
  geometry.slot_count = slots;
  geometry.payload_bytes = payload_bytes;
  return geometry;
}

std::unique_ptr<RingWriter> MakeRingWriter(const std::string& name,
                                           const RingGeometry& geometry) {
  absl::StatusOr<std::unique_ptr<RingWriter>> writer =
      RingWriter::Create(name, geometry);
  EXPECT_TRUE(writer.ok()) << name << ": " << writer.status();
  return writer.ok() ? *std::move(writer) : nullptr;
}

TestRing MakeRing(const std::string& name, const RingGeometry& geometry) {
  TestRing ring;
  ring.writer = MakeRingWriter(name, geometry);
  if (ring.writer == nullptr) return ring;
  absl::StatusOr<std::unique_ptr<RingReader>> reader = RingReader::Attach(name);
  EXPECT_TRUE(reader.ok()) << name << ": " << reader.status();
  if (reader.ok()) ring.reader = *std::move(reader);
  return ring;
}

// ---------------------------------------------------------------------------
// StreamConfig, ServedStream.

WorkloadConfig StreamConfig(const std::string& data_path,
                            const std::string& split,
                            std::map<std::string, std::string> options,
                            uint64_t seed) {
  WorkloadConfig config;
  config.data_path = data_path;
  config.split = split;
  config.seed = seed;
  config.options = std::move(options);
  return config;
}

ServedStream::ServedStream(absl::string_view name,
                           std::unique_ptr<Workload> workload,
                           uint64_t global_batch, uint32_t world, uint64_t seed,
                           ReadAhead* readahead, uint64_t start) {
  absl::StatusOr<Sampler> sampler = Sampler::Create(
      workload->num_examples(), global_batch, world, seed, workload->shuffle());
  EXPECT_TRUE(sampler.ok()) << name << ": " << sampler.status();
  absl::StatusOr<BatchLayout> layout =
      BatchLayout::Make(workload->tensors(), global_batch / world);
  EXPECT_TRUE(layout.ok()) << name << ": " << layout.status();
  if (!sampler.ok() || !layout.ok()) return;
  stream_ =
      std::make_shared<StreamSetup>(std::string(name), std::move(workload),
                                    *std::move(sampler), *std::move(layout));
  engine_ = std::make_unique<Engine>(2, readahead);
  const absl::Status prepared = engine_->Prepare(stream_.get());
  EXPECT_TRUE(prepared.ok()) << name << ": " << prepared;
  if (!prepared.ok()) return;
  ranks_ = std::make_unique<ServedRanks>(stream_, world, start);
  if (ranks_->ok()) ranks_->AddTo(*engine_);
}

ServedStream::~ServedStream() {
  if (!stopped_) Stop();
}

absl::StatusOr<RankBatch> ServedStream::Next(uint32_t rank,
                                             double timeout_seconds) {
  return ranks_->Next(rank, timeout_seconds);
}

std::vector<std::vector<RankBatch>> ServedStream::NextSteps(int steps) {
  std::vector<std::vector<RankBatch>> got;
  for (int s = 0; s < steps; ++s) {
    std::vector<RankBatch> step;
    for (uint32_t r = 0; r < stream_->sampler.world_size(); ++r) {
      absl::StatusOr<RankBatch> batch = Next(r);
      EXPECT_TRUE(batch.ok())
          << "step " << s << ", rank " << r << ": " << batch.status();
      if (!batch.ok()) return got;
      step.push_back(*std::move(batch));
    }
    got.push_back(std::move(step));
  }
  return got;
}

bool ServedStream::Stop() {
  stopped_ = true;
  if (ranks_ != nullptr) ranks_->Retire();
  return engine_ == nullptr || engine_->Stop();
}

}  // namespace testutil
}  // namespace batchd

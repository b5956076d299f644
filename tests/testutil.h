// Fixtures the C++ suites share: temporary directories that remove
// themselves, whole files, lines of a child's output, TFRecord / TFDS
// shards of tf.train.Examples, the per-item output buffers
// Workload::FillItem writes into, a stream served to its ranks through
// the engine's rings (ServedRanks), a stream's workload config
// (StreamConfig) and a workload served through an engine of its own
// (ServedStream); for server, client and tool tests, a child program on
// pipes (Child), a function run in a child for its exit code
// (ExitCodeInChild), becoming another uid (BecomeUser), the flags of a
// daemon every uid may reach (SharedDaemonFlags) and rings made by hand
// (MakeRing). Test-only; failures are GoogleTest failures that name the
// path.
//
// Thread safety: the free functions may be called from any thread; a
// TempDir, RowBuffers, ServedRanks or ServedStream belongs to one thread at
// a time.
#ifndef BATCHD_TESTS_TESTUTIL_H_
#define BATCHD_TESTS_TESTUTIL_H_

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "ring/ring.h"
#include "workloads/workload.h"

// BATCHD_TEST_ASAN: built with AddressSanitizer, by gcc
// (__SANITIZE_ADDRESS__) or clang (__has_feature).
#if defined(__SANITIZE_ADDRESS__)
#define BATCHD_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define BATCHD_TEST_ASAN 1
#endif
#endif

namespace batchd {

class Cancellation;  // base/work_context.h
class Engine;        // server/engine.h
class RankProducer;  // server/engine.h
class ReadAhead;     // server/readahead.h
class RingReader;    // ring/ring.h
struct StreamSetup;  // server/engine.h

namespace testutil {

// Makes a fresh directory /tmp/batchd-<tag>-XXXXXX and returns its real
// path (symbolic links resolved, as the data root and cache compare paths).
// Nobody removes it: for directories that live as long as the process or
// whose owner removes them; else use TempDir.
std::string MakeTempDir(absl::string_view tag);

// Removes `path` and everything beneath it; a missing path is no error.
void RemoveTree(const std::string& path);

// A MakeTempDir directory removed, with everything in it, when the TempDir
// goes.
class TempDir {
 public:
  explicit TempDir(absl::string_view tag = "test") : path_(MakeTempDir(tag)) {}
  ~TempDir() { RemoveTree(path_); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  // path()/rel.
  std::string Path(absl::string_view rel) const;

 private:
  const std::string path_;
};

// Writes `data` to `path`, replacing what was there.
void WriteFile(const std::string& path, absl::string_view data);
// The whole of `path`; empty when it cannot be read.
std::string ReadFile(const std::string& path);

// The next line read from `fd`, without its newline; at the end of the
// input, or when no byte comes within `timeout_ms`, what came before.
std::string ReadLine(int fd, int timeout_ms);

// Runs `fn` in a forked child and returns what it returned, passed back
// through a pipe, once the child has exited; *status (if given) is the
// child's waitpid status (-1 if waitpid failed). "fork failed" or "pipe
// failed" when it cannot start the child.
std::string RunInChild(const std::function<std::string()>& fn,
                       int* status = nullptr);

// A request whose caller goes once it has been asked `polls` times whether
// it is there (every check of a loop asks: no clock involved).
std::shared_ptr<Cancellation> GoneAfter(int polls);

// Polls `cond` every `poll_ms` until it holds or `seconds` have passed;
// then its last answer.
bool WaitFor(const std::function<bool()>& cond, double seconds,
             int poll_ms = 10);

// A tf.train.Example as TFDS's ImageNet records hold it: the encoded
// image, the label and, where not empty, the file name.
std::string ImageExample(absl::string_view image, int64_t label,
                         absl::string_view file_name = "");

// Writes one split of a TFDS data set as TFRecord shards named as TFDS
// names them, dir/<dataset>-<split>.tfrecord-0000s-of-0000n, shard s holding
// shards[s]; returns their paths in order.
std::vector<std::string> WriteTfdsShards(
    const std::string& dir, absl::string_view dataset, absl::string_view split,
    const std::vector<std::vector<std::string>>& shards);

// The output of one item for Workload::FillItem: buffer k holds
// tensors[k].ExampleBytes() bytes, zeroed.
class RowBuffers {
 public:
  explicit RowBuffers(const std::vector<TensorLayout>& tensors);
  RowBuffers(const RowBuffers&) = delete;
  RowBuffers& operator=(const RowBuffers&) = delete;

  // What FillItem takes: out()[k] is buffer k.
  uint8_t* const* out() { return pointers_.data(); }
  std::vector<uint8_t>& bytes(size_t k) { return buffers_[k]; }
  const std::vector<uint8_t>& bytes(size_t k) const { return buffers_[k]; }
  // Buffer k as elements of T (its tensor's dtype).
  template <typename T>
  const T* as(size_t k) const {
    return reinterpret_cast<const T*>(buffers_[k].data());
  }

 private:
  std::vector<std::vector<uint8_t>> buffers_;
  std::vector<uint8_t*> pointers_;
};

// One rank's batch as its client reads it: the slot's step and, for each
// tensor of the stream's layout, the rank's rows of it.
struct RankBatch {
  uint64_t step = 0;
  std::vector<std::string> tensors;  // tensors[k]: entry k's rows, in order
};

// A stream served to its `world` ranks as the daemon serves it: one ring a
// rank (a RingWriter with a RingReader attached, `slots` slots) and a
// RankProducer on it from step `start`, on the stream's shared schedule.
// AddTo hands the producers to an engine; Retire takes them back and
// unlinks the rings, and must come before that engine stops. Failures to
// make a ring are GoogleTest failures (ok() says whether all were made).
class ServedRanks {
 public:
  ServedRanks(std::shared_ptr<StreamSetup> stream, uint32_t world,
              uint64_t start = 0, uint32_t slots = 2);
  ~ServedRanks();
  ServedRanks(const ServedRanks&) = delete;
  ServedRanks& operator=(const ServedRanks&) = delete;

  bool ok() const { return producers_.size() == world_; }
  void AddTo(Engine& engine);
  void Retire();

  // Rank `rank`'s next batch, waiting up to `timeout_seconds`; its slot is
  // released. The reader's error when none comes (the stream ended,
  // failed or stalled).
  absl::StatusOr<RankBatch> Next(uint32_t rank, double timeout_seconds = 60);

  RingReader& reader(uint32_t rank) { return *readers_[rank]; }
  const std::vector<std::shared_ptr<RankProducer>>& producers() const {
    return producers_;
  }
  const std::shared_ptr<StreamSetup>& stream() const { return stream_; }

 private:
  const std::shared_ptr<StreamSetup> stream_;
  const uint32_t world_;
  std::vector<std::unique_ptr<RingReader>> readers_;
  std::vector<std::shared_ptr<RankProducer>> producers_;
  Engine* engine_ = nullptr;  // AddTo's, until Retire
};

// Server, client and tool tests.

// Runs `fn` in a forked child, killed by SIGALRM after `alarm_seconds`
// (0: never), and returns its exit code (what fn returned), or 128 + the
// signal that ended it; -1 when it could not be started.
int ExitCodeInChild(const std::function<int()>& fn, unsigned alarm_seconds = 0);

// Makes this process (a forked child) user `uid` of group `gid`, with
// `groups` its only supplementary groups; false when it cannot (not root).
bool BecomeUser(uid_t uid, gid_t gid, const std::vector<gid_t>& groups = {});

// A program run in a forked child, its stdin, stdout and stderr on pipes
// of this process (close-on-exec: a later child holds none of them open).
// `in_child` runs in the child before the exec (to become another user or
// enter a namespace) and exits the child itself when that fails. The child
// is killed (SIGKILL) and reaped when the Child goes.
class Child {
 public:
  // Runs argv[0] with the rest of `argv`, then `args`, as its arguments.
  Child(std::vector<std::string> argv, const std::vector<std::string>& args,
        const std::function<void()>& in_child = nullptr);
  ~Child();
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  // The next line it printed, or "" at its end or after `timeout_ms`.
  std::string Line(int timeout_ms);
  void CloseStdin();
  // Its exit code, 128 + the signal that ended it, or -1 when it has not
  // ended within `seconds` (it is left running then).
  int Wait(double seconds = 60);
  // What it wrote to stderr; after Wait().
  std::string Err();
  void Kill9();
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
  int stdin_ = -1, stdout_ = -1, stderr_ = -1;
};

// The flags of a daemon every user may reach, after `extra`: its socket
// 0666 in `dir` (made 0755, for them to enter), the rings of their streams
// shared with nobody's group (65534), whose members map them.
std::vector<std::string> SharedDaemonFlags(const std::string& dir,
                                           std::vector<std::string> extra);

// "/bd<tag><pid>.<n>": a shared-memory segment name that no other process
// and no other call in this one uses.
std::string SegmentName(absl::string_view tag);

// A ring's geometry: `slots` slots of `payload_bytes` each.
RingGeometry RingGeometryOf(uint32_t slots, uint64_t payload_bytes);

// A RingWriter of segment `name`; null, and a GoogleTest failure that names
// the segment, when it cannot be made.
std::unique_ptr<RingWriter> MakeRingWriter(const std::string& name,
                                           const RingGeometry& geometry);

// A ring made for a test: a RingWriter of segment `name` and, attached to
// it, a RingReader. Failures are GoogleTest failures that name the
// segment; ok() says whether both were made.
struct TestRing {
  std::unique_ptr<RingWriter> writer;
  std::unique_ptr<RingReader> reader;
  bool ok() const { return writer != nullptr && reader != nullptr; }
};
TestRing MakeRing(const std::string& name, const RingGeometry& geometry);

// ---------------------------------------------------------------------------
// A workload opened and served to its ranks through an engine.

// The config the daemon opens a stream's workload with, for data in
// `data_path`: `split`, `options` and the stream's `seed`; no cache, and
// the daemon's own permissions.
WorkloadConfig StreamConfig(const std::string& data_path,
                            const std::string& split,
                            std::map<std::string, std::string> options = {},
                            uint64_t seed = 0);

// `workload` served as the daemon serves a stream: a sampler of global batch
// `global_batch` over `world` ranks (seed `seed`, shuffled if the workload
// shuffles), its batch layout, a StreamSetup named `name` that an engine of
// two workers prepares (with `readahead`, if given, which must outlive this),
// and ServedRanks on it from step `start`, added to the engine. Stop()
// retires the ranks and stops the engine; the destructor does, if Stop was
// not called. Failures to build it are GoogleTest failures (ok() says
// whether it was built).
class ServedStream {
 public:
  ServedStream(absl::string_view name, std::unique_ptr<Workload> workload,
               uint64_t global_batch, uint32_t world, uint64_t seed,
               ReadAhead* readahead = nullptr, uint64_t start = 0);
  ~ServedStream();
  ServedStream(const ServedStream&) = delete;
  ServedStream& operator=(const ServedStream&) = delete;

  bool ok() const { return ranks_ != nullptr && ranks_->ok(); }
  // ServedRanks::Next.
  absl::StatusOr<RankBatch> Next(uint32_t rank, double timeout_seconds = 60);
  // The next `steps` steps' batches, rank by rank ([step][rank]); fewer
  // steps (and a GoogleTest failure) when a rank's batch did not come.
  std::vector<std::vector<RankBatch>> NextSteps(int steps);
  // Retires the ranks and stops the engine: Engine::Stop's answer.
  bool Stop();

  StreamSetup& stream() { return *stream_; }
  ServedRanks& ranks() { return *ranks_; }

 private:
  std::shared_ptr<StreamSetup> stream_;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<ServedRanks> ranks_;
  bool stopped_ = false;
};

}  // namespace testutil
}  // namespace batchd

#endif  // BATCHD_TESTS_TESTUTIL_H_

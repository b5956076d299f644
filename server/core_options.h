// The core's options: what every part of the server is given (as LevelDB's
// parts take `const Options&`), in a header of their own so that no part
// includes the core that composes them. Each field says what it means and
// its default; ResolveCoreOptions turns the automatic ones (0,
// kAutoRingBytes) into figures, once, before any part sees them.
//
// Thread safety: a plain struct, constant once the core starts.
#ifndef BATCHD_SERVER_CORE_OPTIONS_H_
#define BATCHD_SERVER_CORE_OPTIONS_H_

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace batchd {

class CacheDir;  // storage/cache_dir.h

struct CoreOptions {
  // Data paths of specs are confined to this directory. Default: cwd.
  std::string data_root = ".";
  // The persistent cache handed to every workload (--cache-dir). Default:
  // none.
  std::shared_ptr<const CacheDir> cache;
  // Segment names are
  // /<shm_prefix>.<daemon uid>.<owner uid or tcp>.<stream>.<rank>.<random>.
  // Default: batchd.
  std::string shm_prefix = "batchd";
  // Worker threads; 0: the cores this process may use. Default: 0.
  int threads = 0;
  // Threads of the executor for indexing and counting work
  // (base/executor.h), in each of its two classes (serving, background);
  // whatever a stream's options ask, no workload starts more. 0: the cores
  // this process may use. At most Executor::kMaxThreads. Default: 0.
  int index_threads = 0;
  // No data file larger than this is opened for any stream: refused at
  // OpenStream, naming the file, its size and --max-data-file-bytes,
  // before any pass over it (storage/data_file.h). Default:
  // kDefaultMaxDataFileBytes (256 GiB).
  uint64_t max_data_file_bytes = uint64_t(256) << 30;
  // Bytes of SentencePiece models loaded at once over all streams (a model
  // shared by streams counts once); a stream whose model would exceed it
  // is refused. Default: SharedWork::kDefaultMaxModelBytes (1 GiB).
  uint64_t max_model_bytes = uint64_t(1) << 30;
  // --shm-group, resolved; no longer used for rings (each ring is its
  // client's uid's alone), kept so that the daemon can say it ignores it.
  gid_t shm_group = gid_t(-1);
  // Ring slots per rank when a spec says 0 (0 here: 4). Default: 4.
  uint32_t default_slots = 4;
  // A client in another pid namespace whose heartbeat is older than this is
  // taken as dead. Default: 10 s.
  double client_stale_seconds = 10.0;
  // A stream none of whose ranks is attached is forgotten after this long.
  // Default: 300 s.
  double idle_stream_seconds = 300.0;
  // Limits, so that one client cannot exhaust /dev/shm or the server.
  // Streams at once. Default: 64.
  uint32_t max_streams = 64;
  // Ring bytes of one stream (all its ranks on this node); 0: no limit.
  uint64_t max_stream_bytes = 0;
  // Ring bytes of all streams together; 0: no limit (/dev/shm's size is).
  // Default (kAutoRingBytes): half of /dev/shm's size when the core starts,
  // so that no client can fill the node's shared memory.
  uint64_t max_total_bytes = kAutoRingBytes;
  static constexpr uint64_t kAutoRingBytes = uint64_t(-1);
  // A ring that no client has mapped this long after OpenStream is freed,
  // so that a request naming a pid that never attaches cannot hold a slot
  // of --max-streams or block a drain; a stream none of whose rings was
  // ever mapped is forgotten with its last ring. Default: 60 s.
  double attach_timeout_seconds = 60.0;
  // A drain that still has ranks attached this long after it began ends
  // as if they had gone (the daemon stops; their clients reconnect to the
  // daemon that follows), so that no client, not even one that forges its
  // liveness, holds a drain for ever. 0: no deadline. Default: 3600 s.
  double drain_timeout_seconds = 3600.0;
  // Quotas per owner uid (anonymous TCP callers share one), so that no one
  // user's streams can starve another's. Streams of administrators (see
  // Core) are exempt; the limits above bind everyone.
  // Streams one uid may own at once; 0: no limit. Default
  // (kAutoStreams): a quarter of max_streams (at least 1), so that one
  // user's streams leave three quarters of the daemon's to the others
  // whatever --max-streams is (16 of the default 64).
  uint32_t max_streams_per_uid = kAutoStreams;
  static constexpr uint32_t kAutoStreams = uint32_t(-1);
  // Ring bytes of one uid's streams; 0: no limit. Default
  // (kAutoRingBytes): a quarter of max_total_bytes (of /dev/shm's size
  // when that is 0), so that four users fit at their full quota.
  uint64_t max_ring_bytes_per_uid = kAutoRingBytes;
  // Resident bytes of one uid's workloads (Workload::resident_bytes(): its
  // models); 0: no limit. Default: 1 GiB.
  uint64_t max_model_bytes_per_uid = uint64_t(1) << 30;
  // Authorization (see Core): members of this group may drain, shut down,
  // and join or close another uid's stream by naming its owner, as root and
  // the daemon's own uid may (-1: none).
  gid_t admin_gid = gid_t(-1);
  // TCP callers (no kernel identity) are administrators: they may drain,
  // shut down, and join or close any uid's stream. Default: false.
  bool anonymous_admin = false;
  // A throughput line per stream in the log this often; 0: never.
  // Default: 60 s.
  double throughput_log_seconds = 60;
  // Bytes read ahead of decoding, over all streams (shared evenly between
  // streams, then ranks); 0 turns read-ahead off. Default: 256 MiB.
  uint64_t readahead_bytes = uint64_t(256) << 20;
  // I/O threads of the read-ahead (reads in flight at most). Default: 32.
  int readahead_threads = 32;
  // Bytes of fills kept for other streams of the same content (jobs of one
  // spec: server/fill_share.h), over all of them; 0: streams share no
  // fills. Default: 512 MiB.
  uint64_t share_window_bytes = uint64_t(512) << 20;
  // A batch that has waited this long for a read that has not returned
  // (a stalled mount) fails its rank, naming the file; 0: never.
  // Default: 60 s.
  double read_stall_seconds = 60;
  // How long the stop (the destructor) waits for workers and I/O threads
  // before it leaves those stuck in the kernel to end with the process.
  // Default: 3 s.
  double stop_wait_seconds = 3;
  // How long a stream being prepared (server/stream_preparations.h) waits
  // for its caller to ask again after an answer of "still preparing",
  // before it is cancelled. Default: 5 s.
  double prepare_grace_seconds = 5;
};

// `options` with data_root made absolute (realpath; InvalidArgument when it
// does not exist; the path as given is kept as another name of the root for
// the links in its tree: DataRoot::AddOperatorName), every automatic figure
// resolved (threads and index_threads from the cores this process may use, the
// ring byte limits from /dev/shm's size now, default_slots) and shm_prefix
// checked (InvalidArgument naming --shm-prefix).
absl::StatusOr<CoreOptions> ResolveCoreOptions(const CoreOptions& options);

}  // namespace batchd

#endif  // BATCHD_SERVER_CORE_OPTIONS_H_

// latency_fs: a read-only FUSE passthrough of a directory that adds a fixed
// latency to every open and every read, to stand in for network storage
// (NFS, Lustre, an object store mounted with FUSE) in bench/readahead_bench.sh.
//
// It runs multithreaded (libfuse's default loop), so concurrent reads sleep
// concurrently and overlap as they would on a network file system: what the
// latency costs a reader depends on how many reads it keeps in flight.
// The kernel page cache is bypassed (direct_io), so every read pays.
// --meta-latency-ms adds a latency to every metadata request as well
// (getattr, opendir, readdir: a stat or a directory listing over the
// network); the default 0 leaves metadata at local speed. The passthrough
// itself: passthrough_fs.h.
//
//   latency_fs SOURCE_DIR MOUNTPOINT --latency-ms=2 [--meta-latency-ms=2]
//       [-f] [FUSE options]
//   fusermount3 -u MOUNTPOINT
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <time.h>

#include "passthrough_fs.h"

static struct {
  double latency_ms;
  double meta_latency_ms;
} g_options;

struct options_spec {
  char* latency;
  char* meta_latency;
};
static struct options_spec g_spec;
static const struct fuse_opt kOptionSpec[] = {
    {"--latency-ms=%s", offsetof(struct options_spec, latency), 0},
    {"--meta-latency-ms=%s", offsetof(struct options_spec, meta_latency), 0},
    FUSE_OPT_END};

static void Sleep(double ms) {
  if (ms <= 0) return;
  struct timespec ts;
  const double s = ms / 1000.0;
  ts.tv_sec = (time_t)s;
  ts.tv_nsec = (long)((s - (double)ts.tv_sec) * 1e9);
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

static void Delay(void) { Sleep(g_options.latency_ms); }
static void MetaDelay(void) { Sleep(g_options.meta_latency_ms); }

static int Parsed(void) {
  g_options.latency_ms = g_spec.latency ? atof(g_spec.latency) : 0.0;
  g_options.meta_latency_ms =
      g_spec.meta_latency ? atof(g_spec.meta_latency) : 0.0;
  return 0;
}

static const struct passthrough_fs kFs = {
    .name = "latency_fs",
    .usage = "--latency-ms=MS [--meta-latency-ms=MS] [-f] [FUSE options]",
    .before_data = Delay,
    .before_meta = MetaDelay,
    // Attributes and names may be cached (metadata is not what is
    // measured); file data never is.
    .cache_metadata = 1,
    // libfuse's default is 10; network storage serves more.
    .max_threads = 128,
    .parsed = Parsed,
};

int main(int argc, char* argv[]) {
  return PassthroughMain(&kFs, argc, argv, &g_spec, kOptionSpec);
}

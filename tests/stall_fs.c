// stall_fs: a read-only FUSE passthrough of a directory whose opens and
// reads stop answering while a control file exists, to stand in for a
// network mount whose server is gone (NFS, Lustre, an object store mounted
// with FUSE) in the daemon's stalled-storage tests.
//
// While CONTROL exists, every open and read waits until it is removed
// (polling every 10 ms, deaf to interrupts, as a hard mount is), and the
// first to wait creates CONTROL.hit; metadata
// (getattr, readdir) is served at once. File data never comes from the
// page cache (direct_io), so every read asks the file system. The
// passthrough itself: bench/passthrough_fs.h.
//
//   stall_fs SOURCE_DIR MOUNTPOINT --control=FILE [-f] [FUSE options]
//   fusermount3 -u MOUNTPOINT
#include <fcntl.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include "passthrough_fs.h"

struct options_spec {
  char* control;
};
static struct options_spec g_spec;
static const struct fuse_opt kOptionSpec[] = {
    {"--control=%s", offsetof(struct options_spec, control), 0}, FUSE_OPT_END};

// Waits while the control file exists; the first wait creates
// CONTROL.hit, so that a test knows a request is stuck.
static void WaitWhileStalled(void) {
  const struct timespec tick = {0, 10 * 1000 * 1000};
  int marked = 0;
  while (access(g_spec.control, F_OK) == 0) {
    if (!marked) {
      char hit[PATH_MAX];
      snprintf(hit, sizeof(hit), "%s.hit", g_spec.control);
      const int fd = open(hit, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
      if (fd >= 0) close(fd);
      marked = 1;
    }
    nanosleep(&tick, NULL);
  }
}

static int Parsed(void) {
  if (g_spec.control == NULL) {
    fprintf(stderr, "stall_fs: --control=FILE is required\n");
    return 2;
  }
  return 0;
}

// Metadata is served at once and not cached beyond libfuse's default.
static const struct passthrough_fs kFs = {
    .name = "stall_fs",
    .usage = "--control=FILE [-f] [FUSE options]",
    .before_data = WaitWhileStalled,
    .max_threads = 256,
    .parsed = Parsed,
};

int main(int argc, char* argv[]) {
  return PassthroughMain(&kFs, argc, argv, &g_spec, kOptionSpec);
}

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
// network); the default 0 leaves metadata at local speed.
//
//   latency_fs SOURCE_DIR MOUNTPOINT --latency-ms=2 [--meta-latency-ms=2]
//       [-f] [FUSE options]
//   fusermount3 -u MOUNTPOINT
#define FUSE_USE_VERSION 31

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fuse.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static struct {
  const char* source;
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

// SOURCE + path; false when it does not fit.
static int Real(const char* path, char* out) {
  return snprintf(out, PATH_MAX, "%s%s", g_options.source, path) < PATH_MAX;
}

static int FsGetattr(const char* path, struct stat* st,
                     struct fuse_file_info* fi) {
  (void)fi;
  char real[PATH_MAX];
  if (!Real(path, real)) return -ENAMETOOLONG;
  MetaDelay();
  return lstat(real, st) == 0 ? 0 : -errno;
}

static int FsReaddir(const char* path, void* buf, fuse_fill_dir_t fill,
                     off_t offset, struct fuse_file_info* fi,
                     enum fuse_readdir_flags flags) {
  (void)offset;
  (void)fi;
  (void)flags;
  char real[PATH_MAX];
  if (!Real(path, real)) return -ENAMETOOLONG;
  MetaDelay();
  DIR* d = opendir(real);
  if (d == NULL) return -errno;
  struct dirent* e;
  while ((e = readdir(d)) != NULL) {
    struct stat st;
    memset(&st, 0, sizeof(st));
    st.st_ino = e->d_ino;
    st.st_mode = (mode_t)(e->d_type << 12);
    if (fill(buf, e->d_name, &st, 0, 0)) break;
  }
  closedir(d);
  return 0;
}

static int FsOpendir(const char* path, struct fuse_file_info* fi) {
  (void)path;
  (void)fi;
  MetaDelay();
  return 0;
}

static int FsOpen(const char* path, struct fuse_file_info* fi) {
  if ((fi->flags & O_ACCMODE) != O_RDONLY) return -EROFS;
  char real[PATH_MAX];
  if (!Real(path, real)) return -ENAMETOOLONG;
  Delay();
  const int fd = open(real, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -errno;
  fi->fh = (uint64_t)fd;
  fi->direct_io = 1;
  return 0;
}

static int FsRead(const char* path, char* buf, size_t size, off_t offset,
                  struct fuse_file_info* fi) {
  (void)path;
  Delay();
  const ssize_t n = pread((int)fi->fh, buf, size, offset);
  return n < 0 ? -errno : (int)n;
}

static int FsRelease(const char* path, struct fuse_file_info* fi) {
  (void)path;
  close((int)fi->fh);
  return 0;
}

static int FsStatfs(const char* path, struct statvfs* st) {
  char real[PATH_MAX];
  if (!Real(path, real)) return -ENAMETOOLONG;
  return statvfs(real, st) == 0 ? 0 : -errno;
}

static void* FsInit(struct fuse_conn_info* conn, struct fuse_config* cfg) {
  (void)conn;
  cfg->use_ino = 1;
  // Attributes and names may be cached (metadata is not what is measured);
  // file data never is (direct_io on open).
  cfg->entry_timeout = 60;
  cfg->attr_timeout = 60;
  cfg->kernel_cache = 0;
  return NULL;
}

static const struct fuse_operations kOps = {
    .getattr = FsGetattr,
    .open = FsOpen,
    .read = FsRead,
    .statfs = FsStatfs,
    .release = FsRelease,
    .opendir = FsOpendir,
    .readdir = FsReaddir,
    .init = FsInit,
};

int main(int argc, char* argv[]) {
  if (argc < 3) {
    fprintf(stderr,
            "usage: %s SOURCE_DIR MOUNTPOINT --latency-ms=MS "
            "[--meta-latency-ms=MS] [-f] [FUSE options]\n",
            argv[0]);
    return 2;
  }
  static char source[PATH_MAX];
  if (realpath(argv[1], source) == NULL) {
    fprintf(stderr, "latency_fs: %s: %s\n", argv[1], strerror(errno));
    return 2;
  }
  g_options.source = source;
  // FUSE sees the arguments after SOURCE_DIR.
  struct fuse_args args = FUSE_ARGS_INIT(argc - 1, argv + 1);
  if (fuse_opt_parse(&args, &g_spec, kOptionSpec, NULL) != 0) return 2;
  g_options.latency_ms = g_spec.latency ? atof(g_spec.latency) : 0.0;
  g_options.meta_latency_ms =
      g_spec.meta_latency ? atof(g_spec.meta_latency) : 0.0;
  // Readers and the benchmark run as root; let them in whoever mounts.
  fuse_opt_add_arg(&args, "-oallow_other");
  fuse_opt_add_arg(&args, "-oro");
  // max_threads: libfuse's default is 10; network storage serves more.
  fuse_opt_add_arg(&args, "-omax_threads=128");
  const int rc = fuse_main(args.argc, args.argv, &kOps, NULL);
  fuse_opt_free_args(&args);
  return rc;
}

// stall_fs: a read-only FUSE passthrough of a directory whose opens and
// reads stop answering while a control file exists, to stand in for a
// network mount whose server is gone (NFS, Lustre, an object store mounted
// with FUSE) in the daemon's stalled-storage tests.
//
// While CONTROL exists, every open and read waits until it is removed
// (polling every 10 ms, deaf to interrupts, as a hard mount is), and the
// first to wait creates CONTROL.hit; metadata
// (getattr, readdir) is served at once. File data never comes from the
// page cache (direct_io), so every read asks the file system.
//
//   stall_fs SOURCE_DIR MOUNTPOINT --control=FILE [-f] [FUSE options]
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
  const char* control;
} g_options;

struct options_spec {
  char* control;
};
static struct options_spec g_spec;
static const struct fuse_opt kOptionSpec[] = {
    {"--control=%s", offsetof(struct options_spec, control), 0},
    FUSE_OPT_END};

// Waits while the control file exists; the first wait creates
// CONTROL.hit, so that a test knows a request is stuck.
static void WaitWhileStalled(void) {
  const struct timespec tick = {0, 10 * 1000 * 1000};
  int marked = 0;
  while (access(g_options.control, F_OK) == 0) {
    if (!marked) {
      char hit[PATH_MAX];
      snprintf(hit, sizeof(hit), "%s.hit", g_options.control);
      const int fd = open(hit, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
      if (fd >= 0) close(fd);
      marked = 1;
    }
    nanosleep(&tick, NULL);
  }
}

// SOURCE + path; false when it does not fit.
static int Real(const char* path, char* out) {
  return snprintf(out, PATH_MAX, "%s%s", g_options.source, path) < PATH_MAX;
}

static int FsGetattr(const char* path, struct stat* st,
                     struct fuse_file_info* fi) {
  (void)fi;
  char real[PATH_MAX];
  if (!Real(path, real)) return -ENAMETOOLONG;
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

static int FsOpen(const char* path, struct fuse_file_info* fi) {
  if ((fi->flags & O_ACCMODE) != O_RDONLY) return -EROFS;
  char real[PATH_MAX];
  if (!Real(path, real)) return -ENAMETOOLONG;
  WaitWhileStalled();
  const int fd = open(real, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -errno;
  fi->fh = (uint64_t)fd;
  fi->direct_io = 1;
  return 0;
}

static int FsRead(const char* path, char* buf, size_t size, off_t offset,
                  struct fuse_file_info* fi) {
  (void)path;
  WaitWhileStalled();
  const ssize_t n = pread((int)fi->fh, buf, size, offset);
  return n < 0 ? -errno : (int)n;
}

static int FsRelease(const char* path, struct fuse_file_info* fi) {
  (void)path;
  close((int)fi->fh);
  return 0;
}

static void* FsInit(struct fuse_conn_info* conn, struct fuse_config* cfg) {
  (void)conn;
  cfg->use_ino = 1;
  cfg->kernel_cache = 0;
  return NULL;
}

static const struct fuse_operations kOps = {
    .getattr = FsGetattr,
    .open = FsOpen,
    .read = FsRead,
    .release = FsRelease,
    .readdir = FsReaddir,
    .init = FsInit,
};

int main(int argc, char* argv[]) {
  if (argc < 3) {
    fprintf(stderr,
            "usage: %s SOURCE_DIR MOUNTPOINT --control=FILE [-f] "
            "[FUSE options]\n",
            argv[0]);
    return 2;
  }
  static char source[PATH_MAX];
  if (realpath(argv[1], source) == NULL) {
    fprintf(stderr, "stall_fs: %s: %s\n", argv[1], strerror(errno));
    return 2;
  }
  g_options.source = source;
  // FUSE sees the arguments after SOURCE_DIR.
  struct fuse_args args = FUSE_ARGS_INIT(argc - 1, argv + 1);
  if (fuse_opt_parse(&args, &g_spec, kOptionSpec, NULL) != 0) return 2;
  if (g_spec.control == NULL) {
    fprintf(stderr, "stall_fs: --control=FILE is required\n");
    return 2;
  }
  g_options.control = g_spec.control;
  // The daemon under test may run as another user than the mount's.
  fuse_opt_add_arg(&args, "-oallow_other");
  fuse_opt_add_arg(&args, "-oro");
  fuse_opt_add_arg(&args, "-omax_threads=256");
  const int rc = fuse_main(args.argc, args.argv, &kOps, NULL);
  fuse_opt_free_args(&args);
  return rc;
}

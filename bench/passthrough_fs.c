// passthrough_fs: see passthrough_fs.h.
#include "passthrough_fs.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const struct passthrough_fs* g_fs;
static char g_source[PATH_MAX];

static void BeforeData(void) {
  if (g_fs->before_data != NULL) g_fs->before_data();
}

static void BeforeMeta(void) {
  if (g_fs->before_meta != NULL) g_fs->before_meta();
}

// SOURCE + path; false when it does not fit.
static int Real(const char* path, char* out) {
  return snprintf(out, PATH_MAX, "%s%s", g_source, path) < PATH_MAX;
}

static int FsGetattr(const char* path, struct stat* st,
                     struct fuse_file_info* fi) {
  (void)fi;
  char real[PATH_MAX];
  if (!Real(path, real)) return -ENAMETOOLONG;
  BeforeMeta();
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
  BeforeMeta();
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
  BeforeMeta();
  return 0;
}

static int FsOpen(const char* path, struct fuse_file_info* fi) {
  if ((fi->flags & O_ACCMODE) != O_RDONLY) return -EROFS;
  char real[PATH_MAX];
  if (!Real(path, real)) return -ENAMETOOLONG;
  BeforeData();
  const int fd = open(real, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -errno;
  fi->fh = (uint64_t)fd;
  fi->direct_io = 1;
  return 0;
}

static int FsRead(const char* path, char* buf, size_t size, off_t offset,
                  struct fuse_file_info* fi) {
  (void)path;
  BeforeData();
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
  if (g_fs->cache_metadata) {
    cfg->entry_timeout = 60;
    cfg->attr_timeout = 60;
  }
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

int PassthroughMain(const struct passthrough_fs* fs, int argc, char* argv[],
                    void* data, const struct fuse_opt* spec) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s SOURCE_DIR MOUNTPOINT %s\n", argv[0], fs->usage);
    return 2;
  }
  if (realpath(argv[1], g_source) == NULL) {
    fprintf(stderr, "%s: %s: %s\n", fs->name, argv[1], strerror(errno));
    return 2;
  }
  // FUSE sees the arguments after SOURCE_DIR.
  struct fuse_args args = FUSE_ARGS_INIT(argc - 1, argv + 1);
  if (fuse_opt_parse(&args, data, spec, NULL) != 0) return 2;
  if (fs->parsed != NULL) {
    const int bad = fs->parsed();
    if (bad) return bad;
  }
  g_fs = fs;
  char threads[32];
  snprintf(threads, sizeof(threads), "-omax_threads=%d", fs->max_threads);
  fuse_opt_add_arg(&args, "-oallow_other");
  fuse_opt_add_arg(&args, "-oro");
  fuse_opt_add_arg(&args, threads);
  const int rc = fuse_main(args.argc, args.argv, &kOps, NULL);
  fuse_opt_free_args(&args);
  return rc;
}

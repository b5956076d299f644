// passthrough_fs: a read-only FUSE passthrough of a directory, with a hook
// before every data request (open, read) and one before every metadata
// request (getattr, opendir, readdir). The stand-ins for network storage
// build on it: bench/latency_fs.c (a fixed latency) and tests/stall_fs.c
// (a server that stops answering). File data never comes from the page
// cache (direct_io), so every read asks the file system.
#ifndef BATCHD_BENCH_PASSTHROUGH_FS_H_
#define BATCHD_BENCH_PASSTHROUGH_FS_H_

#define FUSE_USE_VERSION 31

#include <fuse.h>

struct passthrough_fs {
  const char* name;           // the program's, for its messages
  const char* usage;          // its arguments after SOURCE_DIR MOUNTPOINT
  void (*before_data)(void);  // before every open and read; NULL: none
  void (*before_meta)(void);  // before every metadata request; NULL: none
  // Entry and attribute timeouts of 60 s rather than libfuse's 1 s (where
  // metadata is not what is measured); data is never cached either way.
  int cache_metadata;
  int max_threads;  // of libfuse's multithreaded loop
  // After the program's options are parsed: checks and takes them; returns
  // 0, or the exit code after printing why not. NULL: nothing to check.
  int (*parsed)(void);
};

// The program's main: SOURCE_DIR MOUNTPOINT [options]. Takes SOURCE_DIR
// (argv[1]) as the source, parses the arguments after it with `spec` into
// `data` (as fuse_opt_parse does), calls fs->parsed, and mounts the source
// read-only at MOUNTPOINT with the FUSE options left, open to other users
// (readers, a daemon under test, may run as another user than the
// mount's), serving it until it is unmounted. Returns 2 after printing
// the usage or an error, else fs->parsed's failure or fuse_main's code.
int PassthroughMain(const struct passthrough_fs* fs, int argc, char* argv[],
                    void* data, const struct fuse_opt* spec);

#endif  // BATCHD_BENCH_PASSTHROUGH_FS_H_

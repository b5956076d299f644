// open_bench: the cost of one DataRoot::OpenFile (and its close), the call
// that opens every ImageNet image (1.28 M per epoch), for each way a path
// can be resolved: plain files, relative links and absolute links inside
// the root, read as the daemon, as another uid (the kernel's check: run as
// root) and as any local user (mode bits), with openat2 and with the walk
// that stands in for it. Prints one line per case: nanoseconds per open,
// the best round's mean. --only READER/RESOLVE/PATHS (e.g. uid/openat2/t)
// runs one case, for `strace -c` to count its system calls.
//
//   open_bench [--dir SCRATCH] [--classes 20] [--files 500] [--rounds 7]
//       [--only READER/RESOLVE/PATHS]
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "storage/data_file.h"
#include "storage/read_access.h"

namespace {

// A uid of no user, readable through "other" bits.
constexpr uint32_t kReaderUid = 47431;

int Usage() {
  fprintf(stderr,
          "usage: open_bench [--dir SCRATCH] [--classes N] [--files N] "
          "[--rounds N] [--only READER/RESOLVE/PATHS]\n");
  return 2;
}

bool MakeTree(const std::string& root, int classes, int files) {
  for (const char* top : {"t", "rel", "abs"}) {
    if (mkdir(absl::StrCat(root, "/", top).c_str(), 0755) != 0) return false;
  }
  for (int c = 0; c < classes; ++c) {
    const std::string cls = absl::StrFormat("n%08d", c);
    for (const char* top : {"t", "rel", "abs"}) {
      if (mkdir(absl::StrCat(root, "/", top, "/", cls).c_str(), 0755) != 0) {
        return false;
      }
    }
    for (int f = 0; f < files; ++f) {
      const std::string name = absl::StrFormat("%s_%06d.JPEG", cls, f);
      const std::string file = absl::StrCat(root, "/t/", cls, "/", name);
      const int fd = open(file.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644);
      if (fd < 0 || write(fd, "jpeg", 4) != 4) return false;
      close(fd);
      if (symlink(absl::StrCat("../../t/", cls, "/", name).c_str(),
                  absl::StrCat(root, "/rel/", cls, "/", name).c_str()) != 0 ||
          symlink(file.c_str(),
                  absl::StrCat(root, "/abs/", cls, "/", name).c_str()) != 0) {
        return false;
      }
    }
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir, only;
  int classes = 20, files = 500, rounds = 7;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--dir") {
      dir = argv[i + 1];
    } else if (flag == "--classes") {
      classes = atoi(argv[i + 1]);
    } else if (flag == "--files") {
      files = atoi(argv[i + 1]);
    } else if (flag == "--rounds") {
      rounds = atoi(argv[i + 1]);
    } else if (flag == "--only") {
      only = argv[i + 1];
    } else {
      return Usage();
    }
  }
  if (argc % 2 != 1 || classes <= 0 || files <= 0 || rounds <= 0) {
    return Usage();
  }
  std::string made = dir.empty() ? "/tmp/open_bench.XXXXXX" : dir;
  if (dir.empty() && mkdtemp(made.data()) == nullptr) {
    perror("mkdtemp");
    return 1;
  }
  chmod(made.c_str(), 0755);
  if (!MakeTree(made, classes, files)) {
    fprintf(stderr, "open_bench: cannot make the tree under %s\n",
            made.c_str());
    return 1;
  }
  std::vector<std::string> names;
  for (int c = 0; c < classes; ++c) {
    for (int f = 0; f < files; ++f) {
      names.push_back(absl::StrFormat("n%08d/n%08d_%06d.JPEG", c, c, f));
    }
  }
  struct Reader {
    const char* name;
    batchd::ReadAccess access;
  };
  std::vector<Reader> readers = {{"daemon", batchd::ReadAccess::Daemon()},
                                 {"world", batchd::ReadAccess::World()}};
  if (geteuid() == 0) {
    readers.push_back(
        {"uid", batchd::ReadAccess::User(kReaderUid, kReaderUid, {})});
  }
  printf("%-8s %-8s %-6s %10s\n", "reader", "resolve", "paths", "ns/open");
  int failed = 0;
  for (const bool walk : {false, true}) {
    batchd::DataRoot::DisableOpenat2ForTesting(walk);
    for (const Reader& reader : readers) {
      auto root = batchd::DataRoot::Open(made, reader.access);
      if (!root.ok()) {
        fprintf(stderr, "open_bench: %s\n", root.status().ToString().c_str());
        return 1;
      }
      for (const char* top : {"t", "rel", "abs"}) {
        const std::string name =
            absl::StrCat(reader.name, "/", walk ? "walk" : "openat2", "/", top);
        if (!only.empty() && only != name) continue;
        std::vector<std::string> paths;
        for (const std::string& n : names) {
          // Absolute, as the ImageNet workload names its files.
          paths.push_back(absl::StrCat((*root)->path(), "/", top, "/", n));
        }
        double best = 1e30;
        for (int r = 0; r < rounds; ++r) {
          const auto start = std::chrono::steady_clock::now();
          for (const std::string& p : paths) {
            absl::StatusOr<int> fd = (*root)->OpenFile(p);
            if (!fd.ok()) {
              if (failed++ == 0) {
                fprintf(stderr, "open_bench: %s\n",
                        fd.status().ToString().c_str());
              }
              continue;
            }
            close(*fd);
          }
          const double ns = std::chrono::duration<double, std::nano>(
                                std::chrono::steady_clock::now() - start)
                                .count();
          best = std::min(best, ns / double(paths.size()));
        }
        printf("%-8s %-8s %-6s %10.0f\n", reader.name,
               walk ? "walk" : "openat2", top, best);
        fflush(stdout);
      }
    }
  }
  if (dir.empty()) {
    const std::string rm = absl::StrCat("rm -rf '", made, "'");
    if (system(rm.c_str()) != 0)
      fprintf(stderr, "cannot remove %s\n", rm.c_str());
  }
  if (failed > 0) {
    fprintf(stderr, "open_bench: %d opens failed\n", failed);
    return 1;
  }
  return 0;
}

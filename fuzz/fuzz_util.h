// Helpers shared by the fuzz targets: parsers that take a path get the
// fuzzer's bytes through a file of their own process's scratch directory.
#ifndef BATCHD_FUZZ_FUZZ_UTIL_H_
#define BATCHD_FUZZ_FUZZ_UTIL_H_

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace batchd {
namespace fuzz {

// A directory of this process, under $TMPDIR (else /tmp), made on first use
// and left for the process's lifetime (libFuzzer exits without unwinding).
inline const std::string& ScratchDir() {
  static const std::string* dir = [] {
    const char* tmp = getenv("TMPDIR");
    std::string templ =
        std::string(tmp != nullptr ? tmp : "/tmp") + "/batchd-fuzz-XXXXXX";
    if (mkdtemp(templ.data()) == nullptr) {
      perror("mkdtemp");
      abort();
    }
    return new std::string(templ);
  }();
  return *dir;
}

// Writes `data` to ScratchDir()/name (replacing it) and returns the path.
inline std::string WriteScratchFile(const std::string& name,
                                    const uint8_t* data, size_t size) {
  const std::string path = ScratchDir() + "/" + name;
  const int fd =
      open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) {
    perror(path.c_str());
    abort();
  }
  size_t done = 0;
  while (done < size) {
    const ssize_t n = write(fd, data + done, size - done);
    if (n <= 0) {
      perror(path.c_str());
      abort();
    }
    done += size_t(n);
  }
  close(fd);
  return path;
}

// Aborts with a message: a property the target checks does not hold.
[[noreturn]] inline void Fail(const std::string& what) {
  fprintf(stderr, "fuzz property violated: %s\n", what.c_str());
  abort();
}

}  // namespace fuzz
}  // namespace batchd

#endif  // BATCHD_FUZZ_FUZZ_UTIL_H_

// The suites' shared fixtures; see testutil.h.
#include "tests/testutil.h"

#include <limits.h>
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstring>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "gtest/gtest.h"
#include "workloads/common/tf_example.h"
#include "workloads/common/tfrecord.h"

namespace batchd {
namespace testutil {

std::string MakeTempDir(absl::string_view tag) {
  std::string tmpl = absl::StrCat("/tmp/batchd-", tag, "-XXXXXX");
  if (mkdtemp(tmpl.data()) == nullptr) {
    ADD_FAILURE() << "mkdtemp " << tmpl << ": " << strerror(errno)
                  << " (is /tmp writable and not full?)";
    return tmpl;
  }
  char resolved[PATH_MAX];
  return realpath(tmpl.c_str(), resolved) == nullptr ? tmpl : resolved;
}

void RemoveTree(const std::string& path) {
  std::error_code ec;
  std::filesystem::remove_all(path, ec);
  EXPECT_FALSE(ec) << "removing " << path << ": " << ec.message();
}

std::string TempDir::Path(absl::string_view rel) const {
  return absl::StrCat(path_, "/", rel);
}

void WriteFile(const std::string& path, absl::string_view data) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(data.data(), std::streamsize(data.size()));
  out.close();
  EXPECT_TRUE(out) << "cannot write " << data.size() << " bytes to " << path;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string ReadLine(int fd, int timeout_ms) {
  std::string line;
  char c;
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, timeout_ms) <= 0 || read(fd, &c, 1) != 1) return line;
    if (c == '\n') return line;
    line += c;
  }
}

std::string ImageExample(absl::string_view image, int64_t label,
                         absl::string_view file_name) {
  ExampleFeatures f;
  f.bytes["image"] = {std::string(image)};
  f.int64s["label"] = {label};
  if (!file_name.empty()) f.bytes["file_name"] = {std::string(file_name)};
  return SerializeExample(f);
}

std::vector<std::string> WriteTfdsShards(
    const std::string& dir, absl::string_view dataset, absl::string_view split,
    const std::vector<std::vector<std::string>>& shards) {
  std::vector<std::string> paths;
  for (size_t s = 0; s < shards.size(); ++s) {
    paths.push_back(absl::StrFormat("%s/%s-%s.tfrecord-%05d-of-%05d", dir,
                                    dataset, split, s, shards.size()));
    const absl::Status st = WriteTFRecordFile(paths.back(), shards[s]);
    EXPECT_TRUE(st.ok()) << paths.back() << ": " << st;
  }
  return paths;
}

RowBuffers::RowBuffers(const std::vector<TensorLayout>& tensors) {
  for (const TensorLayout& t : tensors) {
    buffers_.emplace_back(t.ExampleBytes());
  }
  for (std::vector<uint8_t>& b : buffers_) pointers_.push_back(b.data());
}

}  // namespace testutil
}  // namespace batchd

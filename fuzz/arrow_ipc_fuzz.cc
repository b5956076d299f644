// libFuzzer target for the Arrow IPC stream reader of finewebedu_lm
// (workloads/finewebedu_lm/arrow_stream.h), as a shard is indexed: the
// reader gets a file (a memfd) of exactly the input's bytes after byte 0,
// which says how large a hole follows them (0: none, k: 2^k bytes, at most
// 2^40), as a sparse giant ends. Any file must give an index or a Status,
// never a crash, a read past a buffer, a walk longer than the metadata
// (a schema that is a DAG) or an allocation of what the file only claims
// (scripts/fuzz.sh runs it under -timeout and -rss_limit_mb). What an index
// holds lies inside the file and within its budget of record batches.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "fuzz/fuzz_util.h"
#include "workloads/finewebedu_lm/arrow_stream.h"

namespace {

constexpr uint64_t kBudget = 16;  // batches, so that the limit is reached

// One descriptor for the process, holding the current input.
int File() {
  static const int fd = [] {
    const int f = memfd_create("arrow_ipc_fuzz", MFD_CLOEXEC);
    if (f < 0) {
      perror("memfd_create");
      abort();
    }
    return f;
  }();
  return fd;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace batchd::arrow;  // NOLINT: the parser under test
  if (size == 0) return 0;
  const unsigned k = data[0] % 41;
  const uint64_t hole = k == 0 ? 0 : uint64_t(1) << k;
  const int fd = File();
  const uint64_t bytes = size - 1;
  if (ftruncate(fd, 0) != 0 ||
      pwrite(fd, data + 1, bytes, 0) != ssize_t(bytes) ||
      ftruncate(fd, off_t(bytes + hole)) != 0) {
    perror("memfd");
    abort();
  }
  const uint64_t file_size = bytes + hole;
  BatchBudget budget(kBudget);
  absl::StatusOr<ColumnIndex> idx =
      IndexListColumn(fd, file_size, "shard.arrow", "input_ids", &budget);
  if (!idx.ok()) return 0;
  if (idx->element_bytes != 4 && idx->element_bytes != 8) {
    batchd::fuzz::Fail(
        absl::StrCat("element of ", idx->element_bytes, " bytes"));
  }
  if (idx->batches.size() > kBudget) {
    batchd::fuzz::Fail(
        absl::StrCat(idx->batches.size(), " batches, over the budget"));
  }
  for (const ColumnBatch& b : idx->batches) {
    const uint64_t eb = uint64_t(idx->element_bytes);
    if (b.values_offset > file_size ||
        b.values > (file_size - b.values_offset) / eb) {
      batchd::fuzz::Fail(absl::StrCat("values [", b.values_offset, ", +",
                                      b.values, " x ", eb,
                                      ") outside a file of ", file_size));
    }
  }
  return 0;
}

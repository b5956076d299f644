// libFuzzer target for Criteo 1TB's blocks (workloads/criteo1tb/
// criteo_blocks.h) over a day file of exactly the input's bytes after two
// (at most 8 KiB of them, so that a run stays quick): byte 0 sets the
// block size (64 to 2,048 bytes, so that lines cross blocks), byte 1
// max_line (1 to 256). Every block is counted, read and parsed, as
// a stream does: no crash, no read outside the file; each line belongs to
// exactly one block (the counts add up to the file's lines), a block parses
// into as many lines as it counted, each with its 40 values, and every
// bucket lies in its vocabulary.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "base/log.h"
#include "fuzz/fuzz_util.h"
#include "storage/data_file.h"
#include "workloads/criteo1tb/criteo_blocks.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace batchd::criteo;  // NOLINT: the parser under test
  if (size < 2 || size - 2 > (8 << 10)) return 0;
  static const bool quiet = [] {
    batchd::SetLogLevel("error");  // damaged lines are the point here
    return true;
  }();
  (void)quiet;
  const uint64_t block_bytes = 64 * (1 + uint64_t(data[0] % 32));
  const uint64_t max_line = 1 + uint64_t(data[1]);
  const uint8_t* const file = data + 2;
  const uint64_t n = size - 2;
  batchd::fuzz::WriteScratchFile("day_0_00", file, n);
  static const std::shared_ptr<const batchd::DataRoot>* root = [] {
    absl::StatusOr<std::shared_ptr<const batchd::DataRoot>> r =
        batchd::DataRoot::Open(batchd::fuzz::ScratchDir());
    if (!r.ok()) batchd::fuzz::Fail(std::string(r.status().message()));
    return new std::shared_ptr<const batchd::DataRoot>(*std::move(r));
  }();
  absl::StatusOr<std::shared_ptr<BlockTable>> table =
      BlockTable::Create(*root, {"day_0_00"}, block_bytes, max_line);
  if (!table.ok()) batchd::fuzz::Fail(std::string(table.status().message()));
  // The file's lines: one starting at byte 0 and after each '\n' but the
  // last byte.
  uint64_t want = n > 0 ? 1 : 0;
  for (uint64_t i = 0; i + 1 < n; ++i) want += file[i] == '\n' ? 1 : 0;
  uint64_t counted = 0;
  std::string bytes;
  for (uint64_t b = 0; b < (*table)->num_blocks(); ++b) {
    absl::StatusOr<uint32_t> lines = (*table)->Lines(b);
    if (!lines.ok()) batchd::fuzz::Fail(std::string(lines.status().message()));
    counted += *lines;
    absl::Status s = (*table)->ReadBlock(b, &bytes);
    if (!s.ok()) batchd::fuzz::Fail(std::string(s.message()));
    absl::StatusOr<std::shared_ptr<const ParsedBlock>> parsed =
        (*table)->Parse(b, bytes, /*exact_ids=*/true);
    if (!parsed.ok()) {
      batchd::fuzz::Fail(std::string(parsed.status().message()));
    }
    const ParsedBlock& p = **parsed;
    if (p.lines != *lines || p.values.size() != uint64_t(p.lines) * kFields ||
        p.bad.size() != p.lines ||
        p.ids.size() != uint64_t(p.lines) * kCategorical) {
      batchd::fuzz::Fail(absl::StrCat((*table)->Describe(b), ": ", *lines,
                                      " lines counted, ", p.lines, " parsed"));
    }
    for (uint64_t i = 0; i < p.ids.size(); ++i) {
      if (uint64_t(p.ids[i]) >= kVocab[i % kCategorical]) {
        batchd::fuzz::Fail("an id past its vocabulary");
      }
    }
  }
  if (counted != want) {
    batchd::fuzz::Fail(
        absl::StrCat(counted, " lines in the blocks, ", want, " in the file"));
  }
  return 0;
}

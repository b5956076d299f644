// libFuzzer target for TFRecord framing (TFRecordFile::Open and Read) and
// the tf.train.Example records inside, as a TFDS shard is read: any file
// must give records or a Status, never a crash or a read past the file.
// Every record the reader returns is checked against a walk of the same
// bytes done here, from the framing grammar in tfrecord.h.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "base/coding.h"
#include "fuzz/fuzz_util.h"
#include "workloads/common/tf_example.h"
#include "workloads/common/tfrecord.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path =
      batchd::fuzz::WriteScratchFile("shard.tfrecord", data, size);
  auto file = batchd::TFRecordFile::Open(path);
  if (!file.ok()) return 0;
  // Open accepted the file, so it must be a whole number of records.
  uint64_t pos = 0;
  for (size_t i = 0; i < (*file)->size(); ++i) {
    if (size - pos < 16) batchd::fuzz::Fail("record header past the end");
    const uint64_t length = batchd::LoadLE64(data + pos);
    if (length > size - pos - 16) {
      batchd::fuzz::Fail(absl::StrCat("record ", i, " longer than the file"));
    }
    absl::StatusOr<std::string> record = (*file)->Read(i);
    if (record.ok()) {
      if (record->size() != length ||
          memcmp(record->data(), data + pos + 12, length) != 0) {
        batchd::fuzz::Fail(absl::StrCat("record ", i, " is not its bytes"));
      }
      (void)batchd::ParseExample(*record);
    }
    pos += 16 + length;
  }
  if (pos != size) batchd::fuzz::Fail("bytes after the last record");
  return 0;
}

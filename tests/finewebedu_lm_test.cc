// The finewebedu_lm workload's Arrow IPC stream reader against streams that
// pyarrow wrote (finewebedu_lm_streams.inc), and against every truncation
// and single-byte corruption of one: refused naming the file and the byte,
// never a crash or a read outside the file. Options and splits.
#include "workloads/finewebedu_lm/finewebedu_lm.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "gtest/gtest.h"
#include "workloads/finewebedu_lm/arrow_stream.h"

namespace batchd {
namespace {

#include "tests/finewebedu_lm_streams.inc"

// A descriptor of an in-memory file holding `bytes`.
class MemFile {
 public:
  explicit MemFile(const std::string& bytes)
      : fd_(memfd_create("arrow", 0)), size_(bytes.size()) {
    EXPECT_GE(fd_, 0);
    EXPECT_EQ(write(fd_, bytes.data(), bytes.size()), ssize_t(bytes.size()));
  }
  ~MemFile() { close(fd_); }
  absl::StatusOr<arrow::ColumnIndex> Index(
      const std::string& column = "input_ids") const {
    return arrow::IndexListColumn(fd_, size_, "shard.arrow", column);
  }
  int fd() const { return fd_; }

 private:
  int fd_;
  uint64_t size_;
};

template <size_t N>
std::string Bytes(const uint8_t (&a)[N]) {
  return std::string(reinterpret_cast<const char*>(a), N);
}

// The values of every batch, read back from the file.
std::vector<int64_t> Values(const MemFile& f, const arrow::ColumnIndex& idx) {
  std::vector<int64_t> out;
  for (const arrow::ColumnBatch& b : idx.batches) {
    std::string buf(b.values * idx.element_bytes, '\0');
    EXPECT_TRUE(arrow::ReadExact(f.fd(), "x", b.values_offset, &buf).ok());
    for (uint64_t i = 0; i < b.values; ++i) {
      int64_t v = 0;
      std::memcpy(&v, buf.data() + i * idx.element_bytes, idx.element_bytes);
      if (idx.element_bytes == 4) v = int32_t(v);
      out.push_back(v);
    }
  }
  return out;
}

const std::vector<int64_t> kTokens = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};

TEST(ArrowStreamTest, ReadsPyarrowInt32Lists) {
  MemFile f(Bytes(kInt32));
  absl::StatusOr<arrow::ColumnIndex> idx = f.Index();
  ASSERT_TRUE(idx.ok()) << idx.status();
  EXPECT_EQ(idx->element_bytes, 4);
  ASSERT_EQ(idx->batches.size(), 2u);
  EXPECT_EQ(idx->batches[0].rows, 2u);
  EXPECT_EQ(idx->batches[0].values, 5u);
  EXPECT_EQ(idx->batches[1].values, 5u);
  EXPECT_EQ(Values(f, *idx), kTokens);
}

TEST(ArrowStreamTest, PlacesTheColumnAfterOthersAndReadsInt64) {
  MemFile f(Bytes(kInt64AfterStrings));
  absl::StatusOr<arrow::ColumnIndex> idx = f.Index();
  ASSERT_TRUE(idx.ok()) << idx.status();
  EXPECT_EQ(idx->element_bytes, 8);
  EXPECT_EQ(Values(f, *idx), kTokens);
}

TEST(ArrowStreamTest, EmptyTableHasNoValues) {
  MemFile f(Bytes(kEmpty));
  absl::StatusOr<arrow::ColumnIndex> idx = f.Index();
  ASSERT_TRUE(idx.ok()) << idx.status();
  uint64_t values = 0;
  for (const auto& b : idx->batches) values += b.values;
  EXPECT_EQ(values, 0u);
}

void ExpectRefused(const std::string& bytes, const std::string& what) {
  MemFile f(bytes);
  absl::StatusOr<arrow::ColumnIndex> idx = f.Index();
  ASSERT_FALSE(idx.ok());
  const std::string msg(idx.status().message());
  EXPECT_NE(msg.find("shard.arrow"), std::string::npos) << msg;
  EXPECT_NE(msg.find("byte"), std::string::npos) << msg;
  EXPECT_NE(msg.find(what), std::string::npos) << msg;
}

TEST(ArrowStreamTest, RefusesWhatItDoesNotRead) {
  ExpectRefused(Bytes(kZstd), "compressed");
  ExpectRefused(Bytes(kFloat), "not a list of int32 or int64");
  ExpectRefused(Bytes(kDictionary), "dictionary");
  ExpectRefused(Bytes(kNoColumn), "no column input_ids");
  ExpectRefused("", "end-of-stream");
  ExpectRefused(std::string(16, '\xff'), "");
}

TEST(ArrowStreamTest, EveryTruncationIsRefusedNamingTheOffset) {
  const std::string whole = Bytes(kInt32);
  for (size_t n = 0; n < whole.size(); ++n) {
    MemFile f(whole.substr(0, n));
    absl::StatusOr<arrow::ColumnIndex> idx = f.Index();
    ASSERT_FALSE(idx.ok()) << "prefix of " << n << " bytes";
    EXPECT_NE(idx.status().message().find("shard.arrow"), std::string::npos);
    EXPECT_NE(idx.status().message().find("byte"), std::string::npos)
        << idx.status();
  }
}

TEST(ArrowStreamTest, CorruptBytesAreRefusedOrStayInBounds) {
  const std::string whole = Bytes(kInt32);
  int refused = 0;
  for (size_t i = 0; i < whole.size(); ++i) {
    for (uint8_t x : {uint8_t(0xff), uint8_t(0x80), uint8_t(0x01)}) {
      std::string bad = whole;
      bad[i] = char(uint8_t(bad[i]) ^ x);
      MemFile f(bad);
      absl::StatusOr<arrow::ColumnIndex> idx = f.Index();
      if (!idx.ok()) {
        ++refused;
        continue;
      }
      for (const auto& b : idx->batches) {  // what it found lies in the file
        ASSERT_LE(b.values_offset + b.values * idx->element_bytes, whole.size())
            << "byte " << i;
      }
    }
  }
  EXPECT_GT(refused, 0);
}

TEST(FineWebEduLmTest, RefusesBadOptionsAndSplits) {
  WorkloadConfig c;
  c.data_path = "/";
  c.split = "test";
  auto w = CreateFineWebEduLmWorkload(c);
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.status().message().find("unknown split 'test'"),
            std::string::npos)
      << w.status();
  c.split = "train";
  c.options = {{"eval_train_examples", "0"}};
  w = CreateFineWebEduLmWorkload(c);
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.status().message().find("eval_train_examples"),
            std::string::npos);
  c.options = {{"seq_len", "8"}};
  EXPECT_FALSE(CreateFineWebEduLmWorkload(c).ok());
  c.options = {};
  w = CreateFineWebEduLmWorkload(c);  // "/" holds no train/ shards
  ASSERT_FALSE(w.ok());
}

}  // namespace
}  // namespace batchd

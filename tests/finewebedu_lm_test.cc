// The finewebedu_lm workload's Arrow IPC stream reader against streams that
// pyarrow wrote (finewebedu_lm_streams.inc), and against every truncation
// and single-byte corruption of one: refused naming the file and the byte,
// never a crash or a read outside the file. Options and splits.
#include "workloads/finewebedu_lm/finewebedu_lm.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <string>
#include <vector>

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

// A flatbuffer laid out front to back (every offset points forward), for
// schemas pyarrow would not write.
class FlatWriter {
 public:
  FlatWriter() : b_(4, '\0') {}
  // A table of `slots` ({slot, value bytes}), its vtable just before it;
  // returns where it lies. at(slot) then gives where a slot's value lies.
  size_t Table(const std::vector<std::pair<int, std::string>>& slots) {
    int n = 0;
    for (const auto& s : slots) n = std::max(n, s.first + 1);
    std::string vt(4 + 2 * n, '\0');
    uint16_t size = 4;
    std::vector<uint16_t> offs(n, 0);
    for (const auto& s : slots) {
      offs[s.first] = size;
      size += uint16_t(s.second.size());
    }
    Put16(&vt, 0, uint16_t(vt.size()));
    Put16(&vt, 2, size);
    for (int i = 0; i < n; ++i) Put16(&vt, 4 + 2 * i, offs[i]);
    while ((b_.size() + vt.size()) % 4 != 0) b_.push_back('\0');
    b_ += vt;
    const size_t table = b_.size();
    std::string t(4, '\0');
    const int32_t soff = int32_t(vt.size());
    std::memcpy(t.data(), &soff, 4);
    for (const auto& s : slots) t += s.second;
    b_ += t;
    slots_.clear();
    for (const auto& s : slots) slots_[s.first] = table + offs[s.first];
    return table;
  }
  size_t at(int slot) const { return slots_.at(slot); }
  // A vector of n offsets (entry i at its place + 4 + 4i); returns where
  // it lies.
  size_t Vector(uint32_t n) {
    while (b_.size() % 4 != 0) b_.push_back('\0');
    const size_t at = b_.size();
    b_.append(reinterpret_cast<const char*>(&n), 4);
    b_.append(4 * n, '\0');
    return at;
  }
  // A string; returns where it lies.
  size_t String(const std::string& s) {
    while (b_.size() % 4 != 0) b_.push_back('\0');
    const size_t at = b_.size();
    const uint32_t n = uint32_t(s.size());
    b_.append(reinterpret_cast<const char*>(&n), 4);
    b_ += s;
    b_.push_back('\0');
    return at;
  }
  // Writes the offset at `from` to point at `to` (after it).
  void Point(size_t from, size_t to) {
    const uint32_t d = uint32_t(to - from);
    std::memcpy(b_.data() + from, &d, 4);
  }
  size_t size() const { return b_.size(); }
  // The message: marker, length, these bytes padded to 8, end of stream.
  std::string Stream() const {
    std::string m = b_;
    m.resize((m.size() + 7) / 8 * 8, '\0');
    const int32_t len = int32_t(m.size());
    std::string out("\xff\xff\xff\xff", 4);
    out.append(reinterpret_cast<const char*>(&len), 4);
    out += m;
    out.append("\xff\xff\xff\xff\0\0\0\0", 8);
    return out;
  }

  static std::string U8(uint8_t v) { return std::string(1, char(v)); }
  static std::string I16(int16_t v) {
    return std::string(reinterpret_cast<const char*>(&v), 2);
  }
  static std::string Off() { return std::string(4, '\0'); }

 private:
  static void Put16(std::string* s, size_t at, uint16_t v) {
    std::memcpy(s->data() + at, &v, 2);
  }
  std::string b_;
  std::map<int, size_t> slots_;
};

// A schema message (V5) whose first column is `levels` nested structs; in
// a DAG each struct's two children are one table, in a chain it has one.
// input_ids (list<int32>) follows.
std::string NestedSchema(int levels, bool dag) {
  FlatWriter w;
  const size_t msg = w.Table({{0, FlatWriter::I16(4)},
                              {1, FlatWriter::U8(1)},
                              {2, FlatWriter::Off()}});
  w.Point(0, msg);
  const size_t header = w.at(2);
  const size_t schema = w.Table({{1, FlatWriter::Off()}});
  w.Point(header, schema);
  const size_t fields_slot = w.at(1);
  const size_t fields = w.Vector(2);
  w.Point(fields_slot, fields);
  size_t refs[2] = {fields + 4, 0};  // what points at the next level
  int nrefs = 1;
  for (int level = 0; level <= levels; ++level) {
    const bool leaf = level == levels;
    const size_t f =
        w.Table({{2, FlatWriter::U8(leaf ? 2 : 13)}, {5, FlatWriter::Off()}});
    for (int r = 0; r < nrefs; ++r) w.Point(refs[r], f);
    const size_t kids_slot = w.at(5);
    nrefs = leaf ? 0 : dag ? 2 : 1;
    const size_t kids = w.Vector(uint32_t(nrefs));
    w.Point(kids_slot, kids);
    for (int r = 0; r < nrefs; ++r) refs[r] = kids + 4 + 4 * r;
  }
  // fields[1]: input_ids, a list of one int32 child.
  const size_t col = w.Table({{0, FlatWriter::Off()},
                              {2, FlatWriter::U8(12)},
                              {3, FlatWriter::Off()},
                              {5, FlatWriter::Off()}});
  w.Point(fields + 8, col);
  const size_t name_slot = w.at(0), list_slot = w.at(3), kids_slot = w.at(5);
  const size_t list = w.Table({});
  w.Point(list_slot, list);
  const size_t kids = w.Vector(1);
  w.Point(kids_slot, kids);
  const size_t item = w.Table({{2, FlatWriter::U8(2)}, {3, FlatWriter::Off()}});
  w.Point(kids + 4, item);
  const size_t int_slot = w.at(3);
  const int32_t bits = 32;
  const size_t int_table =
      w.Table({{0, std::string(reinterpret_cast<const char*>(&bits), 4)},
               {1, FlatWriter::U8(1)}});
  w.Point(int_slot, int_table);
  w.Point(name_slot, w.String("input_ids"));
  return w.Stream();
}

TEST(ArrowStreamTest, ASchemaThatIsADagIsRefusedAtOnce) {
  // Walked as a tree, 2^60 fields: the walk would never end.
  const std::string dag = NestedSchema(60, /*dag=*/true);
  EXPECT_LT(dag.size(), 4096u);
  ExpectRefused(dag, "reached twice (a schema is a tree)");
}

TEST(ArrowStreamTest, NestingIsBoundedAndATreeIsWalked) {
  ExpectRefused(NestedSchema(arrow::kMaxNestingDepth + 1, /*dag=*/false),
                "nested more than 64 levels");
  // Within the bound, the chain is counted and the stream read to its end
  // (no record batch: an empty index).
  MemFile f(NestedSchema(10, /*dag=*/false));
  absl::StatusOr<arrow::ColumnIndex> idx = f.Index();
  ASSERT_TRUE(idx.ok()) << idx.status();
  EXPECT_TRUE(idx->batches.empty());
}

TEST(ArrowStreamTest, MetadataClaimsAreBoundedBeforeAnythingIsRead) {
  // A sparse 2 GiB file (8 bytes of it on disk) whose first message claims
  // 2 GiB of metadata: refused from the claim, nothing allocated for it.
  struct rusage before;
  getrusage(RUSAGE_SELF, &before);
  for (const int32_t claim : {int32_t(0x7ffffff8), int32_t(2 << 20)}) {
    std::string prefix("\xff\xff\xff\xff", 4);
    prefix.append(reinterpret_cast<const char*>(&claim), 4);
    MemFile f(prefix);
    ASSERT_EQ(ftruncate(f.fd(), off_t(claim) + 8), 0);
    absl::StatusOr<arrow::ColumnIndex> idx = arrow::IndexListColumn(
        f.fd(), uint64_t(claim) + 8, "sparse.arrow", "input_ids");
    ASSERT_FALSE(idx.ok());
    const std::string msg(idx.status().message());
    EXPECT_NE(msg.find("sparse.arrow: Arrow IPC message at byte 0"),
              std::string::npos)
        << msg;
    EXPECT_NE(msg.find("over the limit of 1048576"), std::string::npos) << msg;
  }
  struct rusage after;
  getrusage(RUSAGE_SELF, &after);
  EXPECT_LT(after.ru_maxrss - before.ru_maxrss, 256 * 1024)  // KiB
      << "peak RSS grew by " << (after.ru_maxrss - before.ru_maxrss) << " KiB";
}

TEST(ArrowStreamTest, RecordBatchesComeOutOfOneBudget) {
  MemFile f(Bytes(kInt32));  // two record batches
  arrow::BatchBudget budget(3);
  EXPECT_TRUE(arrow::IndexListColumn(f.fd(), sizeof(kInt32), "a.arrow",
                                     "input_ids", &budget)
                  .ok());
  // One batch left: a second shard of the same split takes it, then fails
  // on its second, naming the file, the message and the limit.
  absl::StatusOr<arrow::ColumnIndex> idx = arrow::IndexListColumn(
      f.fd(), sizeof(kInt32), "b.arrow", "input_ids", &budget);
  ASSERT_FALSE(idx.ok());
  EXPECT_EQ(idx.status().code(), absl::StatusCode::kResourceExhausted);
  const std::string msg(idx.status().message());
  EXPECT_NE(msg.find("b.arrow: Arrow IPC message at byte "), std::string::npos)
      << msg;
  EXPECT_NE(msg.find("over the limit of 3 per split"), std::string::npos)
      << msg;
}

TEST(FineWebEduLmTest, RefusesBadOptionsAndSplits) {
  WorkloadConfig c;
  c.data_path = "/";
  c.split = "test";
  auto w = CreateWorkload(kFineWebEduLmWorkload, c);
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.status().message().find("unknown split 'test'"),
            std::string::npos)
      << w.status();
  c.split = "train";
  c.options = {{"eval_train_examples", "0"}};
  w = CreateWorkload(kFineWebEduLmWorkload, c);
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.status().message().find("eval_train_examples"),
            std::string::npos);
  c.options = {{"seq_len", "8"}};
  EXPECT_FALSE(CreateWorkload(kFineWebEduLmWorkload, c).ok());
  c.options = {};
  w = CreateWorkload(kFineWebEduLmWorkload, c);  // "/" holds no train/ shards
  ASSERT_FALSE(w.ok());
}

// Each shard of a split stays open while its stream lives, and the daemon's
// descriptors are every user's: a folder of more shards than a split may
// hold (empty files, named right) is refused from its listing, before one
// is opened, however few descriptors are left.
TEST(FineWebEduLmTest, ASplitOfMoreShardsThanItMayHoldIsRefusedUnopened) {
  char root[] = "/tmp/finewebedu-shards-XXXXXX";
  ASSERT_NE(mkdtemp(root), nullptr);
  const std::string train = std::string(root) + "/train";
  ASSERT_EQ(mkdir(train.c_str(), 0755), 0);
  constexpr int kShards = 1025;
  for (int i = 0; i < kShards; ++i) {
    char name[64];
    snprintf(name, sizeof(name), "/data-%05d-of-%05d.arrow", i, kShards);
    const int fd = open((train + name).c_str(), O_CREAT | O_WRONLY, 0644);
    ASSERT_GE(fd, 0);
    close(fd);
  }
  rlimit was{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &was), 0);
  rlimit few = was;
  few.rlim_cur = std::min<rlim_t>(was.rlim_cur, 512);
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &few), 0);
  WorkloadConfig c;
  c.data_path = root;
  c.split = "train";
  auto w = CreateWorkload(kFineWebEduLmWorkload, c);
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &was), 0);
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.status().code(), absl::StatusCode::kInvalidArgument)
      << w.status();
  EXPECT_NE(w.status().message().find("more than 1024 shards"),
            std::string::npos)
      << w.status();
  for (int i = 0; i < kShards; ++i) {
    char name[64];
    snprintf(name, sizeof(name), "/data-%05d-of-%05d.arrow", i, kShards);
    unlink((train + name).c_str());
  }
  rmdir(train.c_str());
  rmdir(root);
}

}  // namespace
}  // namespace batchd

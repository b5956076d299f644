// The criteo1tb workload's parts: TF's float log, a line's values,
// options and splits, blocks (lines across block bounds, damaged lines,
// empty files, no final newline), padding and determinism of FillItem.
#include "workloads/criteo1tb/criteo1tb.h"

#include <farmhash.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/casts.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "storage/data_file.h"
#include "tests/testutil.h"
#include "workloads/criteo1tb/criteo_blocks.h"
#include "workloads/criteo1tb/criteo_line.h"
#include "workloads/packed_schedule.h"

namespace batchd {
namespace {

using criteo::ParsedLine;
using criteo::ParseLine;
using testutil::TempDir;
using testutil::WriteFile;

uint32_t Bits(float f) { return absl::bit_cast<uint32_t>(f); }
float FromBits(uint32_t u) { return absl::bit_cast<float>(u); }

// An input and the bits of what TensorFlow computes of it.
struct BitsCase {
  float x;
  uint32_t want;
};

// f(x) is bit for bit TensorFlow's result, for each case.
void ExpectBitExact(const std::function<float(float)>& f,
                    std::initializer_list<BitsCase> cases) {
  for (const BitsCase& c : cases) EXPECT_EQ(Bits(f(c.x)), c.want) << c.x;
}

TEST(CriteoLog, BitExactAgainstTensorFlow) {
  // (x, bits of tf.math.log(relu(x) + 1)) from TF 2.21 on CPU.
  ExpectBitExact([](float x) { return criteo::TfLog(x + 1.0f); },
                 {{0, 0},
                  {1, 1060205080},
                  {6, 1073288086},
                  {36, 1080498504},  // logf(37) is 1 ulp lower here
                  {178, 1084620561},
                  {200, 1084863660},
                  {999999, 1096617045},
                  {FromBits(1266681552), 1099240959},
                  {FromBits(1328730924), 1101960021},
                  {FromBits(2132180564), 1118855703}});
  EXPECT_NE(Bits(criteo::TfLog(37.0f)), Bits(logf(37.0f)));
}

TEST(CriteoLine, FastModIsTheRemainder) {
  uint64_t x = 0x9e3779b97f4a7c15ull;
  for (int c = 0; c < criteo::kCategorical; ++c) {
    const criteo::FastMod mod(criteo::kVocab[c]);
    for (uint64_t v : {uint64_t(0), uint64_t(1), criteo::kVocab[c] - 1,
                       criteo::kVocab[c], ~uint64_t(0), ~uint64_t(0) - 1}) {
      ASSERT_EQ(mod(v), v % criteo::kVocab[c]) << v;
    }
    for (int i = 0; i < 200000; ++i) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      ASSERT_EQ(mod(x), x % criteo::kVocab[c]) << x;
    }
  }
}

std::string Line(const std::vector<std::string>& fields) {
  return absl::StrJoin(fields, "\t");
}

std::vector<std::string> GoodFields() {
  std::vector<std::string> f = {"1"};
  for (int i = 0; i < 13; ++i) f.push_back(absl::StrCat(i * 3));
  for (int i = 0; i < 26; ++i) f.push_back("68fd1e64");
  return f;
}

TEST(CriteoLine, ValuesAsAlgoPerf) {
  std::vector<std::string> f = GoodFields();
  f[1] = "";     // missing
  f[2] = "-1";   // na_value
  f[3] = "-3";   // kept, then max(x, 0)
  f[14] = "";    // categorical missing: "00000000"
  f[39] = "-1";  // categorical na_value
  const std::string line = Line(f);
  ParsedLine p;
  ASSERT_EQ(ParseLine(line.data(), line.size(), &p), criteo::LineError::kNone);
  EXPECT_EQ(p.label, 1.0f);
  EXPECT_EQ(p.dense[0], 0.0f);
  EXPECT_EQ(p.dense[1], 0.0f);
  EXPECT_EQ(p.dense[2], 0.0f);
  EXPECT_EQ(p.dense[3], criteo::TfLog(10.0f));
  // pyfarmhash: fingerprint64("68fd1e640") = 9066014191666271819,
  // fingerprint64("0000000025") = 10220210890468929800.
  std::vector<std::string> g = GoodFields();
  const std::string good = Line(g);
  ASSERT_EQ(ParseLine(good.data(), good.size(), &p), criteo::LineError::kNone);
  EXPECT_EQ(p.ids[0], 9066014191666271819ull % criteo::kVocab[0]);
  ASSERT_EQ(ParseLine(line.data(), line.size(), &p), criteo::LineError::kNone);
  EXPECT_EQ(p.ids[25], 10220210890468929800ull % criteo::kVocab[25]);
}

// Every path of the parse (8 digits or fewer, longer numbers, signs,
// exponents, hexadecimal, white space, infinities, NaNs, subnormals; 8
// bytes, empty, "-1", other lengths, upper case) against the rule itself:
// decode_csv's float (strtof's), relu with subnormals flushed, TF's log1p
// and FarmHash Fingerprint64 of field + column modulo the vocabulary, also
// where a bucket comes from the parse's memo of the small columns.
TEST(CriteoLine, FastPathsFollowTheRule) {
  const std::vector<std::string> dense = {"",
                                          "-1",
                                          "0",
                                          "7",
                                          "007",
                                          "65535",
                                          "65536",
                                          "12345678",
                                          "123456789",
                                          "4294967296",
                                          "-2",
                                          "+5",
                                          "1e3",
                                          "99999999999",
                                          "3.5",
                                          "-0",
                                          "16777217",
                                          "99999999",
                                          "1e-40",
                                          "1e-50",
                                          "1e39",
                                          "-1e39",
                                          "inf",
                                          "nan",
                                          "-nan",
                                          "0x10",
                                          " 5",
                                          "5 ",
                                          "1.17549435e-38",
                                          "3.4e38"};
  const std::vector<std::string> cats = {"",          "-1",
                                         "00000000",  "68fd1e64",
                                         "ffffffff",  "68FD1E64",
                                         "68fd1e6",   "68fd1e64a",
                                         "zzzzzzzz",  "0",
                                         "a",         "abcdefghijklmno",
                                         "-10000000", "1234567890123456"};
  uint64_t x = 0x9e3779b97f4a7c15ull;
  auto next = [&x] {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return x;
  };
  std::vector<std::string> lines;
  std::vector<std::vector<uint64_t>> ids;
  for (int n = 0; n < 20000; ++n) {
    std::vector<std::string> f = {n % 3 == 0 ? "" : absl::StrCat(n % 2)};
    if (n % 7 == 0) f[0] = dense[next() % dense.size()];
    for (int i = 0; i < 13; ++i) {
      f.push_back(next() % 2 == 0 ? dense[next() % dense.size()]
                                  : absl::StrCat(next() % 100000000));
    }
    for (int i = 0; i < 26; ++i) {
      f.push_back(next() % 4 == 0 ? cats[next() % cats.size()]
                                  : absl::StrFormat("%08x", next() >> 32));
    }
    const std::string line = Line(f);
    SCOPED_TRACE(line);
    float want[1 + 13], counts[13];
    for (int i = 0; i < 14; ++i) {
      const std::string& v = f[i];
      const float parsed =
          v.empty() || v == "-1" ? 0.0f : std::strtof(v.c_str(), nullptr);
      if (i == 0) {
        want[0] = parsed;
        continue;
      }
      counts[i - 1] = parsed;
      const float relu =
          parsed >= 1.17549435e-38f || parsed != parsed ? parsed : 0.0f;
      want[i] = criteo::TfLog1p(relu);
    }
    uint64_t want_ids[26];
    for (int i = 0; i < 26; ++i) {
      std::string v = f[14 + i];
      if (v.empty() || v == "-1") v = "00000000";
      v += std::to_string(i);
      want_ids[i] = util::Fingerprint64(v.data(), v.size()) % criteo::kVocab[i];
    }
    ParsedLine p;
    ASSERT_EQ(ParseLine(line.data(), line.size(), &p),
              criteo::LineError::kNone);
    EXPECT_EQ(Bits(p.label), Bits(want[0]));
    for (int i = 0; i < 13; ++i) {
      EXPECT_EQ(Bits(p.dense[i]), Bits(want[1 + i])) << i;
      EXPECT_EQ(Bits(p.counts[i]), Bits(counts[i])) << i;
    }
    for (int i = 0; i < 26; ++i) ASSERT_EQ(p.ids[i], want_ids[i]) << i;
    lines.push_back(line);
    ids.emplace_back(want_ids, want_ids + 26);
  }
  // And each line again: the small columns' buckets now from the parse's
  // memo (20,000 values of a column collide in its slots).
  for (size_t k = 0; k < lines.size(); ++k) {
    ParsedLine p;
    ASSERT_EQ(ParseLine(lines[k].data(), lines[k].size(), &p),
              criteo::LineError::kNone);
    ASSERT_EQ(std::vector<uint64_t>(p.ids, p.ids + 26), ids[k]) << lines[k];
  }
}

// TF's float32 log1p (AlgoPerf's graph computes log(relu(x) + 1) as
// log1p): x * (log(u) / (u - 1)) with u = x + 1, x itself where u is 1 or
// infinite; 1 ulp from log(x + 1) on ~3 % of counts.
TEST(CriteoLog, Log1pBitExactAgainstTensorFlow) {
  // (x, bits of AlgoPerf's _parse_example_fn through tf.data, TF 2.21).
  ExpectBitExact(criteo::TfLog1p, {{0, 0},
                                   {20, 0x4042d974},
                                   {21, 0x4045d3a5},
                                   {159, 0x40a267d4},
                                   {616556339.0f, 0x41a1ead3},
                                   {1e-30f, 0x0da24260},
                                   {1000, 0x40dd1485},
                                   {16, 0x4035535e},
                                   {3.4e38f, 0x42b171ab},
                                   {FromBits(0x7f800000), 0x7f800000},
                                   {FromBits(0x7fc00000), 0x7fc00000}});
  // Where log(x + 1) and the graph's log1p part.
  for (float v : {20.0f, 21.0f, 159.0f}) {
    EXPECT_NE(Bits(criteo::TfLog1p(v)), Bits(criteo::TfLog(v + 1.0f))) << v;
  }
  EXPECT_EQ(Bits(criteo::Relu(-0.0f)), 0u);
  EXPECT_EQ(Bits(criteo::Relu(FromBits(0x116c2))), 0u);  // subnormal
  EXPECT_EQ(Bits(criteo::Relu(FromBits(0xffc00000))), 0xffc00000u);
  // The scalar rows (a batch's last n mod 8): relu keeps -0, subnormals
  // are zeros of their sign (TF's results, rows 8..11 of a batch of 12).
  ExpectBitExact(criteo::ScalarDense, {{-0.0f, 0x80000000},
                                       {-5, 0},
                                       {1e-40f, 0},
                                       {-1e-40f, 0x80000000},
                                       {0, 0},
                                       {1e-30f, 0x0da24260},
                                       {FromBits(0x7f800000), 0x7f800000},
                                       {FromBits(0xffc00000), 0xffc00000}});
  // Elsewhere the C library's log1pf, which parts from the vectorised one.
  int apart = 0;
  for (int v = 0; v < 4000; ++v) {
    const float x = static_cast<float>(v);
    EXPECT_EQ(Bits(criteo::ScalarDense(x)), Bits(log1pf(x))) << v;
    apart += Bits(criteo::ScalarDense(x)) != Bits(criteo::Dense(x));
  }
  EXPECT_GT(apart, 100);
}

TEST(CriteoLine, DamagedLinesAreErrors) {
  std::vector<std::string> f = GoodFields();
  f.resize(12);
  std::string s = Line(f);
  ParsedLine p;
  EXPECT_EQ(ParseLine(s.data(), s.size(), &p), criteo::LineError::kFieldCount);
  f = GoodFields();
  f.push_back("x");
  s = Line(f);
  EXPECT_EQ(ParseLine(s.data(), s.size(), &p), criteo::LineError::kFieldCount);
  f = GoodFields();
  f[5] = "12a";
  s = Line(f);
  EXPECT_EQ(ParseLine(s.data(), s.size(), &p), criteo::LineError::kNotANumber);
  EXPECT_EQ(ParseLine("", 0, &p), criteo::LineError::kFieldCount);
}

struct Set {
  TempDir dir{"criteo"};
  std::vector<std::string> lines;  // validation's, in order
};

// day_0_00 (train) and validation files day_23_19 (many lines, several
// 64 KiB blocks), day_23_20 (damaged lines, no final newline), day_23_21
// (empty).
void MakeSet(Set* s) {
  std::string big;
  for (int i = 0; i < 3000; ++i) {
    std::vector<std::string> f = GoodFields();
    f[0] = i % 2 ? "1" : "0";
    f[1] = absl::StrCat(i);
    f[14] = absl::StrCat(absl::Hex(i * 7919, absl::kZeroPad8));
    s->lines.push_back(Line(f));
    big += s->lines.back() + "\n";
  }
  WriteFile(s->dir.Path("day_0_00"), big.substr(0, 20000));
  WriteFile(s->dir.Path("day_23_19"), big);
  std::vector<std::string> twelve = GoodFields();
  twelve.resize(12);
  const std::string bad = Line(twelve);
  s->lines.push_back(bad);
  s->lines.push_back(s->lines[0]);
  WriteFile(s->dir.Path("day_23_20"), bad + "\n" + s->lines[0]);
  WriteFile(s->dir.Path("day_23_21"), "");
}

absl::StatusOr<std::unique_ptr<Workload>> Make(
    const Set& s, const std::string& split,
    std::map<std::string, std::string> options = {{"block_kib", "64"}}) {
  return CreateWorkload(
      kCriteo1TbWorkload,
      testutil::StreamConfig(s.dir.path(), split, std::move(options)));
}

TEST(Criteo1Tb, RefusesBadOptionsAndSplits) {
  Set s;
  MakeSet(&s);
  absl::StatusOr<std::unique_ptr<Workload>> w = Make(s, "bogus");
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.status().message().find("bogus"), std::string::npos);
  w = Make(s, "train", {{"block_kib", "1"}});
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.status().message().find("block_kib"), std::string::npos);
  w = Make(s, "train", {{"nope", "1"}});
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.status().message().find("nope"), std::string::npos);
  w = Make(s, "test");  // no day_23_00 .. 18
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.status().message().find("test"), std::string::npos);
}

TEST(CriteoBlocks, ASplitOfSparseGiantsIsRefusedBeforeItsTableIsKept) {
  // Blocks of 1 byte, so that a sparse file of 32 MiB is past the limit.
  TempDir dir{"criteo-blocks"};
  WriteFile(dir.Path("day_0_00"), "1\t2\n");
  WriteFile(dir.Path("day_0_01"), "");
  ASSERT_EQ(truncate(dir.Path("day_0_01").c_str(), off_t(criteo::kMaxBlocks)),
            0);
  absl::StatusOr<std::shared_ptr<const DataRoot>> root =
      DataRoot::Open(dir.path());
  ASSERT_TRUE(root.ok()) << root.status();
  absl::StatusOr<std::shared_ptr<criteo::BlockTable>> t =
      criteo::BlockTable::Create(*root, {"day_0_00", "day_0_01"}, 1, 128);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(t.status().message().find(
                "files up to day_0_01 hold 33554436 bytes, over 33554432 "
                "blocks of 1 bytes"),
            std::string::npos)
      << t.status();
  // At the limit, the table is kept.
  ASSERT_EQ(
      truncate(dir.Path("day_0_01").c_str(), off_t(criteo::kMaxBlocks) - 4), 0);
  t = criteo::BlockTable::Create(*root, {"day_0_00", "day_0_01"}, 1, 128);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ((*t)->num_blocks(), criteo::kMaxBlocks);
}

struct Row {
  std::vector<uint8_t> inputs = std::vector<uint8_t>(39 * 4);
  float target = -1, weight = -1;
  uint8_t* out[3];
  Row() {
    out[0] = inputs.data();
    out[1] = reinterpret_cast<uint8_t*>(&target);
    out[2] = reinterpret_cast<uint8_t*>(&weight);
  }
};

TEST(Criteo1Tb, ValidationLinesAcrossBlocksDamagedAndPadding) {
  Set s;
  MakeSet(&s);
  absl::StatusOr<std::unique_ptr<Workload>> w = Make(s, "validation");
  ASSERT_TRUE(w.ok()) << w.status();
  ASSERT_EQ((*w)->num_examples(), s.lines.size());
  WorkloadCounters counters;
  for (uint64_t i = 0; i < s.lines.size(); ++i) {
    Row r;
    ItemRef item{0, 0, i, i, true};
    ASSERT_TRUE((*w)->FillItem(item, r.out, &counters).ok()) << i;
    ParsedLine p;
    const bool ok = ParseLine(s.lines[i].data(), s.lines[i].size(), &p) ==
                    criteo::LineError::kNone;
    ASSERT_EQ(r.weight, ok ? 1.0f : 0.0f) << i;
    if (!ok) continue;
    EXPECT_EQ(r.target, p.label) << i;
    float want[39];
    std::memcpy(want, p.dense, sizeof(p.dense));
    for (int c = 0; c < 26; ++c) want[13 + c] = float(p.ids[c]);
    ASSERT_EQ(std::memcmp(r.inputs.data(), want, sizeof(want)), 0) << i;
  }
  EXPECT_EQ(counters.decode_errors.load(), 1u);
  Row pad;
  ItemRef padding{0, 0, s.lines.size(), 0, false};
  ASSERT_TRUE((*w)->FillItem(padding, pad.out, nullptr).ok());
  EXPECT_EQ(pad.weight, 0.0f);
  EXPECT_EQ(pad.target, 0.0f);
  EXPECT_EQ(pad.inputs, std::vector<uint8_t>(39 * 4, 0));
}

TEST(Criteo1Tb, FillIsDeterministicAcrossThreads) {
  Set s;
  MakeSet(&s);
  absl::StatusOr<std::unique_ptr<Workload>> w = Make(s, "validation");
  ASSERT_TRUE(w.ok()) << w.status();
  std::vector<Row> a(200), b(200);
  auto fill = [&](std::vector<Row>* rows, bool reverse) {
    for (int k = 0; k < 200; ++k) {
      const int i = reverse ? 199 - k : k;
      ItemRef item{0, 0, uint64_t(i * 13), uint64_t(i * 13), true};
      ASSERT_TRUE((*w)->FillItem(item, (*rows)[i].out, nullptr).ok());
    }
  };
  std::thread t1([&] { fill(&a, false); });
  std::thread t2([&] { fill(&b, true); });
  t1.join();
  t2.join();
  for (int i = 0; i < 200; ++i) EXPECT_EQ(a[i].inputs, b[i].inputs) << i;
}

// A cursor carries the rows before its window: a fresh workload finds its
// row without counting earlier windows, and refuses a cursor whose rows
// cannot be (rows before window 0, or disagreeing with the epoch's count).
TEST(Criteo1Tb, CursorsCarryTheRowsBeforeTheirWindow) {
  Set s;
  MakeSet(&s);
  WriteFile(s.dir.Path("day_1_00"), [&] {
    std::string t;
    for (int i = 0; i < 3000; ++i) t += s.lines[i % 3000] + "\n";
    return t;
  }());
  const std::map<std::string, std::string> o = {{"block_kib", "64"},
                                                {"window_blocks", "1"}};
  absl::StatusOr<std::unique_ptr<Workload>> a = Make(s, "train", o);
  absl::StatusOr<std::unique_ptr<Workload>> b = Make(s, "train", o);
  ASSERT_TRUE(a.ok() && b.ok());
  auto* pa = dynamic_cast<const RowPacking*>(a->get());
  auto* pb = dynamic_cast<const RowPacking*>(b->get());
  ASSERT_TRUE(pa != nullptr && pb != nullptr);
  const EpochOrder order = ShuffledOrder((*a)->num_examples(), 3, 0);
  absl::StatusOr<uint64_t> rows = pa->RowsInEpoch(order);
  ASSERT_TRUE(rows.ok()) << rows.status();
  const uint64_t m = 1 * (64 * 1024 / 2 + 1);
  for (uint64_t row : {uint64_t(0), *rows / 2, *rows - 1}) {
    absl::StatusOr<RowCursor> c = pa->CursorOfRow(order, row);
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ(c->row, row);
    absl::StatusOr<uint64_t> back = pb->RowAtCursor(order, *c, nullptr);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(*back, row);
    absl::StatusOr<RowCursor> again = pb->CursorOfRow(order, row);
    ASSERT_TRUE(again.ok()) << again.status();
    EXPECT_EQ(again->window, c->window);
  }
  // Rows before window 0.
  EXPECT_FALSE(pb->RowAtCursor(order, RowCursor{0, 3, 10}, nullptr).ok());
  // The last row's window, with one row too many before it.
  absl::StatusOr<RowCursor> last = pa->CursorOfRow(order, *rows - 1);
  RowCursor bad = *last;
  bad.row += 1;
  absl::Status st = pb->RowAtCursor(order, bad, nullptr).status();
  EXPECT_TRUE(absl::IsInvalidArgument(st)) << st;
  // A window past the split's.
  EXPECT_FALSE(pb->CheckCursor(0, RowCursor{0, 1000 * m, 0}).ok());
}

}  // namespace
}  // namespace batchd

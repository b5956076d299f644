// What a workload declares (workloads/workload_entry.h) and the prologue
// CreateWorkload runs from it: options parsed against the entry's table
// (strict numbers, bounds and choices named in the errors, defaults), the
// split against its splits, the data root opened once with the stream's
// permissions and limit, all before the factory and as the request's work;
// the help text made from the table; and whether an epoch can hold a
// global batch, which the schedule answers (rows or examples).
#include "workloads/workload_entry.h"

#include <map>
#include <memory>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testutil.h"
#include "workloads/packed_schedule.h"
#include "workloads/registry.h"

namespace batchd {
namespace {

using ::testing::HasSubstr;

constexpr const char* kColours[] = {"red", "green"};
constexpr OptionSpec kOptions[] = {
    UintOption("size", 8, 1, 4096, "a size"),
    UintOption("any", 5, 0, UINT64_MAX, "any count"),
    NumberOption("ratio", 1.25, 1, 8, "a ratio"),
    ChoiceOption("colour", "red", kColours, "a colour"),
    TextOption("name", "", "a name"),
    EvalTrainExamples(1000),
};

absl::StatusOr<OptionValues> Parse(std::map<std::string, std::string> given) {
  return OptionValues::Parse("w", kOptions, given);
}

TEST(OptionValues, TakeTheDefaultsOfTheTable) {
  absl::StatusOr<OptionValues> v = Parse({});
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->Uint("size"), 8u);
  EXPECT_EQ(v->Number("ratio"), 1.25);
  EXPECT_EQ(v->Text("colour"), "red");
  EXPECT_EQ(v->Text("name"), "");
  EXPECT_EQ(v->Uint("eval_train_examples"), 1000u);
  EXPECT_FALSE(v->Given("size"));
  v = Parse(
      {{"size", "4096"}, {"ratio", "8"}, {"colour", "green"}, {"name", "x y"}});
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->Uint("size"), 4096u);
  EXPECT_EQ(v->Number("ratio"), 8.0);
  EXPECT_EQ(v->Text("colour"), "green");
  EXPECT_EQ(v->Text("name"), "x y");
  EXPECT_TRUE(v->Given("size"));
}

TEST(OptionValues, RefuseWhatTheTableDoesNotAllowNamingIt) {
  EXPECT_EQ(Parse({{"sise", "1"}}).status().message(),
            "w: unknown option 'sise' (known: size, any, ratio, colour, "
            "name, eval_train_examples)");
  EXPECT_EQ(Parse({{"size", "4097"}}).status().message(),
            "w: option size='4097' is not an integer in [1, 4096]");
  EXPECT_EQ(Parse({{"any", "x"}}).status().message(),
            "w: option any='x' is not an unsigned integer");
  EXPECT_EQ(Parse({{"ratio", "0.5"}}).status().message(),
            "w: option ratio='0.5' is not a number in [1, 8]");
  EXPECT_EQ(Parse({{"colour", "blue"}}).status().message(),
            "w: option colour='blue' is not one of red, green");
  // Numbers are digits alone.
  for (const char* bad : {" 8", "8\n", "+8", "-0", "0x10", "", "1e3"}) {
    SCOPED_TRACE(bad);
    EXPECT_EQ(Parse({{"size", bad}}).status().code(),
              absl::StatusCode::kInvalidArgument);
  }
  for (const char* bad : {"inf", "nan", " 2", ""}) {
    SCOPED_TRACE(bad);
    EXPECT_EQ(Parse({{"ratio", bad}}).status().code(),
              absl::StatusCode::kInvalidArgument);
  }
  absl::StatusOr<OptionValues> v = Parse({{"size", "9"}});
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->Invalid("size", "is odd").message(),
            "w: option size='9' is odd");
}

TEST(OptionSpec, PrintsItsDefaultAndBoundsAsHelpShowsThem) {
  EXPECT_EQ(OptionDefault(kOptions[0]), "8");
  EXPECT_EQ(OptionBounds(kOptions[0]), "1 .. 4096");
  EXPECT_EQ(OptionDefault(kOptions[2]), "1.25");
  EXPECT_EQ(OptionBounds(kOptions[2]), "1 .. 8");
  EXPECT_EQ(OptionBounds(kOptions[3]), "red, green");
  EXPECT_EQ(OptionBounds(kOptions[4]), "");
  EXPECT_EQ(OptionBounds(kOptions[5]), "1 .. 2^40");
}

// A factory that reports what the prologue handed it.
struct Seen {
  bool called = false;
  Split split = Split::kTest;
  uint64_t size = 0;
  std::shared_ptr<const DataRoot> root;
  uint64_t owner = 0;
};
Seen seen;

absl::StatusOr<std::unique_ptr<Workload>> Record(const WorkloadContext& c) {
  seen.called = true;
  seen.split = c.split;
  seen.size = c.options.Uint("size");
  seen.root = c.root;
  seen.owner = CurrentWork().owner;
  return absl::UnavailableError("recorded");
}

constexpr Split kSplits[] = {Split::kTrain, Split::kValidation};
const WorkloadEntry kFiles = {"files", "reads files", kSplits, kOptions,
                              Record};
const WorkloadEntry kNone = {"none",   "reads nothing", kSplits,
                             kOptions, Record,          /*reads_files=*/false};

TEST(CreateWorkload, ParsesOptionsThenTheSplitThenOpensTheRootOnce) {
  testutil::TempDir dir("entry");
  WorkloadConfig c;
  c.data_path = "/nonexistent-batchd-data";
  c.split = "test";
  c.options = {{"size", "0"}};
  seen = Seen();
  // Options first, then the split, then the data: each refused before the
  // factory runs.
  EXPECT_THAT(CreateWorkload(kFiles, c).status().message(),
              HasSubstr("files: option size='0'"));
  c.options.clear();
  EXPECT_EQ(CreateWorkload(kFiles, c).status().message(),
            "files: unknown split 'test' (known: train, validation)");
  c.split = "val";  // a spelling of validation
  EXPECT_NE(CreateWorkload(kFiles, c).status().message(), "recorded");
  EXPECT_FALSE(seen.called);  // the root could not be opened
  // The root: data_root, with the stream's limit; the work: the request's.
  c.data_root = dir.path();
  c.data_path = dir.path();
  c.max_data_file_bytes = 12345;
  c.work = WorkContext{4321, nullptr};
  c.options = {{"size", "16"}};
  EXPECT_EQ(CreateWorkload(kFiles, c).status().message(), "recorded");
  ASSERT_TRUE(seen.called);
  EXPECT_EQ(seen.split, Split::kValidation);
  EXPECT_EQ(seen.size, 16u);
  ASSERT_NE(seen.root, nullptr);
  EXPECT_EQ(seen.root->max_file_bytes(), 12345u);
  EXPECT_EQ(seen.owner, 4321u);
  // An entry that reads nothing gets no root, and needs no data path.
  seen = Seen();
  c.data_root.clear();
  c.data_path.clear();
  EXPECT_EQ(CreateWorkload(kNone, c).status().message(), "recorded");
  EXPECT_TRUE(seen.called);
  EXPECT_EQ(seen.root, nullptr);
}

TEST(WorkloadHelp, ListsEachEntrysSplitsAndOptionsWithDefaultsAndBounds) {
  const WorkloadEntry table[] = {kFiles, kNone};
  const std::string help = WorkloadHelp(table);
  EXPECT_THAT(help, HasSubstr("  files  reads files\n"
                              "      splits: train, validation\n"
                              "      size=8 (1 .. 4096): a size\n"));
  EXPECT_THAT(help, HasSubstr("      colour=red (red, green): a colour\n"));
  EXPECT_THAT(help, HasSubstr("      name=\"\": a name\n"));
  EXPECT_THAT(help, HasSubstr("  none   reads nothing\n"));
}

// Ten rows an epoch, each example `rows` of them at most.
class TenRows : public RowPacking {
 public:
  explicit TenRows(uint64_t rows) : rows_(rows) {}
  absl::StatusOr<uint64_t> RowsInEpoch(const EpochOrder&) const override {
    return 10;
  }
  absl::StatusOr<RowCursor> CursorOfRow(const EpochOrder& o,
                                        uint64_t row) const override {
    return RowCursor{o.epoch, 0, row};
  }
  absl::StatusOr<uint64_t> RowAtCursor(const EpochOrder&, const RowCursor& c,
                                       const StopFlag*) const override {
    return c.row;
  }
  uint64_t max_rows_per_example() const override { return rows_; }

 private:
  const uint64_t rows_;
};

TEST(Schedules, SayWhetherAnEpochCanHoldAGlobalBatch) {
  // 5 examples, a global batch of 8: one example an item holds none.
  absl::StatusOr<Sampler> train = Sampler::Create(5, 8, 2, 1, true);
  ASSERT_TRUE(train.ok()) << train.status();
  const absl::Status s = ExampleSchedule(*train).CheckReachable(0);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "the data set has 5 examples, fewer than one global batch of 8 "
            "(training drops the remainder of each epoch)");
  // An evaluation pass pads instead.
  absl::StatusOr<Sampler> eval = Sampler::Create(5, 8, 2, 1, false);
  ASSERT_TRUE(eval.ok());
  EXPECT_TRUE(ExampleSchedule(*eval).CheckReachable(0).ok());
  // Rows of one example at most: the same refusal.
  const TenRows one(1), many(4);
  EXPECT_EQ(PackedSchedule(one, *train, nullptr).CheckReachable(0).message(),
            s.message());
  // Examples of several rows each (blocks of lines) may fill a batch.
  EXPECT_TRUE(PackedSchedule(many, *train, nullptr).CheckReachable(0).ok());
}

}  // namespace
}  // namespace batchd

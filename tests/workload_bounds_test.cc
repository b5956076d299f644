// Every workload option that sizes work, memory or threads has a maximum, and
// a value past it is refused at OpenStream naming the option and the bound
// (options are read before any data is touched, so no data set is needed),
// for every numeric option of every entry of the table.
#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "workloads/registry.h"

namespace batchd {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

absl::Status Open(const std::string& workload, const std::string& split,
                  const std::string& key, const std::string& value) {
  WorkloadConfig c;
  c.data_path = "/nonexistent-batchd-data";
  c.split = split;
  c.options = {{key, value}};
  return CreateWorkload(workload, c).status();
}

// Each workload's numeric options, from its entry (workloads/
// workload_entry.h): one past the maximum is refused naming the option and
// the maximum; the maximum itself gets past the options (the data is what
// fails then, not the option).
TEST(WorkloadOptions, EverySizingOptionIsRefusedPastItsBoundNamingIt) {
  int checked = 0;
  for (const WorkloadEntry& e : Workloads()) {
    for (const OptionSpec& o : e.options) {
      if (o.type != OptionType::kUint) continue;
      SCOPED_TRACE(std::string(e.name) + " " + o.key);
      ASSERT_LT(o.hi, UINT64_MAX) << "an option without a maximum";
      const std::string bound = absl::StrCat(o.hi);
      const absl::Status s =
          Open(e.name, "train", o.key, absl::StrCat(o.hi + 1));
      EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
      EXPECT_THAT(s.message(), HasSubstr(o.key));
      EXPECT_THAT(s.message(), HasSubstr(bound));
      const absl::Status at = Open(e.name, "train", o.key, bound);
      EXPECT_THAT(at.message(), Not(HasSubstr("option " + std::string(o.key))))
          << at;
      ++checked;
    }
  }
  EXPECT_GT(checked, 0);
}

TEST(WorkloadOptions, IndexThreadsBoundsAShareAndIsNotACountOfThreads) {
  // Within the bound, index_threads is accepted whatever the daemon has:
  // the data is what fails here, not the option.
  const absl::Status s = Open("wmt", "train", "index_threads", "100000");
  EXPECT_NE(s.code(), absl::StatusCode::kInvalidArgument) << s;
}

}  // namespace
}  // namespace batchd

// Every workload option that sizes work, memory or threads has a maximum, and
// a value past it is refused at OpenStream naming the option and the bound
// (options are read before any data is touched, so no data set is needed).
#include <map>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "workloads/registry.h"

namespace batchd {
namespace {

using ::testing::HasSubstr;

absl::Status Open(const std::string& workload, const std::string& split,
                  const std::string& key, const std::string& value) {
  WorkloadConfig c;
  c.data_path = "/nonexistent-batchd-data";
  c.split = split;
  c.options = {{key, value}};
  return CreateWorkload(workload, c).status();
}

struct Bound {
  const char* workload;
  const char* split;
  const char* option;
  const char* too_big;
  const char* bound;
};

TEST(WorkloadOptions, EverySizingOptionIsRefusedPastItsBoundNamingIt) {
  for (const Bound& b : std::initializer_list<Bound>{
           {"synthetic", "train", "examples", "1099511627777", "1099511627776"},
           {"imagenet", "train", "eval_train_examples", "4294967296",
            "4294967295"},
           {"imagenet", "train", "max_file_bytes", "268435457", "268435456"},
           {"imagenet", "train", "image_size", "4097", "4096"},
           {"wmt", "train", "index_threads", "1048577", "1048576"},
           {"wmt", "train", "eval_train_examples", "16777217", "16777216"},
           {"wmt", "train", "max_length", "4097", "4096"},
           {"librispeech", "eval_train", "eval_train_examples", "4294967296",
            "4294967295"},
       }) {
    SCOPED_TRACE(std::string(b.workload) + " " + b.option);
    const absl::Status s = Open(b.workload, b.split, b.option, b.too_big);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_THAT(s.message(), HasSubstr(b.option));
    EXPECT_THAT(s.message(), HasSubstr(b.bound));
  }
}

TEST(WorkloadOptions, IndexThreadsBoundsAShareAndIsNotACountOfThreads) {
  // Within the bound, index_threads is accepted whatever the daemon has:
  // the data is what fails here, not the option.
  const absl::Status s = Open("wmt", "train", "index_threads", "100000");
  EXPECT_NE(s.code(), absl::StatusCode::kInvalidArgument) << s;
}

}  // namespace
}  // namespace batchd

// An argv for the unit tests of batchctl's parsers: Argv{"plan", "--x", "1"};
// and ExpectRefusals, a table of argvs a parser must refuse.
#ifndef BATCHD_TESTS_BATCHCTL_TEST_ARGV_H_
#define BATCHD_TESTS_BATCHCTL_TEST_ARGV_H_

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_join.h"

namespace batchd::batchctl {

class Argv {
 public:
  Argv(std::initializer_list<std::string> args)
      : Argv(std::vector<std::string>(args)) {}
  explicit Argv(std::vector<std::string> args) : strings_(std::move(args)) {
    for (std::string& s : strings_) pointers_.push_back(s.data());
    pointers_.push_back(nullptr);
  }
  int argc() const { return int(strings_.size()); }
  char** argv() { return pointers_.data(); }

 private:
  std::vector<std::string> strings_;
  std::vector<char*> pointers_;
};

// Each argv of `refusals` and a part of the error it must get.
using Refusals = std::vector<std::pair<std::vector<std::string>, std::string>>;

// Expects `parse` (a function of an Argv that returns a StatusOr) to
// refuse each argv of `refusals` with an error that says its text.
template <typename Parse>
void ExpectRefusals(const Parse& parse, const Refusals& refusals) {
  for (const auto& [args, says] : refusals) {
    EXPECT_THAT(parse(Argv(args)).status().message(),
                ::testing::HasSubstr(says))
        << absl::StrJoin(args, " ");
  }
}

}  // namespace batchd::batchctl

#endif  // BATCHD_TESTS_BATCHCTL_TEST_ARGV_H_

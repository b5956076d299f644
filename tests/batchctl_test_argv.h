// An argv for the unit tests of batchctl's parsers: Argv{"plan", "--x", "1"}.
#ifndef BATCHD_TESTS_BATCHCTL_TEST_ARGV_H_
#define BATCHD_TESTS_BATCHCTL_TEST_ARGV_H_

#include <initializer_list>
#include <string>
#include <vector>

namespace batchd::batchctl {

class Argv {
 public:
  Argv(std::initializer_list<std::string> args) : strings_(args) {
    for (std::string& s : strings_) pointers_.push_back(s.data());
    pointers_.push_back(nullptr);
  }
  int argc() const { return int(strings_.size()); }
  char** argv() { return pointers_.data(); }

 private:
  std::vector<std::string> strings_;
  std::vector<char*> pointers_;
};

}  // namespace batchd::batchctl

#endif  // BATCHD_TESTS_BATCHCTL_TEST_ARGV_H_

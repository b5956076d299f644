// batchctl's output: byte and duration formatting, aligned tables, and
// protos as JSON (nlohmann::ordered_json, so keys keep the order written).
// Scripts and tests parse these formats: change them with care.
#ifndef BATCHD_TOOLS_BATCHCTL_OUTPUT_H_
#define BATCHD_TOOLS_BATCHCTL_OUTPUT_H_

#include <google/protobuf/message.h>

#include <cstddef>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/format.h"  // HumanBytes

namespace batchd::batchctl {

using Json = nlohmann::ordered_json;

// "12.3 s" under a minute, then "4m05s", "2h03m", "3d04h".
std::string FormatSeconds(double s);

// " k1=v1 k2=v2" with keys sorted, each key and value Printable; "" when
// empty.
std::string OptionsSuffix(const std::map<std::string, std::string>& options);

// "2026-12-02 09:30:05 UTC", now.
std::string UtcNow();

// Aligned text columns (cells that hold text from the daemon must be
// Printable already: a control character would break the alignment or
// worse); columns flagged right (numbers) align right. Trailing
// blanks are cut from every line.
class Table {
 public:
  explicit Table(std::vector<std::string> header);
  void Add(std::vector<std::string> row);
  // Columns whose cells are right-aligned.
  void AlignRight(std::vector<size_t> columns);
  // Every row, each line prefixed with `indent` and ended with '\n'.
  std::string Render(const std::string& indent) const;

 private:
  std::vector<std::vector<std::string>> rows_;
  std::vector<size_t> right_;
};

// Every field of `m`, set or not, under its proto name; maps become objects
// with sorted keys. Unlike protobuf's JSON mapping, 64-bit integers are
// numbers, so that jq and Python read them as such.
Json ProtoToJson(const google::protobuf::Message& m);

// One line of compact JSON, ASCII only: controls, DEL and everything beyond
// ASCII are \u escapes. NaN and infinities become null (JSON has neither);
// bytes that are not UTF-8 become U+FFFD rather than an exception.
std::string DumpJson(const Json& j);

}  // namespace batchd::batchctl

#endif  // BATCHD_TOOLS_BATCHCTL_OUTPUT_H_

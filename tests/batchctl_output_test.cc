// batchctl's output formats: durations, tables and protos as JSON (bytes:
// tests/base_test.cc).
#include "tools/batchctl/output.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "batchd/v1/batchd.pb.h"

namespace batchd::batchctl {
namespace {

TEST(FormatSeconds, PicksTheTwoLargestUnits) {
  EXPECT_EQ(FormatSeconds(0), "0.0 s");
  EXPECT_EQ(FormatSeconds(59.94), "59.9 s");
  EXPECT_EQ(FormatSeconds(60), "1m00s");
  EXPECT_EQ(FormatSeconds(245.9), "4m05s");
  EXPECT_EQ(FormatSeconds(2 * 3600 + 3 * 60 + 59), "2h03m");
  EXPECT_EQ(FormatSeconds(3 * 86400 + 4 * 3600 + 1), "3d04h");
}

TEST(OptionsSuffix, SortsKeys) {
  EXPECT_EQ(OptionsSuffix({}), "");
  EXPECT_EQ(OptionsSuffix({{"b", "2"}, {"a", "x=y"}}), " a=x=y b=2");
}

TEST(Table, AlignsColumnsAndCutsTrailingBlanks) {
  Table t({"NAME", "N", "NOTE"});
  t.AlignRight({1});
  t.Add({"a", "1000", ""});
  t.Add({"longer", "7", "x"});
  EXPECT_EQ(t.Render("  "),
            "  NAME       N  NOTE\n"
            "  a       1000\n"
            "  longer     7  x\n");
}

TEST(Table, ToleratesShortRows) {
  Table t({"A", "B"});
  t.Add({"x"});
  EXPECT_EQ(t.Render(""), "A  B\nx\n");
}

TEST(ProtoToJson, WritesEveryFieldInOrderWithSortedMapsAndExact64BitNumbers) {
  v1::StreamSpec spec;
  spec.set_name("train");
  spec.set_global_batch_size(uint64_t(1) << 62 | 1);  // not a double
  (*spec.mutable_options())["zeta"] = "1";
  (*spec.mutable_options())["alpha"] = "2";
  const Json j = ProtoToJson(spec);
  const std::string text = DumpJson(j);
  EXPECT_THAT(text, ::testing::StartsWith(R"({"name":"train",)"));
  EXPECT_THAT(
      text, ::testing::HasSubstr(R"("global_batch_size":4611686018427387905)"));
  EXPECT_THAT(text, ::testing::HasSubstr(R"({"alpha":"2","zeta":"1"})"));
  // Unset fields are there too, with their defaults.
  EXPECT_EQ(j["seed"], 0);
  EXPECT_EQ(j["data"], "");
  // Field order is the proto's.
  std::vector<std::string> keys;
  for (const auto& [k, v] : j.items()) keys.push_back(k);
  const google::protobuf::Descriptor* d = spec.GetDescriptor();
  ASSERT_EQ(int(keys.size()), d->field_count());
  for (int i = 0; i < d->field_count(); ++i) {
    EXPECT_EQ(keys[i], d->field(i)->name());
  }
}

TEST(ProtoToJson, RepeatedMessagesBecomeArrays) {
  v1::PlanResponse plan;
  v1::TensorInfo* t = plan.add_tensors();
  t->set_name("image");
  t->add_shape(2);
  t->add_shape(3);
  const Json j = ProtoToJson(plan);
  EXPECT_EQ(j["tensors"].size(), 1u);
  EXPECT_EQ(j["tensors"][0]["name"], "image");
  EXPECT_EQ(DumpJson(j["tensors"][0]["shape"]), "[2,3]");
}

TEST(DumpJson, HasNoNaNAndSurvivesBytesThatAreNotUtf8) {
  Json j;
  j["nan"] = std::nan("");
  j["inf"] = std::numeric_limits<double>::infinity();
  j["text"] = std::string("a\"b\\c\n\x01", 7);
  j["bytes"] = std::string("\xff\xfe", 2);
  EXPECT_EQ(DumpJson(j),
            "{\"nan\":null,\"inf\":null,\"text\":\"a\\\"b\\\\c\\n\\u0001\","
            "\"bytes\":\"\\ufffd\\ufffd\"}");
}

// Issue 27: what a terminal acts on beyond the C0 controls (DEL, the C1
// CSI, a right-to-left override) was written raw into the JSON line.
TEST(DumpJson, IsAsciiWithEveryControlAndNonAsciiCharacterEscaped) {
  Json j;
  j["data"] = std::string(
      "a\x1b]52;c;eA==\x07\x7f\xc2\x9b"
      "2J\xe2\x80\xae"
      "x");
  j["name"] = "caf\xc3\xa9";
  const std::string text = DumpJson(j);
  EXPECT_EQ(text,
            "{\"data\":\"a\\u001b]52;c;eA==\\u0007\\u007f\\u009b2J\\u202ex\","
            "\"name\":\"caf\\u00e9\"}");
  for (char c : text) {
    EXPECT_TRUE(c >= 0x20 && c < 0x7f) << int(uint8_t(c));
  }
  EXPECT_EQ(Json::parse(text)["name"], "caf\xc3\xa9") << "the text is kept";
}

}  // namespace
}  // namespace batchd::batchctl

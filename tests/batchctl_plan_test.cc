// batchctl plan: the /dev/shm rule, the spec from the flags, the node's
// figures and both reports.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include "tests/batchctl_test_argv.h"
#include "tools/batchctl/plan.h"

namespace batchd::batchctl {
namespace {

using ::testing::HasSubstr;

TEST(ShmSizeFor, IsTheRingsPlusATenthPlus64MiBRoundedUpToAMiB) {
  EXPECT_EQ(ShmSizeFor(0), 64 * kMiB);
  EXPECT_EQ(ShmSizeFor(1), 65 * kMiB);  // 1 B + 1 B (a tenth, rounded up)
  EXPECT_EQ(ShmSizeFor(1000 * kMiB), 1164 * kMiB);  // exact: no rounding
  EXPECT_EQ(ShmSizeFor(1000 * kMiB + 1), 1165 * kMiB);
  EXPECT_EQ(ShmSizeFor(100 * kMiB), 174 * kMiB);
}

class PlanArgsTest : public ::testing::Test {
 protected:
  void SetUp() override { unsetenv("BATCHD_SERVER"); }

  static absl::StatusOr<PlanArgs> Parse(Argv args) {
    return ParsePlanArgs(args.argc(), args.argv());
  }
};

TEST_F(PlanArgsTest, BuildsTheSpecWithTheDocumentedDefaults) {
  absl::StatusOr<PlanArgs> a = Parse({"plan", "--global-batch-size", "8"});
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->spec.name(), "plan");
  EXPECT_EQ(a->spec.workload(), "synthetic");
  EXPECT_EQ(a->spec.data(), "");
  EXPECT_EQ(a->spec.split(), "train");
  EXPECT_EQ(a->spec.world_size(), 1u);
  EXPECT_EQ(a->spec.slots(), 0u);
  EXPECT_EQ(a->local_ranks, 0u);
  EXPECT_EQ(a->connection.timeout, 30);  // plan's own default
  EXPECT_FALSE(a->json);

  a = Parse({"plan",          "--global-batch-size=64",
             "--world-size",  "8",
             "--seed",        "7",
             "--slots",       "3",
             "--option",      "examples=10",
             "--option",      "payload_bytes=4",
             "--workload",    "imagenet",
             "--data",        "in",
             "--split",       "validation",
             "--stream",      "job",
             "--local-ranks", "4",
             "--json"});
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->spec.name(), "job");
  EXPECT_EQ(a->spec.workload(), "imagenet");
  EXPECT_EQ(a->spec.data(), "in");
  EXPECT_EQ(a->spec.split(), "validation");
  EXPECT_EQ(a->spec.global_batch_size(), 64u);
  EXPECT_EQ(a->spec.world_size(), 8u);
  EXPECT_EQ(a->spec.seed(), 7u);
  EXPECT_EQ(a->spec.slots(), 3u);
  EXPECT_EQ(a->spec.options().at("examples"), "10");
  EXPECT_EQ(a->spec.options().at("payload_bytes"), "4");
  EXPECT_EQ(a->local_ranks, 4u);
  EXPECT_TRUE(a->json);
}

TEST_F(PlanArgsTest, RefusesWhatTheDaemonWouldRefuseNamingTheFlag) {
  ExpectRefusals(
      Parse,
      {{{"plan", "--world-size", "2"}, "--global-batch-size G is required"},
       {{"plan", "--global-batch-size", "30", "--world-size", "4"},
        "30 is not divisible by --world-size 4"},
       {{"plan", "--global-batch-size", "8", "--world-size", "0"},
        "--world-size must be 1..65536"},
       {{"plan", "--global-batch-size", "8", "--slots", "1025"},
        "--slots must be 0..1024"},
       {{"plan", "--global-batch-size", "8", "--world-size", "2",
         "--local-ranks", "3"},
        "--local-ranks must be 1..2"},
       {{"plan", "--global-batch-size", "8", "--local-ranks", "0"},
        "--local-ranks must be 1..1"},
       {{"plan", "--global-batch-size", "8", "--option", "x"}, "KEY=VALUE"},
       {{"plan", "--global-batch-size", "-8"},
        "--global-batch-size wants a number, not '-8'"}});
  EXPECT_FALSE(
      Parse({"plan", "--global-batch-size", "8", "--steps", "1"}).ok());
  // --option takes one KEY=VALUE per occurrence.
  EXPECT_FALSE(
      Parse({"plan", "--global-batch-size", "8", "--option", "a=1", "b=2"})
          .ok());
}

v1::PlanResponse Response() {
  v1::PlanResponse plan;
  plan.set_ranks(8);
  plan.set_slots(4);
  plan.set_slot_bytes(100 * kMiB);
  plan.set_segment_bytes(400 * kMiB + 4096);
  plan.set_shm_free_bytes(8 * (400 * kMiB + 4096));
  v1::TensorInfo* t = plan.add_tensors();
  t->set_name("image");
  t->set_dtype("uint8");
  t->add_shape(16);
  t->add_shape(224);
  return plan;
}

TEST(ComputePlan, TotalsTheNodesRingsAndSaysWhetherTheyFit) {
  PlanArgs args;
  const v1::PlanResponse plan = Response();
  PlanFigures f = ComputePlan(args, plan);
  EXPECT_EQ(f.ranks, 8u);
  EXPECT_EQ(f.total_bytes, 8 * plan.segment_bytes());
  EXPECT_EQ(f.shm_size_bytes, ShmSizeFor(f.total_bytes));
  EXPECT_EQ(f.shm_size_mib * kMiB, f.shm_size_bytes);
  EXPECT_TRUE(f.fits);  // exactly enough is enough

  v1::PlanResponse tight = plan;
  tight.set_shm_free_bytes(f.total_bytes - 1);
  EXPECT_FALSE(ComputePlan(args, tight).fits);

  args.local_ranks = 2;  // one node of four
  f = ComputePlan(args, tight);
  EXPECT_EQ(f.ranks, 2u);
  EXPECT_EQ(f.total_bytes, 2 * plan.segment_bytes());
  EXPECT_TRUE(f.fits);
}

TEST(PlanReports, NameTheSizesToGiveAContainer) {
  PlanArgs args;
  args.connection.address = "unix:///s";
  args.spec.set_workload("synthetic");
  args.spec.set_split("train");
  args.spec.set_global_batch_size(128);
  args.spec.set_world_size(8);
  (*args.spec.mutable_options())["examples"] = "1000";
  const v1::PlanResponse plan = Response();
  const PlanFigures f = ComputePlan(args, plan);
  const std::string mib = absl::StrCat(f.shm_size_mib);

  const std::string text = FormatPlan(args, plan, f);
  EXPECT_THAT(text, ::testing::StartsWith(
                        "spec: workload synthetic  data ''  split train  "
                        "global batch 128  world 8  options examples=1000\n"
                        "  TENSOR  DTYPE  SHAPE (one rank)\n"
                        "  image   uint8  [16, 224]\n"));
  EXPECT_THAT(text,
              HasSubstr(absl::StrCat("one rank's ring:  ", plan.segment_bytes(),
                                     " bytes (400.0 MiB): 4 slots x ",
                                     plan.slot_bytes(), " bytes")));
  EXPECT_THAT(text, HasSubstr(absl::StrCat("this node's rings: ", f.total_bytes,
                                           " bytes (3.1 GiB) for 8 rank(s)")));
  EXPECT_THAT(text, HasSubstr("at unix:///s\n"));  // fits: no NOT ENOUGH
  EXPECT_THAT(text, HasSubstr("docker run --shm-size=" + mib + "m ...\n"));
  EXPECT_THAT(text, HasSubstr("sizeLimit: " + mib + "Mi} at /dev/shm\n"));

  const Json j = PlanToJson(args, plan, f);
  EXPECT_EQ(j["spec"]["global_batch_size"], 128);
  EXPECT_EQ(j["total_bytes"], f.total_bytes);
  EXPECT_EQ(j["fits"], true);
  EXPECT_EQ(j["shm_size_bytes"], f.shm_size_bytes);
  EXPECT_EQ(j["docker_shm_size"], mib + "m");
  EXPECT_EQ(j["kubernetes_size_limit"], mib + "Mi");
  EXPECT_EQ(j["tensors"][0]["name"], "image");
  std::vector<std::string> keys;
  for (const auto& [k, v] : j.items()) keys.push_back(k);
  EXPECT_EQ(keys, (std::vector<std::string>{
                      "spec", "slots", "slot_bytes", "segment_bytes", "ranks",
                      "total_bytes", "shm_free_bytes", "fits", "shm_size_bytes",
                      "docker_shm_size", "kubernetes_size_limit", "tensors"}));
}

TEST(PlanReports, NameTheWorkloadsSplitsAndOptionsAsTheDaemonDeclares) {
  PlanArgs args;
  args.connection.address = "unix:///s";
  args.spec.set_workload("synthetic");
  (*args.spec.mutable_options())["examples"] = "1000";
  v1::PlanResponse plan = Response();
  plan.add_splits("train");
  plan.add_splits("validation");
  v1::WorkloadOption* o = plan.add_options();
  o->set_key("examples");
  o->set_value("1000");
  o->set_default_value("10000");
  o->set_bounds("1 .. 2^40");
  o->set_help("N");
  const PlanFigures f = ComputePlan(args, plan);

  const std::string text = FormatPlan(args, plan, f);
  EXPECT_THAT(text, HasSubstr("splits: train, validation\n"));
  EXPECT_THAT(text, HasSubstr("  OPTION    VALUE  DEFAULT  BOUNDS\n"
                              "  examples  1000   10000    1 .. 2^40\n"));

  const Json j = PlanToJson(args, plan, f);
  EXPECT_EQ(j["splits"], Json::array({"train", "validation"}));
  ASSERT_EQ(j["options"].size(), 1u);
  EXPECT_EQ(j["options"][0]["key"], "examples");
  EXPECT_EQ(j["options"][0]["value"], "1000");
  EXPECT_EQ(j["options"][0]["default_value"], "10000");
  EXPECT_EQ(j["options"][0]["bounds"], "1 .. 2^40");
  EXPECT_EQ(j["options"][0]["help"], "N");
}

}  // namespace
}  // namespace batchd::batchctl

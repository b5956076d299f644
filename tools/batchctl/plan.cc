// batchctl plan: ParsePlanArgs → Plan call → ComputePlan → a report.
#include "tools/batchctl/plan.h"

#include <CLI/CLI.hpp>
#include <cstdio>
#include <map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "tools/batchctl/commands.h"
#include "tools/batchctl/control.h"

namespace batchd::batchctl {
namespace {

constexpr char kSummary[] =
    "the /dev/shm a stream needs: ring bytes, --shm-size, sizeLimit";

constexpr char kHelp[] =
    R"(Usage: batchctl plan [--server ADDR] --global-batch-size G [flags]

Asks the daemon what a stream with this spec would need, without opening
it: one rank's ring (slots x slot bytes plus the header), the total of the
node's rings, the space free in the daemon's /dev/shm now, and the sizes
to give a container's /dev/shm: the total plus 10% plus 64 MiB, rounded up
to a MiB, as `docker run --shm-size` and as the `sizeLimit` of a
Kubernetes emptyDir (medium: Memory) mounted at /dev/shm. When a node
runs several streams (train and eval, several jobs), add their totals.
It also reports the workload's splits and options (each with its value in
this spec, its default and bounds), as the daemon declares them.

Stream spec (names mirror StreamSpec; use the job's values):
  --workload NAME           default: synthetic
  --data PATH               relative to the server's --data-root (default "")
  --split NAME              default: train
  --global-batch-size G     required; divisible by --world-size
  --world-size W            default 1
  --seed S                  default 0
  --slots K                 ring slots per rank (default 0: server default)
  --option KEY=VALUE        workload option, repeatable
  --stream NAME             checked as a stream name (default: plan)

  --local-ranks N           ranks of this node, whose rings the node holds
                            (default: W, a single node)
  --server ADDR             unix:///path or tcp://host:port
                            (default: $BATCHD_SERVER, else
                            unix:///run/batchd/batchd.sock)
  --timeout S               deadline of the call in seconds (default 30)
  --json                    print one JSON object

Exit codes: 0 ok, 1 the server failed, refused the spec or could not be
reached, 2 usage error, 3 the daemon's /dev/shm has less free space than
the node's rings need (the figures are printed all the same).
)";

std::string ShapeString(const v1::TensorInfo& t) {
  std::string out = "[";
  for (int i = 0; i < t.shape_size(); ++i) {
    absl::StrAppend(&out, i > 0 ? ", " : "", t.shape(i));
  }
  return out + "]";
}

int RunPlan(int argc, char** argv) {
  absl::StatusOr<PlanArgs> args = ParsePlanArgs(argc, argv);
  if (!args.ok()) {
    return UsageError("plan", std::string(args.status().message()));
  }
  Control control(args->connection);
  absl::StatusOr<v1::PlanResponse> plan = control.Plan(args->spec);
  if (!plan.ok()) return ServerError("plan", plan.status());
  const PlanFigures f = ComputePlan(*args, *plan);
  if (args->json) {
    printf("%s\n", DumpJson(PlanToJson(*args, *plan, f)).c_str());
  } else {
    fputs(FormatPlan(*args, *plan, f).c_str(), stdout);
  }
  if (!f.fits) {
    fprintf(stderr,
            "batchctl plan: /dev/shm at %s has %s free; this node's rings "
            "need %s\n",
            Printable(args->connection.address).c_str(),
            HumanBytes(double(plan->shm_free_bytes())).c_str(),
            HumanBytes(double(f.total_bytes)).c_str());
    return kExitNoShm;
  }
  return kExitOk;
}

}  // namespace

Command PlanCommand() { return {"plan", kSummary, kHelp, RunPlan}; }

uint64_t ShmSizeFor(uint64_t total) {
  const uint64_t with_headroom = total + (total + 9) / 10 + 64 * kMiB;
  return (with_headroom + kMiB - 1) / kMiB * kMiB;
}

absl::StatusOr<PlanArgs> ParsePlanArgs(int argc, char** argv) {
  std::unique_ptr<CLI::App> app = NewApp("plan");
  ConnectionFlags connection(*app, 30);
  PlanArgs args;
  std::string stream = "plan", workload = "synthetic", data, split = "train";
  std::string global_s, world_s, seed_s, slots_s, local_s;
  std::vector<std::string> options;
  AddString(*app, "--stream", &stream);
  AddString(*app, "--workload", &workload);
  AddString(*app, "--data", &data);
  AddString(*app, "--split", &split);
  CLI::Option* global_f = AddString(*app, "--global-batch-size", &global_s);
  CLI::Option* world_f = AddString(*app, "--world-size", &world_s);
  CLI::Option* seed_f = AddString(*app, "--seed", &seed_s);
  CLI::Option* slots_f = AddString(*app, "--slots", &slots_s);
  CLI::Option* local_f = AddString(*app, "--local-ranks", &local_s);
  app->add_option("--option", options)->allow_extra_args(false);
  app->add_flag("--json", args.json);
  absl::StatusOr<Connection> c = ParseConnection(*app, argc, argv, connection);
  if (!c.ok()) return c.status();
  args.connection = *std::move(c);

  uint64_t global = 0, seed = 0, world = 1, slots = 0, local = 0;
  for (absl::Status s : {
           ParseNumberFlag(global_f, "--global-batch-size", global_s, &global),
           ParseNumberFlag(world_f, "--world-size", world_s, &world),
           ParseNumberFlag(seed_f, "--seed", seed_s, &seed),
           ParseNumberFlag(slots_f, "--slots", slots_s, &slots),
           ParseNumberFlag(local_f, "--local-ranks", local_s, &local),
       }) {
    if (!s.ok()) return s;
  }
  if (global == 0) {
    return absl::InvalidArgumentError("--global-batch-size G is required");
  }
  if (world < 1 || world > 65536) {
    return absl::InvalidArgumentError("--world-size must be 1..65536");
  }
  if (global % world != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--global-batch-size ", global,
                     " is not divisible by --world-size ", world));
  }
  if (slots > 1024) {
    return absl::InvalidArgumentError("--slots must be 0..1024");
  }
  if (Given(local_f) && (local < 1 || local > world)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--local-ranks must be 1..", world, " (the world size)"));
  }
  absl::StatusOr<std::map<std::string, std::string>> kv =
      ParseKeyValues(options);
  if (!kv.ok()) return kv.status();

  v1::StreamSpec& spec = args.spec;
  spec.set_name(stream);
  spec.set_workload(workload);
  spec.set_data(data);
  spec.set_split(split);
  spec.set_global_batch_size(global);
  spec.set_world_size(uint32_t(world));
  spec.set_seed(seed);
  spec.set_slots(uint32_t(slots));
  spec.mutable_options()->insert(kv->begin(), kv->end());
  args.local_ranks = Given(local_f) ? local : 0;
  return args;
}

PlanFigures ComputePlan(const PlanArgs& args, const v1::PlanResponse& plan) {
  PlanFigures f;
  f.ranks = args.local_ranks != 0 ? args.local_ranks : plan.ranks();
  f.total_bytes = plan.segment_bytes() * f.ranks;
  f.shm_size_bytes = ShmSizeFor(f.total_bytes);
  f.shm_size_mib = f.shm_size_bytes / kMiB;
  f.fits = plan.shm_free_bytes() >= f.total_bytes;
  return f;
}

Json PlanToJson(const PlanArgs& args, const v1::PlanResponse& plan,
                const PlanFigures& f) {
  Json out;
  out["spec"] = ProtoToJson(args.spec);
  out["slots"] = uint64_t(plan.slots());
  out["slot_bytes"] = plan.slot_bytes();
  out["segment_bytes"] = plan.segment_bytes();
  out["ranks"] = f.ranks;
  out["total_bytes"] = f.total_bytes;
  out["shm_free_bytes"] = plan.shm_free_bytes();
  out["fits"] = f.fits;
  out["shm_size_bytes"] = f.shm_size_bytes;
  out["docker_shm_size"] = absl::StrCat(f.shm_size_mib, "m");
  out["kubernetes_size_limit"] = absl::StrCat(f.shm_size_mib, "Mi");
  Json tensors = Json::array();
  for (const v1::TensorInfo& t : plan.tensors()) {
    tensors.push_back(ProtoToJson(t));
  }
  out["tensors"] = std::move(tensors);
  // What the workload declares (a daemon before they were reported sends
  // none: no keys then).
  if (plan.splits_size() > 0) {
    Json splits = Json::array();
    for (const std::string& s : plan.splits()) splits.push_back(s);
    out["splits"] = std::move(splits);
  }
  if (plan.options_size() > 0) {
    Json options = Json::array();
    for (const v1::WorkloadOption& o : plan.options()) {
      options.push_back(ProtoToJson(o));
    }
    out["options"] = std::move(options);
  }
  return out;
}

std::string FormatPlan(const PlanArgs& args, const v1::PlanResponse& plan,
                       const PlanFigures& f) {
  const v1::StreamSpec& spec = args.spec;
  const std::string options =
      OptionsSuffix({spec.options().begin(), spec.options().end()});
  std::string out = absl::StrFormat(
      "spec: workload %s  data '%s'  split %s  global batch %u  world %u"
      "%s%s\n",
      Printable(spec.workload()), Printable(spec.data()),
      Printable(spec.split()), spec.global_batch_size(), spec.world_size(),
      options.empty() ? "" : "  options", options);
  Table t({"TENSOR", "DTYPE", "SHAPE (one rank)"});
  for (const v1::TensorInfo& ti : plan.tensors()) {
    t.Add({Printable(ti.name()), Printable(ti.dtype()), ShapeString(ti)});
  }
  out += t.Render("  ");
  if (plan.splits_size() > 0) {
    std::vector<std::string> splits(plan.splits().begin(), plan.splits().end());
    absl::StrAppendFormat(&out, "splits: %s\n",
                          Printable(absl::StrJoin(splits, ", ")));
  }
  if (plan.options_size() > 0) {
    Table o({"OPTION", "VALUE", "DEFAULT", "BOUNDS"});
    for (const v1::WorkloadOption& wo : plan.options()) {
      o.Add({Printable(wo.key()), Printable(wo.value()),
             Printable(wo.default_value()), Printable(wo.bounds())});
    }
    out += o.Render("  ");
  }
  absl::StrAppendFormat(
      &out,
      "one rank's ring:  %u bytes (%s): %u slots x %u bytes, and the "
      "header\n",
      plan.segment_bytes(), HumanBytes(double(plan.segment_bytes())),
      plan.slots(), plan.slot_bytes());
  absl::StrAppendFormat(
      &out, "this node's rings: %u bytes (%s) for %u rank(s)\n", f.total_bytes,
      HumanBytes(double(f.total_bytes)), f.ranks);
  absl::StrAppendFormat(
      &out, "/dev/shm free now: %u bytes (%s) at %s%s\n", plan.shm_free_bytes(),
      HumanBytes(double(plan.shm_free_bytes())),
      Printable(args.connection.address), f.fits ? "" : "  NOT ENOUGH");
  absl::StrAppendFormat(
      &out,
      "\n/dev/shm to give a container (rings + 10%% + 64 MiB): %u MiB\n"
      "  docker run --shm-size=%um ...\n"
      "  Kubernetes: emptyDir {medium: Memory, sizeLimit: %uMi} at /dev/shm\n",
      f.shm_size_mib, f.shm_size_mib, f.shm_size_mib);
  return out;
}

}  // namespace batchd::batchctl

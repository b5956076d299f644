// Core's streams as specs: checking a spec, confining its data path,
// comparing it with an existing stream's, and making the stream (workload,
// sampler, layout, schedule) it asks for; see core.h.
#include <limits.h>
#include <stdlib.h>

#include <cctype>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/clock.h"
#include "base/paths.h"
#include "server/core.h"
#include "workloads/registry.h"

namespace batchd {

namespace {

constexpr uint64_t kMaxStartStep = uint64_t(1) << 48;

// A name starting with '-' would read as a flag to batchctl and other tools.
bool ValidStreamName(const std::string& name) {
  if (name.empty() || name.size() > 64 || name[0] == '-') return false;
  for (char c : name) {
    if (!(isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-')) {
      return false;
    }
  }
  return true;
}

std::string OptionsString(const std::map<std::string, std::string>& options) {
  std::vector<std::string> parts;
  for (const auto& [k, v] : options) parts.push_back(absl::StrCat(k, "=", v));
  return absl::StrCat("{", absl::StrJoin(parts, ","), "}");
}

bool HasNul(const std::string& s) { return s.find('\0') != std::string::npos; }

}  // namespace

std::string FirstDifference(const StreamSpec& a, const StreamSpec& b,
                            bool compare_start_step, std::string* detail) {
  auto diff = [&](const char* field, const std::string& x,
                  const std::string& y) {
    *detail = absl::StrCat(field, " is ", y, " here but ", x,
                           " in the existing stream");
    return std::string(field);
  };
  if (a.workload != b.workload) return diff("workload", a.workload, b.workload);
  if (a.data != b.data) return diff("data", a.data, b.data);
  if (a.split != b.split) return diff("split", a.split, b.split);
  if (a.global_batch_size != b.global_batch_size) {
    return diff("global_batch_size", absl::StrCat(a.global_batch_size),
                absl::StrCat(b.global_batch_size));
  }
  if (a.world_size != b.world_size) {
    return diff("world_size", absl::StrCat(a.world_size),
                absl::StrCat(b.world_size));
  }
  if (a.seed != b.seed) {
    return diff("seed", absl::StrCat(a.seed), absl::StrCat(b.seed));
  }
  if (compare_start_step && a.start_step != b.start_step) {
    return diff("start_step", absl::StrCat(a.start_step),
                absl::StrCat(b.start_step));
  }
  auto cursor = [](const StreamSpec& s) {
    return s.has_start_cursor
               ? absl::StrCat("(", s.start_cursor.epoch, ", ",
                              s.start_cursor.window, ", ",
                              s.start_cursor.row,
                              s.has_start_cursor_step
                                  ? absl::StrCat(", step ",
                                                 s.start_cursor_step)
                                  : std::string(),
                              ")")
               : std::string("none");
  };
  if (compare_start_step && cursor(a) != cursor(b)) {
    return diff("start_cursor", cursor(a), cursor(b));
  }
  if (a.slots != b.slots) {
    return diff("slots", absl::StrCat(a.slots), absl::StrCat(b.slots));
  }
  if (a.options != b.options) {
    return diff("options", OptionsString(a.options), OptionsString(b.options));
  }
  return "";
}

absl::StatusOr<std::string> Core::ConfineDataPath(
    const std::string& data) const {
  if (data.empty()) return std::string();
  const std::string joined =
      data[0] == '/' ? data : absl::StrCat(options_.data_root, "/", data);
  char resolved[PATH_MAX];
  if (realpath(joined.c_str(), resolved) == nullptr) {
    return absl::NotFoundError(absl::StrCat(
        "data path '", data, "' does not exist under --data-root ",
        options_.data_root));
  }
  const std::string r = resolved;
  const std::string& root = options_.data_root;
  if (!PathIsWithin(r, root)) {
    return absl::PermissionDeniedError(absl::StrCat(
        "data path '", data, "' resolves to ", r,
        ", outside the server's --data-root ", root));
  }
  return r;
}

absl::StatusOr<std::unique_ptr<Core::Stream>> Core::MakeStream(
    const StreamSpec& spec) {
  absl::StatusOr<std::string> path = ConfineDataPath(spec.data);
  if (!path.ok()) return path.status();
  WorkloadConfig config;
  config.data_path = *path;
  config.data_root = options_.data_root;
  config.cache = options_.cache;
  config.executor = executor_.get();
  config.shared = shared_work_.get();
  config.split = spec.split;
  config.seed = spec.seed;
  config.options = spec.options;
  absl::StatusOr<std::unique_ptr<Workload>> workload =
      CreateWorkload(spec.workload, config);
  if (!workload.ok()) return workload.status();
  absl::StatusOr<Sampler> sampler =
      Sampler::Create((*workload)->num_examples(), spec.global_batch_size,
                      spec.world_size, spec.seed, (*workload)->shuffle());
  if (!sampler.ok()) return sampler.status();
  absl::StatusOr<BatchLayout> layout =
      BatchLayout::Make((*workload)->tensors(), sampler->per_rank_batch());
  if (!layout.ok()) return layout.status();
  {
    // The ring is checked now, before anything is created or mapped.
    RingGeometry g;
    g.slot_count = spec.slots;
    g.payload_bytes = layout->payload_bytes;
    if (absl::Status s = g.Check(); !s.ok()) return s;
  }
  auto stream = std::make_unique<Stream>();
  stream->spec = spec;
  stream->setup = std::make_shared<StreamSetup>(
      spec.name, std::move(*workload), std::move(*sampler),
      std::move(*layout));
  if (absl::Status s = engine_->Prepare(stream->setup.get()); !s.ok()) {
    return s;  // read-ahead
  }
  Schedule& schedule = *stream->setup->schedule;
  if (spec.has_start_cursor) {
    // A cursor with its step may be any rank's row of that batch; one
    // without is rank 0's of batch start_step.
    const uint64_t step =
        spec.has_start_cursor_step ? spec.start_cursor_step : spec.start_step;
    absl::Status s =
        step > spec.start_step
            ? absl::InvalidArgumentError(absl::StrCat(
                  "start_cursor is the cursor of step ", step,
                  ", after start_step ", spec.start_step,
                  ": a stream begins at or after the batch its cursor "
                  "names (to resume after the batch of a cursor, pass "
                  "start_step = its step + 1, or use the Loader's state)"))
            : schedule.Anchor(step, spec.start_cursor,
                              spec.has_start_cursor_step);
    if (!s.ok()) {
      return absl::Status(s.code(), absl::StrCat("workload '", spec.workload,
                                                 "' split '", spec.split,
                                                 "': ", s.message()));
    }
  }
  if (absl::Status s = schedule.CheckReachable(spec.start_step); !s.ok()) {
    return s;
  }
  stream->ranks.resize(spec.world_size);
  stream->created_ns = MonotonicNanos();
  return stream;
}

absl::Status Core::ValidateSpec(const StreamSpec& spec) {
  if (!ValidStreamName(spec.name)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "stream name '", spec.name.substr(0, 80),
        "' is invalid: use 1 to 64 characters of A-Z a-z 0-9 _ -, not "
        "starting with -"));
  }
  auto too_long = [](const char* field, const std::string& v, size_t max) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, " is ", v.size(), " bytes long; the limit is ", max));
  };
  if (spec.workload.size() > 64) return too_long("workload", spec.workload, 64);
  if (spec.split.size() > 64) return too_long("split", spec.split, 64);
  if (spec.data.size() > 4096) return too_long("data", spec.data, 4096);
  if (spec.options.size() > 64) {
    return absl::InvalidArgumentError(absl::StrCat(
        "options has ", spec.options.size(), " entries; the limit is 64"));
  }
  for (const auto& [k, v] : spec.options) {
    if (k.size() > 256) return too_long("an option name", k, 256);
    if (v.size() > 4096) return too_long(("option " + k).c_str(), v, 4096);
  }
  // A NUL cuts a string short wherever it is used as a C string (paths,
  // segment names): what is checked would differ from what is used.
  if (HasNul(spec.workload) || HasNul(spec.data) || HasNul(spec.split)) {
    return absl::InvalidArgumentError(
        "workload, data and split must not contain a NUL byte");
  }
  for (const auto& [k, v] : spec.options) {
    if (HasNul(k) || HasNul(v)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "option '", absl::CHexEscape(k), "' contains a NUL byte"));
    }
  }
  // Far beyond any training run (2^48 steps), and far enough below 2^64
  // that start_step plus the steps produced never wraps.
  if (spec.start_step > kMaxStartStep) {
    return absl::InvalidArgumentError(absl::StrCat(
        "start_step ", spec.start_step, " exceeds the limit of ",
        kMaxStartStep));
  }
  if (spec.world_size == 0 || spec.world_size > 65536) {
    return absl::InvalidArgumentError(absl::StrCat(
        "world_size ", spec.world_size, " is out of range (1..65536)"));
  }
  if (spec.global_batch_size > (uint64_t(1) << 24)) {
    return absl::InvalidArgumentError(
        absl::StrCat("global_batch_size ", spec.global_batch_size,
                     " exceeds the limit of ", uint64_t(1) << 24));
  }
  if (spec.slots > 1024) {
    return absl::InvalidArgumentError(
        absl::StrCat("slots ", spec.slots, " exceeds the limit of 1024"));
  }
  return absl::OkStatus();
}

absl::StatusOr<PlanResult> Core::Plan(const StreamSpec& in) {
  StreamSpec spec = in;
  if (spec.slots == 0) spec.slots = options_.default_slots;
  if (spec.split.empty()) spec.split = "train";
  if (absl::Status s = ValidateSpec(spec); !s.ok()) return s;
  absl::StatusOr<std::unique_ptr<Stream>> made = MakeStream(spec);
  if (!made.ok()) return made.status();
  const StreamSetup& sc = *(*made)->setup;
  RingGeometry g;
  g.slot_count = spec.slots;
  g.payload_bytes = sc.layout.payload_bytes;
  PlanResult p;
  p.segment_bytes = g.SegmentBytes();
  p.ranks = spec.world_size;
  p.total_bytes = p.segment_bytes * spec.world_size;
  p.shm_free_bytes = ShmFreeBytes();
  p.slot_bytes = g.SlotBytes();
  p.slots = spec.slots;
  for (const BatchLayout::Entry& e : sc.layout.entries) {
    TensorLayout t = e.tensor;
    t.example_shape.insert(t.example_shape.begin(),
                           int64_t(sc.layout.per_rank_batch));
    p.tensors.push_back(std::move(t));
  }
  return p;
}

}  // namespace batchd

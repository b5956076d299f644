// Specs checked and made into streams; see stream_factory.h.
#include "server/stream_factory.h"

#include <limits.h>
#include <stdlib.h>

#include <cctype>
#include <map>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/paths.h"
#include "base/work_context.h"
#include "ring/ring.h"
#include "server/core_options.h"
#include "server/share_key.h"
#include "storage/data_file.h"
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

// A spec's options in name order (a proto map has none of its own).
std::map<std::string, std::string> OptionsOf(const v1::StreamSpec& spec) {
  return std::map<std::string, std::string>(spec.options().begin(),
                                            spec.options().end());
}

std::string OptionsString(const std::map<std::string, std::string>& options) {
  std::vector<std::string> parts;
  for (const auto& [k, v] : options) parts.push_back(absl::StrCat(k, "=", v));
  return absl::StrCat("{", absl::StrJoin(parts, ","), "}");
}

bool HasNul(const std::string& s) { return s.find('\0') != std::string::npos; }

// "(epoch, window, row[, step s])" or "none".
std::string StartCursorText(const v1::StreamSpec& s) {
  if (!s.has_start_cursor()) return "none";
  const v1::Cursor& c = s.start_cursor();
  return absl::StrCat(
      "(", c.epoch(), ", ", c.window(), ", ", c.row(),
      c.has_step() ? absl::StrCat(", step ", c.step()) : std::string(), ")");
}

// Checks the fields of a spec against the limits of a request.
absl::Status ValidateSpec(const v1::StreamSpec& spec) {
  if (!ValidStreamName(spec.name())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "stream name '", spec.name().substr(0, 80),
        "' is invalid: use 1 to 64 characters of A-Z a-z 0-9 _ -, not "
        "starting with -"));
  }
  auto too_long = [](const char* field, const std::string& v, size_t max) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, " is ", v.size(), " bytes long; the limit is ", max));
  };
  if (spec.workload().size() > 64) {
    return too_long("workload", spec.workload(), 64);
  }
  if (spec.split().size() > 64) return too_long("split", spec.split(), 64);
  if (spec.data().size() > 4096) return too_long("data", spec.data(), 4096);
  if (spec.options().size() > 64) {
    return absl::InvalidArgumentError(absl::StrCat(
        "options has ", spec.options().size(), " entries; the limit is 64"));
  }
  const std::map<std::string, std::string> options = OptionsOf(spec);
  for (const auto& [k, v] : options) {
    if (k.size() > 256) return too_long("an option name", k, 256);
    if (v.size() > 4096) return too_long(("option " + k).c_str(), v, 4096);
  }
  // A NUL cuts a string short wherever it is used as a C string (paths,
  // segment names): what is checked would differ from what is used.
  if (HasNul(spec.workload()) || HasNul(spec.data()) || HasNul(spec.split())) {
    return absl::InvalidArgumentError(
        "workload, data and split must not contain a NUL byte");
  }
  for (const auto& [k, v] : options) {
    if (HasNul(k) || HasNul(v)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "option '", absl::CHexEscape(k), "' contains a NUL byte"));
    }
  }
  // Far beyond any training run (2^48 steps), and far enough below 2^64
  // that start_step plus the steps produced never wraps.
  if (spec.start_step() > kMaxStartStep) {
    return absl::InvalidArgumentError(absl::StrCat(
        "start_step ", spec.start_step(), " exceeds the limit of ",
        kMaxStartStep));
  }
  if (spec.world_size() == 0 || spec.world_size() > 65536) {
    return absl::InvalidArgumentError(absl::StrCat(
        "world_size ", spec.world_size(), " is out of range (1..65536)"));
  }
  if (spec.global_batch_size() > (uint64_t(1) << 24)) {
    return absl::InvalidArgumentError(
        absl::StrCat("global_batch_size ", spec.global_batch_size(),
                     " exceeds the limit of ", uint64_t(1) << 24));
  }
  if (spec.slots() > 1024) {
    return absl::InvalidArgumentError(
        absl::StrCat("slots ", spec.slots(), " exceeds the limit of 1024"));
  }
  return absl::OkStatus();
}

}  // namespace

std::string FirstDifference(const v1::StreamSpec& a, const v1::StreamSpec& b,
                            bool compare_start_step, std::string* detail) {
  auto diff = [&](const char* field, const std::string& x,
                  const std::string& y) {
    *detail = absl::StrCat(field, " is ", y, " here but ", x,
                           " in the existing stream");
    return std::string(field);
  };
  if (a.workload() != b.workload()) {
    return diff("workload", a.workload(), b.workload());
  }
  if (a.data() != b.data()) return diff("data", a.data(), b.data());
  if (a.split() != b.split()) return diff("split", a.split(), b.split());
  if (a.global_batch_size() != b.global_batch_size()) {
    return diff("global_batch_size", absl::StrCat(a.global_batch_size()),
                absl::StrCat(b.global_batch_size()));
  }
  if (a.world_size() != b.world_size()) {
    return diff("world_size", absl::StrCat(a.world_size()),
                absl::StrCat(b.world_size()));
  }
  if (a.seed() != b.seed()) {
    return diff("seed", absl::StrCat(a.seed()), absl::StrCat(b.seed()));
  }
  if (compare_start_step && a.start_step() != b.start_step()) {
    return diff("start_step", absl::StrCat(a.start_step()),
                absl::StrCat(b.start_step()));
  }
  if (compare_start_step && StartCursorText(a) != StartCursorText(b)) {
    return diff("start_cursor", StartCursorText(a), StartCursorText(b));
  }
  if (a.slots() != b.slots()) {
    return diff("slots", absl::StrCat(a.slots()), absl::StrCat(b.slots()));
  }
  const std::map<std::string, std::string> ao = OptionsOf(a), bo = OptionsOf(b);
  if (ao != bo) return diff("options", OptionsString(ao), OptionsString(bo));
  return "";
}

RowCursor CursorOf(const v1::Cursor& cursor) {
  RowCursor c;
  c.epoch = cursor.epoch();
  c.window = cursor.window();
  c.row = cursor.row();
  return c;
}

void TensorsToProto(const BatchLayout& layout,
                    google::protobuf::RepeatedPtrField<v1::TensorInfo>* out) {
  for (const BatchLayout::Entry& e : layout.entries) {
    v1::TensorInfo* ti = out->Add();
    ti->set_name(e.tensor.name);
    ti->set_dtype(DTypeName(e.tensor.dtype));
    ti->add_shape(int64_t(layout.per_rank_batch));
    for (int64_t d : e.tensor.example_shape) ti->add_shape(d);
  }
}

absl::StatusOr<v1::StreamSpec> StreamFactory::CheckedSpec(
    const v1::StreamSpec& in, std::optional<uint32_t> rank) const {
  v1::StreamSpec spec = in;
  if (spec.slots() == 0) spec.set_slots(options_.default_slots);
  if (spec.split().empty()) spec.set_split("train");
  if (absl::Status s = ValidateSpec(spec); !s.ok()) return s;
  if (rank.has_value() && *rank >= spec.world_size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", *rank, " is out of range for world_size ",
                     spec.world_size(), " (ranks are 0..",
                     spec.world_size() - 1, ")"));
  }
  return spec;
}

absl::StatusOr<std::string> StreamFactory::ConfineDataPath(
    const std::string& data, const ReadAccess& access) const {
  if (data.empty()) return std::string();
  // Resolved from the root's descriptor with the caller's rights (nothing
  // is looked up as the daemon for a caller who is not), and, for a
  // restricted caller, one error whether the path is missing, beyond a
  // directory it cannot search or leads outside the root.
  absl::StatusOr<std::shared_ptr<const DataRoot>> root =
      DataRoot::Open(options_.data_root, access);
  if (!root.ok()) return root.status();
  absl::StatusOr<std::string> resolved = (*root)->Resolve(data);
  if (resolved.ok()) return *resolved;
  if (absl::IsNotFound(resolved.status())) {
    return absl::NotFoundError(absl::StrCat(
        "data path '", data, "' does not exist under --data-root ",
        options_.data_root,
        access.restricted()
            ? absl::StrCat(", or is not readable by ", access.Describe())
            : std::string()));
  }
  if (absl::IsPermissionDenied(resolved.status())) {
    return absl::PermissionDeniedError(absl::StrCat(
        "data path '", data, "' is outside the server's --data-root ",
        options_.data_root, ": ", resolved.status().message()));
  }
  return absl::Status(
      resolved.status().code(),
      absl::StrCat("data path '", data, "': ", resolved.status().message()));
}

absl::StatusOr<std::shared_ptr<StreamSetup>> StreamFactory::Make(
    const v1::StreamSpec& spec, const ReadAccess& access) const {
  absl::StatusOr<std::string> path = ConfineDataPath(spec.data(), access);
  if (!path.ok()) return path.status();
  WorkloadConfig config;
  config.data_path = *path;
  config.data_root = options_.data_root;
  config.access = access;
  config.max_data_file_bytes = options_.max_data_file_bytes;
  // The request's (Core set it): its owner's work, stopped when cancelled.
  config.work = CurrentWork();
  config.cache = options_.cache;
  config.executor = executor_;
  config.shared = shared_;
  config.split = spec.split();
  config.seed = spec.seed();
  config.options = OptionsOf(spec);
  absl::StatusOr<std::unique_ptr<Workload>> workload =
      CreateWorkload(spec.workload(), config);
  if (!workload.ok()) return workload.status();
  absl::StatusOr<Sampler> sampler =
      Sampler::Create((*workload)->num_examples(), spec.global_batch_size(),
                      spec.world_size(), spec.seed(), (*workload)->shuffle(),
                      (*workload)->examples_hold_many_rows());
  if (!sampler.ok()) return sampler.status();
  absl::StatusOr<BatchLayout> layout =
      BatchLayout::Make((*workload)->tensors(), sampler->per_rank_batch());
  if (!layout.ok()) return layout.status();
  {
    // The ring is checked now, before anything is created or mapped.
    RingGeometry g;
    g.slot_count = spec.slots();
    g.payload_bytes = layout->payload_bytes;
    if (absl::Status s = g.Check(); !s.ok()) return s;
  }
  auto setup = std::make_shared<StreamSetup>(
      spec.name(), std::move(*workload), std::move(*sampler),
      std::move(*layout));
  if (!path->empty()) {
    // What fills it may share: the data's identity, reached as the caller.
    absl::StatusOr<std::shared_ptr<const DataRoot>> root =
        DataRoot::Open(options_.data_root, access);
    if (!root.ok()) return root.status();
    setup->data_identity = DataIdentity(**root, *path);
  }
  if (absl::Status s = engine_->Prepare(setup.get()); !s.ok()) {
    return s;  // read-ahead
  }
  Schedule& schedule = *setup->schedule;
  if (spec.has_start_cursor()) {
    // A cursor with its step may be any rank's row of that batch; one
    // without is rank 0's of batch start_step.
    const v1::Cursor& cursor = spec.start_cursor();
    const uint64_t step = cursor.has_step() ? cursor.step() : spec.start_step();
    absl::Status s =
        step > spec.start_step()
            ? absl::InvalidArgumentError(absl::StrCat(
                  "start_cursor is the cursor of step ", step,
                  ", after start_step ", spec.start_step(),
                  ": a stream begins at or after the batch its cursor "
                  "names (to resume after the batch of a cursor, pass "
                  "start_step = its step + 1, or use the Loader's state)"))
            : schedule.Anchor(step, CursorOf(cursor), cursor.has_step());
    if (!s.ok()) {
      return absl::Status(
          s.code(),
          absl::StrCat("start_cursor of workload '", spec.workload(),
                       "' split '", spec.split(), "': ", s.message()));
    }
  }
  if (absl::Status s = schedule.CheckReachable(spec.start_step()); !s.ok()) {
    return s;
  }
  // A stream whose caller has gone is not kept: nobody would attach.
  if (absl::Status s =
          CheckCancelled(absl::StrCat("stream '", spec.name(), "'"));
      !s.ok()) {
    return s;
  }
  return setup;
}

absl::StatusOr<v1::PlanResponse> StreamFactory::Plan(
    const v1::StreamSpec& in, const ReadAccess& access) const {
  absl::StatusOr<v1::StreamSpec> spec = CheckedSpec(in, std::nullopt);
  if (!spec.ok()) return spec.status();
  absl::StatusOr<std::shared_ptr<StreamSetup>> made = Make(*spec, access);
  if (!made.ok()) return made.status();
  const StreamSetup& sc = **made;
  RingGeometry g;
  g.slot_count = spec->slots();
  g.payload_bytes = sc.layout.payload_bytes;
  v1::PlanResponse p;
  p.set_segment_bytes(g.SegmentBytes());
  p.set_ranks(spec->world_size());
  p.set_total_bytes(p.segment_bytes() * spec->world_size());
  p.set_shm_free_bytes(ShmFreeBytes());
  p.set_slot_bytes(g.SlotBytes());
  p.set_slots(spec->slots());
  TensorsToProto(sc.layout, p.mutable_tensors());
  return p;
}

}  // namespace batchd

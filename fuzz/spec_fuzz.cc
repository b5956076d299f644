// libFuzzer target for request validation: the bytes are an
// OpenStreamRequest as a client sends it, parsed as the gRPC service does,
// and its spec checked by the core (Core::Plan: the spec's
// limits, the data path's confinement to --data-root, the workload's
// options, the sampler and the ring's sizes) without gRPC and without
// creating anything. Any request gives a plan or a Status, never a crash,
// a hang or an allocation the size of a field.
//
// The plan of an accepted spec must hold what the spec asks for: recomputed
// here in 128-bit arithmetic, a slot holds per-rank batch x example bytes
// and a segment slots x that. Sizes that wrap in 64 bits (a segment smaller
// than its batches, which the workers would write past) fail the target.
#include <stdlib.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "batchd/v1/batchd.pb.h"
#include "client/include/batchd/dtype.h"
#include "fuzz/fuzz_util.h"
#include "server/core.h"

namespace {

using u128 = unsigned __int128;

batchd::Core* core = nullptr;

std::string Str(u128 v) {
  std::string s;
  do {
    s.insert(s.begin(), char('0' + int(v % 10)));
    v /= 10;
  } while (v != 0);
  return s;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // An empty data root: data paths of requests resolve inside it or are
  // refused; ImageNet and WMT specs fail on the missing files.
  batchd::CoreOptions o;
  o.data_root = batchd::fuzz::ScratchDir();
  o.shm_prefix = absl::StrCat("batchdfuzz", getpid());
  o.threads = 1;
  o.throughput_log_seconds = 0;
  auto c = batchd::Core::Create(o);
  if (!c.ok()) batchd::fuzz::Fail(std::string(c.status().message()));
  core = c->release();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  batchd::v1::OpenStreamRequest request;
  if (!request.ParseFromArray(data, int(size))) return 0;
  batchd::v1::PlanRequest plan_request;
  *plan_request.mutable_spec() = request.spec();
  const batchd::v1::StreamSpec& spec = plan_request.spec();
  // The daemon's own uid: reads are its own (read_access.h).
  batchd::Caller self;
  self.known = true;
  self.uid = geteuid();
  self.gid = getegid();
  absl::StatusOr<batchd::v1::PlanResponse> plan =
      core->Plan(plan_request, self);
  if (!plan.ok()) return 0;

  if (plan->ranks() != spec.world_size() || plan->slots() == 0 ||
      (spec.slots() != 0 && plan->slots() != spec.slots())) {
    batchd::fuzz::Fail(absl::StrCat("plan of ", plan->ranks(), " ranks and ",
                                    plan->slots(), " slots for a spec of ",
                                    spec.world_size(), " and ", spec.slots()));
  }
  const u128 per_rank = spec.global_batch_size() / spec.world_size();
  u128 batch_bytes = 0;
  for (const batchd::v1::TensorInfo& t : plan->tensors()) {
    if (t.shape().empty() || u128(t.shape(0)) != per_rank) {
      batchd::fuzz::Fail(absl::StrCat(
          "tensor ", t.name(), " does not lead with the per-rank batch"));
    }
    u128 bytes = 0;
    for (const batchd::DTypeInfo& d : batchd::kDTypes) {
      if (t.dtype() == d.name) bytes = d.size;
    }
    if (bytes == 0) {
      batchd::fuzz::Fail("unknown dtype " + t.dtype() + " of tensor " +
                         t.name());
    }
    for (int64_t d : t.shape()) {
      if (d < 0) batchd::fuzz::Fail("negative dimension in tensor " + t.name());
      bytes *= u128(uint64_t(d));
      // Past 2^100 the check below holds or fails whatever the rest is.
      if (bytes > (u128(1) << 100)) bytes = u128(1) << 100;
    }
    batch_bytes += bytes;
  }
  if (u128(plan->slot_bytes()) < batch_bytes) {
    batchd::fuzz::Fail(absl::StrCat("slot of ", plan->slot_bytes(),
                                    " bytes for a batch of ",
                                    Str(batch_bytes)));
  }
  if (u128(plan->segment_bytes()) < u128(plan->slots()) * plan->slot_bytes()) {
    batchd::fuzz::Fail(absl::StrCat("segment of ", plan->segment_bytes(),
                                    " bytes for ", plan->slots(), " slots of ",
                                    plan->slot_bytes()));
  }
  if (u128(plan->total_bytes()) < u128(plan->segment_bytes()) * plan->ranks()) {
    batchd::fuzz::Fail(absl::StrCat("total of ", plan->total_bytes(),
                                    " bytes for ", plan->ranks(), " segments of ",
                                    plan->segment_bytes()));
  }
  return 0;
}

// Conversions between core structs and protos; see convert.h.
#include "server/convert.h"

#include <cstdlib>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "batchd/version.h"

namespace batchd {

uint32_t ServerProtocolVersion() {
  const char* hooks = getenv("BATCHD_TEST_HOOKS");
  const char* claimed = getenv("BATCHD_TEST_PROTOCOL_VERSION");
  uint32_t version;
  if (hooks != nullptr && strcmp(hooks, "1") == 0 && claimed != nullptr &&
      absl::SimpleAtoi(claimed, &version)) {
    return version;
  }
  return kProtocolVersion;
}

absl::Status CheckClientProtocol(const v1::OpenStreamRequest& req) {
  // Clients from before the field send 0 and speak protocol 1.
  const uint32_t client =
      req.protocol_version() == 0 ? 1 : req.protocol_version();
  const uint32_t server = ServerProtocolVersion();
  if (client == server) return absl::OkStatus();
  const std::string client_release = req.client_version().empty()
                                         ? "an older release"
                                         : "batchd " + req.client_version();
  return absl::FailedPreconditionError(absl::StrCat(
      "incompatible batchd protocol: this client (", client_release,
      ") speaks protocol ", client, " but the server (batchd ", kBatchdVersion,
      ") speaks protocol ", server, "; install the client of release ",
      kBatchdVersion, " (pip install batchd==", kBatchdVersion, ")"));
}

grpc::Status ToGrpc(const absl::Status& s) {
  if (s.ok()) return grpc::Status::OK;
  // absl and gRPC share the canonical code numbers.
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()),
                      std::string(s.message()));
}

StreamSpec FromProto(const v1::StreamSpec& p) {
  StreamSpec s;
  s.name = p.name();
  s.workload = p.workload();
  s.data = p.data();
  s.split = p.split();
  s.global_batch_size = p.global_batch_size();
  s.world_size = p.world_size();
  s.seed = p.seed();
  s.start_step = p.start_step();
  s.slots = p.slots();
  for (const auto& [k, v] : p.options()) s.options[k] = v;
  s.has_start_cursor = p.has_start_cursor();
  s.start_cursor.epoch = p.start_cursor().epoch();
  s.start_cursor.window = p.start_cursor().window();
  s.start_cursor.row = p.start_cursor().row();
  s.has_start_cursor_step = p.start_cursor().has_step();
  s.start_cursor_step = p.start_cursor().step();
  return s;
}

std::optional<RankResume> FromProto(const v1::OpenStreamRequest& req) {
  if (!req.has_resume()) return std::nullopt;
  RankResume r;
  r.step = req.resume().step();
  r.has_cursor = req.resume().has_cursor();
  const v1::Cursor& c = req.resume().cursor();
  r.cursor.epoch = c.epoch();
  r.cursor.window = c.window();
  r.cursor.row = c.row();
  r.cursor_step = c.has_step() ? c.step() : r.step;
  return r;
}

void ToProto(const StreamSpec& s, v1::StreamSpec* p) {
  p->set_name(s.name);
  p->set_workload(s.workload);
  p->set_data(s.data);
  p->set_split(s.split);
  p->set_global_batch_size(s.global_batch_size);
  p->set_world_size(s.world_size);
  p->set_seed(s.seed);
  p->set_start_step(s.start_step);
  p->set_slots(s.slots);
  for (const auto& [k, v] : s.options) (*p->mutable_options())[k] = v;
  if (s.has_start_cursor) {
    p->mutable_start_cursor()->set_epoch(s.start_cursor.epoch);
    p->mutable_start_cursor()->set_window(s.start_cursor.window);
    p->mutable_start_cursor()->set_row(s.start_cursor.row);
    if (s.has_start_cursor_step) {
      p->mutable_start_cursor()->set_step(s.start_cursor_step);
    }
  }
}

std::optional<uint32_t> OwnerOf(const v1::OpenStreamRequest& req) {
  if (!req.has_owner_uid()) return std::nullopt;
  return req.owner_uid();
}

std::optional<uint32_t> OwnerOf(const v1::CloseStreamRequest& req) {
  if (!req.has_owner_uid()) return std::nullopt;
  return req.owner_uid();
}

namespace {

void TensorsToProto(const std::vector<TensorLayout>& tensors,
                    google::protobuf::RepeatedPtrField<v1::TensorInfo>* out) {
  for (const TensorLayout& t : tensors) {
    v1::TensorInfo* ti = out->Add();
    ti->set_name(t.name);
    ti->set_dtype(DTypeName(t.dtype));
    for (int64_t d : t.example_shape) ti->add_shape(d);
  }
}

}  // namespace

void ToProto(const PlanResult& r, v1::PlanResponse* p) {
  p->set_segment_bytes(r.segment_bytes);
  p->set_ranks(r.ranks);
  p->set_total_bytes(r.total_bytes);
  p->set_shm_free_bytes(r.shm_free_bytes);
  p->set_slot_bytes(r.slot_bytes);
  p->set_slots(r.slots);
  TensorsToProto(r.tensors, p->mutable_tensors());
}

void ToProto(const OpenResult& r, v1::OpenStreamResponse* p) {
  p->set_segment(r.segment);
  p->set_segment_bytes(r.segment_bytes);
  p->set_slots(r.slots);
  p->set_slot_bytes(r.slot_bytes);
  p->set_examples_per_epoch(r.examples_per_epoch);
  p->set_steps_per_epoch(r.steps_per_epoch);
  TensorsToProto(r.tensors, p->mutable_tensors());
  p->set_server_pid(r.server_pid);
  p->set_start_step(r.start_step);
  p->set_cursor_resume(r.cursor_resume);
  p->set_protocol_version(ServerProtocolVersion());
  p->set_server_version(kBatchdVersion);
}

namespace {

// One stream of GetStatus: its spec and owner, figures, indexing,
// read-ahead and ranks.
void StreamToProto(const StreamStatusData& st, v1::StreamStatus* sp) {
  ToProto(st.spec, sp->mutable_spec());
  sp->set_owner_uid(st.owner_uid);
  sp->set_owner_known(st.owner_known);
  sp->set_examples_per_second(st.examples_per_second);
  sp->set_bytes_per_second(st.bytes_per_second);
  sp->set_decode_errors(st.decode_errors);
  sp->set_skipped_examples(st.skipped_examples);
  sp->set_steps_per_epoch(st.steps_per_epoch);
  if (st.indexing.has_value()) {
    v1::IndexingStatus* ip = sp->mutable_indexing();
    ip->set_what(st.indexing->what);
    ip->set_unit(st.indexing->unit);
    ip->set_done(st.indexing->done);
    ip->set_total(st.indexing->total);
    ip->set_rate(st.indexing->rate);
    ip->set_eta_seconds(st.indexing->eta_seconds);
  }
  if (st.readahead.reads_issued + st.readahead.sync_reads > 0) {
    const ReadAheadStats& ra = st.readahead;
    v1::ReadAheadStatus* rp = sp->mutable_readahead();
    rp->set_depth_examples(ra.depth_examples);
    rp->set_bytes_in_flight(ra.bytes_in_flight);
    rp->set_bytes_buffered(ra.bytes_buffered);
    rp->set_budget_bytes(ra.budget_bytes);
    rp->set_reads_issued(ra.reads_issued);
    rp->set_hits(ra.hits);
    rp->set_sync_reads(ra.sync_reads);
    rp->set_failed_reads(ra.failed_reads);
    rp->set_io_wait_seconds(double(ra.io_wait_ns) / 1e9);
    rp->set_min_steps_ahead(ra.min_steps_ahead);
    rp->set_max_steps_ahead(ra.max_steps_ahead);
    rp->set_max_held_bytes(ra.max_held_bytes);
    rp->set_max_lane_share(ra.max_lane_share);
  }
  for (const RankStatusData& r : st.ranks) {
    v1::RankStatus* rp = sp->add_ranks();
    rp->set_rank(r.rank);
    rp->set_attached(r.attached);
    rp->set_client_pid(r.client_pid);
    rp->set_produced_step(r.produced_step);
    rp->set_consumed_step(r.consumed_step);
    rp->set_ring_fill(r.ring_fill);
    rp->set_ring_slots(r.ring_slots);
    rp->set_server_wait_seconds(r.server_wait_seconds);
    rp->set_client_wait_seconds(r.client_wait_seconds);
    rp->set_examples(r.examples);
    rp->set_bytes(r.bytes);
    rp->set_reattaches(r.reattaches);
  }
}

}  // namespace

void ToProto(const ServerStatusData& s, v1::GetStatusResponse* p) {
  p->set_pid(s.pid);
  p->set_version(s.version);
  p->set_uptime_seconds(s.uptime_seconds);
  p->set_threads(s.threads);
  p->set_worker_threads(s.worker_threads);
  p->set_rss_bytes(s.rss_bytes);
  p->set_ring_bytes(s.ring_bytes);
  p->set_draining(s.draining);
  p->set_readahead_bytes(s.readahead_bytes);
  p->set_readahead_threads(s.readahead_threads);
  p->set_max_streams_per_uid(s.max_streams_per_uid);
  p->set_max_ring_bytes_per_uid(s.max_ring_bytes_per_uid);
  p->set_max_model_bytes_per_uid(s.max_model_bytes_per_uid);
  for (const UidUsageData& u : s.uids) {
    v1::UidUsage* up = p->add_uids();
    up->set_uid(u.uid);
    up->set_known(u.known);
    up->set_exempt(u.exempt);
    up->set_streams(u.streams);
    up->set_ring_bytes(u.ring_bytes);
    up->set_model_bytes(u.model_bytes);
  }
  for (const StreamStatusData& st : s.streams) {
    StreamToProto(st, p->add_streams());
  }
}

}  // namespace batchd

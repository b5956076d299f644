// GetStatus; see status.h.
#include "server/status.h"

#include <unistd.h>

#include "base/clock.h"
#include "base/process.h"
#include "batchd/version.h"
#include "server/core_options.h"

namespace batchd {

namespace {

void IndexingToProto(const IndexProgress& p, v1::IndexingStatus* out) {
  out->set_what(p.what);
  out->set_unit(p.unit);
  out->set_done(p.done);
  out->set_total(p.total);
  out->set_rate(p.rate);
  out->set_eta_seconds(p.eta_seconds);
}

void ReadAheadToProto(const ReadAheadStats& ra, v1::ReadAheadStatus* out) {
  out->set_depth_examples(ra.depth_examples);
  out->set_bytes_in_flight(ra.bytes_in_flight);
  out->set_bytes_buffered(ra.bytes_buffered);
  out->set_budget_bytes(ra.budget_bytes);
  out->set_reads_issued(ra.reads_issued);
  out->set_hits(ra.hits);
  out->set_sync_reads(ra.sync_reads);
  out->set_failed_reads(ra.failed_reads);
  out->set_io_wait_seconds(double(ra.io_wait_ns) / 1e9);
  out->set_min_steps_ahead(ra.min_steps_ahead);
  out->set_max_steps_ahead(ra.max_steps_ahead);
  out->set_max_held_bytes(ra.max_held_bytes);
  out->set_max_lane_share(ra.max_lane_share);
}

// One rank's figures, counted across its attachments. What the client
// writes in its ring (released, its wait) is clamped to what can be and
// flagged; `invalid` counts each ring so flagged once.
void RankToProto(uint32_t rank, const RankSeat& rs, uint64_t now,
                 std::atomic<uint64_t>* invalid, v1::RankStatus* rd) {
  rd->set_rank(rank);
  rd->set_reattaches(rs.reattaches);
  rd->set_examples(rs.examples_before);
  rd->set_bytes(rs.bytes_before);
  if (rs.producer == nullptr) return;
  RankProducer& p = *rs.producer;
  const RingWriter& ring = p.ring();
  const RingWriter::ClientInfo c = ring.client();
  rd->set_attached(true);
  // The process the kernel named, where the daemon sees it.
  rd->set_client_pid(rs.holder.known && rs.holder.pid != 0 ? rs.holder.pid
                                                           : c.pid);
  const uint32_t slots = ring.geometry().slot_count;
  const uint64_t published = ring.published();
  uint64_t released = ring.released();
  uint64_t wait_ns = c.wait_ns;
  const uint64_t attached_for = now > rs.attached_ns ? now - rs.attached_ns : 0;
  bool impossible = false;
  if (released > published || published - released > slots) {
    released = released > published ? published : published - slots;
    impossible = true;
  }
  if (wait_ns > attached_for) {
    wait_ns = attached_for;
    impossible = true;
  }
  if (impossible) {
    rd->set_client_counters_invalid(true);
    if (!p.counters_invalid.exchange(true)) invalid->fetch_add(1);
  }
  rd->set_produced_step(p.start_step() + published);
  rd->set_consumed_step(p.start_step() + released);
  rd->set_ring_fill(uint32_t(published - released));
  rd->set_ring_slots(slots);
  rd->set_server_wait_seconds(double(p.server_wait_ns.load()) / 1e9);
  rd->set_client_wait_seconds(double(wait_ns) / 1e9);
  rd->set_examples(rd->examples() + p.examples.load());
  rd->set_bytes(rd->bytes() + p.bytes.load());
}

// One stream: its spec and owner, figures, indexing, read-ahead, ranks.
// `ra` receives its read-ahead figures (zeros when it is not read ahead).
void StreamToProto(const StreamKey& key, const Stream& stream, uint64_t now,
                   std::atomic<uint64_t>* invalid, v1::StreamStatus* st,
                   ReadAheadStats* ra) {
  *st->mutable_spec() = stream.spec;
  st->set_owner_uid(key.first);
  st->set_owner_known(key.first != kAnonymousUid);
  const StreamSetup& setup = *stream.setup;
  st->set_steps_per_epoch(setup.schedule->steps_per_epoch());
  st->set_decode_errors(setup.counters.decode_errors.load());
  st->set_skipped_examples(setup.counters.skipped_examples.load());
  if (const std::optional<IndexProgress> p = setup.workload->progress()) {
    IndexingToProto(*p, st->mutable_indexing());
  }
  *ra = setup.readahead != nullptr ? setup.readahead->stats()
                                    : ReadAheadStats();
  if (ra->reads_issued + ra->sync_reads > 0) {
    ReadAheadToProto(*ra, st->mutable_readahead());
  }
  // Totals over every seat; rows for the first kRankRowsPerStream,
  // attached ones first.
  uint64_t examples = stream.forgotten_examples, bytes = stream.forgotten_bytes;
  uint32_t attached = 0, listed = 0;
  for (bool want_attached : {true, false}) {
    for (const auto& [rank, rs] : stream.ranks) {
      if ((rs.producer != nullptr) != want_attached) continue;
      attached += want_attached;
      v1::RankStatus row;
      RankToProto(rank, rs, now, invalid, &row);
      examples += row.examples();
      bytes += row.bytes();
      if (listed < kRankRowsPerStream) {
        *st->add_ranks() = std::move(row);
        ++listed;
      }
    }
  }
  st->set_attached_ranks(attached);
  st->set_ranks_not_listed(uint32_t(stream.ranks.size()) - listed);
  st->set_examples(examples);
  st->set_bytes(bytes);
  if (const ShareMember* share = setup.share.get()) {
    st->set_share_group(share->group_id());
    st->set_share_group_streams(share->group_streams());
    st->set_fills_made(share->fills_made());
    st->set_fills_shared(share->fills_shared());
  }
  const double age = double(now - stream.created_ns) / 1e9;
  if (age > 0) {
    st->set_examples_per_second(double(examples) / age);
    st->set_bytes_per_second(double(bytes) / age);
  }
}

}  // namespace

v1::GetStatusResponse StatusReporter::Status(
    std::vector<ReadAheadStats>* readahead) const {
  v1::GetStatusResponse s;
  s.set_pid(uint32_t(getpid()));
  s.set_version(kBatchdVersion);
  const uint64_t now = MonotonicNanos();
  s.set_uptime_seconds(double(now - start_ns_) / 1e9);
  s.set_threads(uint32_t(SelfThreadCount()));
  s.set_worker_threads(uint32_t(engine_.threads()));
  s.set_rss_bytes(SelfRssBytes(false));
  s.set_readahead_bytes(options_.readahead_bytes);
  s.set_readahead_threads(uint32_t(readahead_.io_threads()));
  if (const FillShare* share = engine_.share()) {
    const FillShare::Stats fs = share->stats();
    s.set_share_window_bytes(fs.budget_bytes);
    s.set_share_held_bytes(fs.held_bytes);
    s.set_share_max_held_bytes(fs.max_held_bytes);
    s.set_share_groups(fs.groups_sharing);
  }
  s.set_max_streams_per_uid(options_.max_streams_per_uid);
  s.set_max_ring_bytes_per_uid(options_.max_ring_bytes_per_uid);
  s.set_max_model_bytes_per_uid(options_.max_model_bytes_per_uid);
  s.set_draining(registry_.draining());
  uint64_t ring_bytes = 0;
  registry_.ForEachStream([&](const StreamKey& key, const Stream& stream) {
    // Streams come in key order: each owner's are together.
    if (s.uids().empty() || s.uids().rbegin()->uid() != key.first) {
      v1::UidUsage* u = s.add_uids();
      u->set_uid(key.first);
      u->set_known(key.first != kAnonymousUid);
    }
    AddToUsage(stream, s.mutable_uids()->Mutable(s.uids_size() - 1));
    ring_bytes += AttachedRingBytes(stream);
    ReadAheadStats ra;
    StreamToProto(key, stream, now, &invalid_counters_, s.add_streams(), &ra);
    if (readahead != nullptr) readahead->push_back(ra);
  });
  s.set_ring_bytes(ring_bytes);
  s.set_client_counters_invalid(invalid_counters_.load());
  return s;
}

}  // namespace batchd

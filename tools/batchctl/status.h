// batchctl status: the daemon, its streams and ranks, once or --watch'ed
// with the current rates. The pieces with logic are here for the tests.
#ifndef BATCHD_TOOLS_BATCHCTL_STATUS_H_
#define BATCHD_TOOLS_BATCHCTL_STATUS_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "batchd/v1/batchd.pb.h"
#include "tools/batchctl/cli.h"
#include "tools/batchctl/output.h"

namespace batchd::batchctl {

struct StatusArgs {
  Connection connection;
  bool json = false;
  bool watch = false;
  double interval_seconds = 2;  // with watch; at least 0.1
};
// argv[0] is "status".
absl::StatusOr<StatusArgs> ParseStatusArgs(int argc, char** argv);

// Examples/s and bytes/s between two GetStatus answers of one daemon.
struct Rate {
  double examples_per_second = 0;
  double bytes_per_second = 0;
};
struct StreamRates {
  Rate stream;  // the sum over its ranks
  std::map<uint32_t, Rate> ranks;
};
// A stream as the daemon keys it: (owner uid, name).
using StreamId = std::pair<uint32_t, std::string>;
StreamId IdOf(const v1::StreamStatus& s);
struct Rates {
  double interval_seconds = 0;  // the daemon's time between the answers
  // Streams in both answers whose counters did not go back (a stream closed
  // and opened again in between starts over and has no rate yet).
  std::map<StreamId, StreamRates> streams;
};

// The current rates from two consecutive answers; nullopt when they are not
// of the same daemon process or no time passed. The interval is the
// difference of the daemon's uptimes, so gRPC latency does not skew it.
std::optional<Rates> CurrentRates(const v1::GetStatusResponse& prev,
                                  const v1::GetStatusResponse& cur);

// A read-ahead stream's line: depth, bytes in flight and buffered against
// its budget, hits, reads workers made themselves, failed reads, the time
// workers waited for bytes, and how many steps ahead reads were issued.
std::string FormatReadAhead(const v1::ReadAheadStatus& ra);

// "1000", or "tcp" for the streams of anonymous TCP callers.
std::string OwnerName(uint32_t uid, bool known);

// Each owner's streams, ring bytes and model bytes against the quotas per
// uid, as a table under a line that gives the quotas; "" without owners.
std::string FormatOwners(const v1::GetStatusResponse& st);

// A stream's fills, when it is in a group of streams that share them
// (StreamStatus.share_group): the items its workers filled and those it
// took over from another's fill, and the other streams of its group in `st`
// that have a rank attached; "" when it shares none.
std::string FormatSharing(const v1::GetStatusResponse& st,
                          const v1::StreamStatus& s);

// The status: the daemon's line, the owners' table, and a table per
// stream (whose first line names its owner). With `rates`, the stream's
// examples/s and bytes/s are the current ones, and each rank's are shown
// too.
std::string FormatStatus(const v1::GetStatusResponse& st,
                         const Rates* rates = nullptr);

// [{"stream", "owner_uid", "examples_per_second", "bytes_per_second",
//   "ranks": [...]}]
Json RatesToJson(const Rates& rates);

}  // namespace batchd::batchctl

#endif  // BATCHD_TOOLS_BATCHCTL_STATUS_H_

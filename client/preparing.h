// OpenStream's "still preparing" answer (proto/batchd/v1/batchd.proto,
// message Preparing): a stream whose preparation (its data listed or
// indexed for the first time) outlasts the call is answered UNAVAILABLE,
// with a v1::Preparing in the trailing metadata kPreparingMetadata; asking
// again within its grace_seconds joins the preparation. The daemon makes
// the answer (server/stream_preparations.h), the Loader waits on it
// (client/stream_open.h); both describe it with DescribePreparing.
//
// Thread safety: functions of their arguments alone.
#ifndef BATCHD_CLIENT_PREPARING_H_
#define BATCHD_CLIENT_PREPARING_H_

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "batchd/v1/batchd.pb.h"

namespace batchd {

// The trailing metadata that carries the answer (binary: a serialized
// v1::Preparing).
inline constexpr char kPreparingMetadata[] = "batchd-preparing-bin";
// The absl::Status payload that carries it from the core, which knows no
// gRPC, to the gRPC layer.
inline constexpr char kPreparingPayload[] =
    "type.googleapis.com/batchd.v1.Preparing";

// "listing imagenet/train: 300/1000 folders (30%), 45 s so far" (what the
// preparation said it does), or "7 s so far" while it has said nothing.
std::string DescribePreparing(const v1::Preparing& p);

// The "still preparing" answer `s` carries (its kPreparingPayload), if any.
std::optional<v1::Preparing> PreparingOf(const absl::Status& s);

}  // namespace batchd

#endif  // BATCHD_CLIENT_PREPARING_H_

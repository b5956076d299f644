// The LoaderOptions of a synthetic stream as the suites that run a real
// daemon open it, and test_rpc_caller (a program of its own, without
// GoogleTest) too: header-only, for whatever links the client.
#ifndef BATCHD_TESTS_SYNTHETIC_STREAM_H_
#define BATCHD_TESTS_SYNTHETIC_STREAM_H_

#include <cstdint>
#include <string>

#include "batchd/loader.h"

namespace batchd {
namespace testutil {

// Rank `rank` of `world` of the synthetic stream `stream` on `server`:
// global batch `global_batch_size` of `examples` examples of
// `payload_bytes` bytes each, 2 slots, a batch waited for 20 s at most.
inline LoaderOptions SyntheticStream(const std::string& server,
                                     const std::string& stream,
                                     uint64_t global_batch_size, int world,
                                     int rank, uint64_t examples = 1000,
                                     uint64_t payload_bytes = 64) {
  LoaderOptions o;
  o.server = server;
  o.stream = stream;
  o.global_batch_size = global_batch_size;
  o.world_size = world;
  o.rank = rank;
  o.slots = 2;
  o.options = {{"examples", std::to_string(examples)},
               {"payload_bytes", std::to_string(payload_bytes)}};
  o.timeout_seconds = 20;
  return o;
}

}  // namespace testutil
}  // namespace batchd

#endif  // BATCHD_TESTS_SYNTHETIC_STREAM_H_

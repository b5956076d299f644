// A trainer stand-in for fault tests: a separate process that opens one rank
// of a synthetic stream and prints "step <s> ids <id> <id> ..." per batch.
// Usage: test_consumer SERVER STREAM G W RANK START_STEP STEPS SLEEP_MS
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "batchd/loader.h"

int main(int argc, char** argv) {
  if (argc != 9) {
    fprintf(stderr, "usage: %s SERVER STREAM G W RANK START STEPS SLEEP_MS\n",
            argv[0]);
    return 2;
  }
  batchd::LoaderOptions o;
  o.server = argv[1];
  o.stream = argv[2];
  o.global_batch_size = strtoull(argv[3], nullptr, 10);
  o.world_size = atoi(argv[4]);
  o.rank = atoi(argv[5]);
  o.start_step = strtoull(argv[6], nullptr, 10);
  const long steps = atol(argv[7]);
  const int sleep_ms = atoi(argv[8]);
  o.seed = 1;
  o.slots = 2;
  o.options = {{"examples", "1000"}, {"payload_bytes", "40"}};
  auto loader = batchd::Loader::Open(o);
  if (!loader.ok()) {
    fprintf(stderr, "%s\n", loader.status().ToString().c_str());
    return 1;
  }
  setvbuf(stdout, nullptr, _IOLBF, 0);
  for (long i = 0; steps < 0 || i < steps; ++i) {
    auto b = (*loader)->Next();
    if (!b.ok()) {
      fprintf(stderr, "%s\n", b.status().ToString().c_str());
      return 1;
    }
    printf("step %llu ids", static_cast<unsigned long long>(b->step()));
    const batchd::Tensor* ids = b->tensor("ids");
    for (size_t k = 0; k < ids->nbytes / 8; ++k) {
      uint64_t v;
      memcpy(&v, static_cast<const char*>(ids->data) + 8 * k, 8);
      printf(" %llu", static_cast<unsigned long long>(v));
    }
    printf("\n");
    if (sleep_ms > 0) usleep(sleep_ms * 1000);
  }
  return 0;
}

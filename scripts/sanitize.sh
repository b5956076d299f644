#!/usr/bin/env bash
# Builds and runs the GoogleTest suites under AddressSanitizer and then
# ThreadSanitizer (build-asan/, build-tsan/). Slower than scripts/test.sh;
# run before changing the ring, the engine or the core.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
for san in address thread; do
  BATCHD_BUILD=build-${san:0:1}san scripts/build.sh -DBATCHD_SANITIZE=$san \
    -DBATCHD_WITH_TORCH=OFF -DBATCHD_WITH_PYTHON=OFF
  (cd build-${san:0:1}san && TSAN_OPTIONS="suppressions=$PWD/../tests/tsan.supp halt_on_error=1" ctest --output-on-failure -j2)
done

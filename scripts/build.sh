#!/usr/bin/env bash
# Configures and builds batchd into build/ (or $BATCHD_BUILD). Extra
# arguments go to cmake, e.g. -DBATCHD_SANITIZE=address.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BATCHD_BUILD:-build}
# The Python module is built for Debian's interpreter, the one with torch.
# Compiles are cached where ccache exists (a rebuild recompiles only what
# changed, also in another build directory or checkout of the tree).
source scripts/ccache.sh
cmake -S . -B "$BUILD" -G Ninja -DPython3_EXECUTABLE=/usr/bin/python3 \
  "${ccache_cmake[@]}" "$@" >/dev/null
ninja -C "$BUILD"

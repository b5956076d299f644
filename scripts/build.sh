#!/usr/bin/env bash
# Configures and builds batchd into build/ (or $BATCHD_BUILD). Extra
# arguments go to cmake, e.g. -DBATCHD_SANITIZE=address.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BATCHD_BUILD:-build}
# The Python module is built for Debian's interpreter, the one with torch.
# Compiles are cached where ccache exists (a rebuild recompiles only what
# changed, also in another checkout of the tree).
launcher=()
if command -v ccache >/dev/null; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
fi
cmake -S . -B "$BUILD" -G Ninja -DPython3_EXECUTABLE=/usr/bin/python3 \
  "${launcher[@]}" "$@" >/dev/null
ninja -C "$BUILD"

#!/usr/bin/env bash
# Installs the dependencies, builds, and runs every test: the GoogleTest
# suites through ctest, then the Python suite through Debian's pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
BUILD=${BATCHD_BUILD:-build}
(cd "$BUILD" && ctest --output-on-failure -j2)
BATCHD_BIN="$PWD/$BUILD/server/batchd" PYTHONPATH="$PWD/$BUILD/python" \
  /usr/bin/python3 -m pytest -q tests/python

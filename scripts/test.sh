#!/usr/bin/env bash
# Installs the dependencies, builds, and runs every test: the GoogleTest
# suites through ctest, the Python suite through Debian's pytest, then the
# Python package installed by pip into venvs (scripts/test-pip.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
BUILD=${BATCHD_BUILD:-build}
(cd "$BUILD" && ctest --output-on-failure -j2)
BATCHD_BIN="$PWD/$BUILD/server/batchd" PYTHONPATH="$PWD/$BUILD/python" \
  /usr/bin/python3 -m pytest -q tests/python
scripts/test-pip.sh

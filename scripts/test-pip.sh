#!/usr/bin/env bash
# The Python package as users get it: `pip install .` into fresh venvs, then
# the Python tests against the daemon of build/ (scripts/build.sh first).
#
# 1. A venv of another Python than Debian's (BATCHD_VENV_PYTHON, else pyenv's
#    3.12, else another pyenv 3.9+) with numpy alone: every Python test that
#    needs no torch runs (the others skip); then jax[cpu] from PyPI joins and
#    the format tests run again, with JAX.
# 2. A venv of Debian's /usr/bin/python3 that sees Debian's torch 1.13
#    (--system-site-packages): the AlgoPerf drop-in and the format tests from
#    the installed package instead of build/python.
#
# Needs PyPI (the build backend, pybind11, numpy, pytest, jax). Stage 1 is
# skipped, saying so, where no other Python exists. Prints each stage's time.
#
# Usage: scripts/test-pip.sh [--wheels DIR]
#   --wheels DIR  installs DIR's manylinux wheels (scripts/build-wheel.sh, for
#                 both Pythons) instead of building with `pip install .`:
#                 CI builds them just before (scripts/test.sh --ci), from the
#                 sdist for each of these Pythons, and builds from the
#                 checkout once more in tests/container/wheel_check.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
WHEELS=""
case "${1:-}" in
  --wheels) WHEELS=${2:?--wheels DIR} ;;
  "") ;;
  *) echo "usage: scripts/test-pip.sh [--wheels DIR]" >&2; exit 2 ;;
esac
BUILD=${BATCHD_BUILD:-build}
export BATCHD_BIN="$PWD/$BUILD/server/batchd"
[ -x "$BATCHD_BIN" ] || { echo "batchd: build first (scripts/build.sh)" >&2; exit 1; }
# The tests must import the installed package, never build/python.
unset PYTHONPATH
# Compiles are cached where ccache exists (a second run rebuilds nothing).
source scripts/ccache.sh
PIP_FLAGS=(-q --disable-pip-version-check)

# What `pip install` is given for the venv's Python: the checkout, or that
# Python's wheel from --wheels.
package() {
  [ -n "$WHEELS" ] || { echo .; return; }
  local tag wheel
  tag=$("$1" -c 'import sys; print("cp%d%d" % sys.version_info[:2])')
  wheel=$(ls "$WHEELS"/batchd-*-$tag-$tag-manylinux_2_34_x86_64.whl 2>/dev/null | tail -n 1 || true)
  [ -n "$wheel" ] || { echo "test-pip: no $tag wheel in $WHEELS (scripts/build-wheel.sh)" >&2; exit 1; }
  echo "$wheel"
}

# A Python >= 3.9 that is not Debian's: pyenv's 3.12 first (the issue's
# target), then any other.
other_python() {
  if [ -n "${BATCHD_VENV_PYTHON:-}" ]; then
    echo "$BATCHD_VENV_PYTHON"
    return
  fi
  local roots=("${PYENV_ROOT:-}" "$HOME/.pyenv" /root/.pyenv) root v
  for pattern in '3.12.*' '3.13.*' '3.10.*' '3.9.*' '3.1[4-9].*'; do
    for root in "${roots[@]}"; do
      [ -n "$root" ] && [ -d "$root/versions" ] || continue
      for v in $(ls -d "$root"/versions/$pattern 2>/dev/null | sort -V -r); do
        if [ -x "$v/bin/python3" ] && "$v/bin/python3" -c 'import venv' 2>/dev/null; then
          echo "$v/bin/python3"
          return
        fi
      done
    done
  done
}

stage_start=0
begin() { stage_start=$(date +%s); echo "batchd: $*"; }
took() { echo "batchd: $* took $(( $(date +%s) - stage_start )) s"; }

PY=$(other_python)
if [ -z "$PY" ]; then
  echo "batchd: SKIPPED the venv stage of another Python: none found besides" \
       "/usr/bin/python3 (set BATCHD_VENV_PYTHON, or install pyenv's 3.12)"
else
  VERSION=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
  VENV="$PWD/$BUILD/venv-py$VERSION"
  begin "venv of $PY (Python $VERSION), numpy only"
  rm -rf "$VENV"
  "$PY" -m venv "$VENV"
  "$VENV/bin/pip" install "${PIP_FLAGS[@]}" numpy pytest
  took "venv with numpy and pytest"
  pkg=$(package "$VENV/bin/python")
  begin "pip install $pkg for Python $VERSION"
  "$VENV/bin/pip" install "${PIP_FLAGS[@]}" "$pkg"
  took "pip install $pkg for Python $VERSION"
  # Imported from outside the source tree; torch absent, batchd still loads.
  (cd / && "$VENV/bin/python" -c '
import sys, batchd
assert "torch" not in sys.modules and batchd.__file__.startswith(sys.prefix), batchd.__file__
print("batchd", batchd.__version__, "from", batchd.__file__)')
  begin "Python tests without torch, Python $VERSION"
  "$VENV/bin/python" -m pytest -q tests/python
  took "tests without torch"
  begin "jax[cpu] from PyPI, format tests with JAX"
  "$VENV/bin/pip" install "${PIP_FLAGS[@]}" "jax[cpu]"
  "$VENV/bin/python" -c 'import jax; print("jax", jax.__version__)'
  "$VENV/bin/python" -m pytest -q tests/python/test_formats.py
  took "jax install and format tests"
fi

VENV="$PWD/$BUILD/venv-debian"
begin "venv of /usr/bin/python3 with Debian's torch"
rm -rf "$VENV"
/usr/bin/python3 -m venv --system-site-packages "$VENV"
pkg=$(package "$VENV/bin/python")
"$VENV/bin/pip" install "${PIP_FLAGS[@]}" "$pkg"
took "venv and pip install $pkg for Debian's Python"
begin "AlgoPerf drop-in and formats from the installed package, torch $(
  /usr/bin/python3 -c 'import torch; print(torch.__version__)')"
"$VENV/bin/python" -m pytest -q tests/python/test_algoperf.py tests/python/test_formats.py
took "installed-package tests with Debian's torch"

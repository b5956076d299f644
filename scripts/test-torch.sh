#!/usr/bin/env bash
# The Python client beside PyPI's current torch (2.x), as most users have it:
# the venv of scripts/torch-venv.sh (cached outside the clone), the
# manylinux wheel of scripts/build-wheel.sh installed into it with pip, then
# the Python suites that use torch (the AlgoPerf contract and drop-in, the
# formats, the loader, torchvision's ImageNet transforms, the AlgoPerf
# example trainer) and
# DDP jobs launched by torch's own torchrun (tests/python/test_torchrun.py:
# disjoint, complete slices every step; Ctrl-C; a killed rank;
# tests/python/test_multinode.py: W = 4 over two daemons standing for two
# nodes, one of them killed and restarted, a checkpoint resumed at W = 2 on
# the other).
# Debian's torch 1.13 keeps its own runs (scripts/test.sh, scripts/test-pip.sh).
#
# Usage: scripts/test-torch.sh [PYTHON]   (default: pyenv's 3.12)
# Needs scripts/build.sh (the daemon) and PyPI. Prints each stage's time.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BATCHD_BUILD:-build}
export BATCHD_BIN="$PWD/$BUILD/server/batchd"
[ -x "$BATCHD_BIN" ] || { echo "batchd: build first (scripts/build.sh)" >&2; exit 1; }
unset PYTHONPATH  # the installed package, never build/python
# A rank that dies of a signal prints every Python thread's stack: where it
# was is then in CI's log.
export PYTHONFAULTHANDLER=1
stage_start=$SECONDS
took() { echo "test-torch: $* took $((SECONDS - stage_start)) s"; stage_start=$SECONDS; }

VENV=$(scripts/torch-venv.sh ${1:+"$1"})
PY="$VENV/bin/python"
TAG=$("$PY" -c 'import sys; print("cp%d%d" % sys.version_info[:2])')
took "torch venv $VENV"
wheel=$(ls "${BATCHD_DIST:-dist}"/batchd-*-$TAG-$TAG-manylinux_2_34_x86_64.whl 2>/dev/null | tail -n 1 || true)
if [ -z "$wheel" ]; then
  base=$("$PY" -c 'import sys; print(sys._base_executable)')
  scripts/build-wheel.sh "$base"
  wheel=$(ls "${BATCHD_DIST:-dist}"/batchd-*-$TAG-$TAG-manylinux_2_34_x86_64.whl | tail -n 1)
fi
"$VENV/bin/pip" install -q --disable-pip-version-check --no-deps --force-reinstall "$wheel"
(cd / && "$PY" -c '
import sys, torch, batchd
assert batchd.__file__.startswith(sys.prefix), batchd.__file__
print("batchd", batchd.__version__, "from", batchd.__file__, "beside torch", torch.__version__)')
took "pip install $(basename "$wheel")"
"$PY" -m pytest -q tests/python/test_torchrun.py tests/python/test_multinode.py
took "torchrun DDP tests, one node and two"
# Of test_trainers.py, the Python example alone: its C++ trainers are
# build/'s (Debian's libtorch), whatever Python runs them, and ran in
# scripts/test.sh's pytest stage.
"$PY" -m pytest -q tests/python/test_algoperf_contract.py tests/python/test_algoperf.py \
  tests/python/test_formats.py tests/python/test_loader.py tests/python/test_imagenet.py \
  tests/python/test_trainers.py::test_algoperf_example_trains_through_the_drop_in
took "torch suites with torch $("$PY" -c 'import torch; print(torch.__version__)')"

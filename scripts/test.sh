#!/usr/bin/env bash
# Installs the dependencies, builds, and runs every test: the GoogleTest
# suites through ctest, the Python suite through Debian's pytest, a
# 60-second soak (tests/soak.py: clients killed and stopped at random, every
# batch checked against an independent sampler), then the Python package
# installed by pip into venvs (scripts/test-pip.sh). Compiles go through
# ccache (scripts/ccache.sh), shared by every build directory.
#
# Usage: scripts/test.sh [--ci]
#   --ci  also runs a second soak that kills (-9) and restarts the daemon
#         under synthetic, imagenet and wmt streams (tests/soak.py
#         --kill-daemon, as long as the first; it prints the stall per
#         restart), builds and runs the C++ suites under AddressSanitizer + UBSan
#         (scripts/sanitize.sh --fuzz asan, build-asan/), runs every fuzz
#         target of that build for a fixed number of inputs (scripts/fuzz.sh), builds
#         the manylinux wheels (scripts/build-wheel.sh, alongside ctest and
#         pytest; the pip stage installs them instead of compiling again) and checks them in a
#         bare container (tests/container/wheel_check.sh), builds and runs
#         the container image (scripts/container-check.sh), runs the torch
#         suites and torchrun under PyPI's torch (scripts/test-torch.sh) and
#         builds against its CUDA libtorch (scripts/build-cuda.sh, alongside
#         the container stages): what .ci/run does; docs/testing.md says
#         what each stage runs and the CI budget. ThreadSanitizer stays in scripts/sanitize.sh tsan.
# BATCHD_SOAK_SECONDS changes the soaks' length (0 skips them).
set -euo pipefail
cd "$(dirname "$0")/.."
ci=0
for arg in "$@"; do
  case "$arg" in
    --ci) ci=1 ;;
    *) echo "usage: scripts/test.sh [--ci]" >&2; exit 2 ;;
  esac
done
stage_start=$SECONDS
stage() {
  echo "== test.sh: $1 took $((SECONDS - stage_start)) s"
  stage_start=$SECONDS
}
scripts/install-deps.sh
if [ "$ci" = 1 ]; then
  # The slow downloads come while the C++ builds: PyPI's torch (3 GB), the
  # reference packages (TensorFlow, datasets, ...: for the tests that
  # compare with AlgoPerf's own pipelines) and the containers' base image
  # (mmdebstrap from Debian's mirror). The stages that need them wait for
  # them (scripts/torch-venv.sh and reference-venv.sh hold a lock).
  mkdir -p build
  scripts/torch-venv.sh > build/torch-venv.log 2>&1 &
  torch_venv_pid=$!
  scripts/reference-venv.sh > build/reference-venv.log 2>&1 &
  scripts/container-check.sh --base-only > build/base-image.log 2>&1 &
  base_image_pid=$!
fi
scripts/build.sh
stage build
if [ "$ci" = 1 ]; then
  # The manylinux wheels, which the pip stage installs, are built while
  # ctest and pytest run (mostly downloads, venvs and auditwheel; ccache
  # gives the second Python the first one's compiles), and are waited for
  # before the soaks, which run alone.
  scripts/build-wheel.sh /usr/bin/python3 \
    "$(ls -d /root/.pyenv/versions/3.12.*/bin/python3 | sort -V | tail -n 1)" \
    > build/wheels.log 2>&1 &
  wheels_pid=$!
fi
BUILD=${BATCHD_BUILD:-build}
# The Python suites' shared data sets (tests/python/conftest.py) are made
# once for the whole run, not once per pytest session.
export BATCHD_TEST_DATA="$PWD/$BUILD/test-data"
rm -rf "$BATCHD_TEST_DATA"
(cd "$BUILD" && ctest --output-on-failure -j2)
stage ctest
export BATCHD_BIN="$PWD/$BUILD/server/batchd" PYTHONPATH="$PWD/$BUILD/python"
/usr/bin/python3 -m pytest -q tests/python
stage pytest
if [ "$ci" = 1 ]; then
  wheels_rc=0
  wait "$wheels_pid" || wheels_rc=$?
  cat build/wheels.log
  [ "$wheels_rc" = 0 ] || { echo "test.sh: scripts/build-wheel.sh failed" >&2; exit 1; }
  stage "wheels (manylinux; what was left of them after pytest)"
fi
soak_seconds=${BATCHD_SOAK_SECONDS:-60}
if [ "$soak_seconds" != 0 ]; then
  /usr/bin/python3 tests/soak.py --seconds "$soak_seconds"
  stage soak
  if [ "$ci" = 1 ]; then
    /usr/bin/python3 tests/soak.py --kill-daemon --seconds "$soak_seconds"
    stage "soak, daemon restarts"
  fi
fi
if [ "$ci" = 1 ]; then
  scripts/test-pip.sh --wheels dist
else
  scripts/test-pip.sh
fi
stage pip
if [ "$ci" = 1 ]; then
  # One clang build for both: the suites under ASan + UBSan, and the fuzz
  # targets (everything compiled with coverage as well).
  BATCHD_SANITIZE_SKIP_DEPS=1 scripts/sanitize.sh --fuzz asan
  stage "sanitize asan"
  BATCHD_FUZZ_SKIP_DEPS=1 BATCHD_FUZZ_BUILD=build-asan scripts/fuzz.sh
  stage fuzz
  # Where users run it: the wheels in a bare container, the image, PyPI's
  # torch and CUDA. The CUDA build compiles while the container stages
  # mostly wait on podman and Debian's mirror; the torch stage runs after
  # both, alone.
  wait "$torch_venv_pid" || { cat build/torch-venv.log >&2; echo "test.sh: the torch venv failed" >&2; exit 1; }
  cat build/torch-venv.log
  scripts/build-cuda.sh > build/build-cuda.log 2>&1 &
  build_cuda_pid=$!
  wait "$base_image_pid" || { cat build/base-image.log >&2; echo "test.sh: the base image failed" >&2; exit 1; }
  cat build/base-image.log
  tests/container/wheel_check.sh
  stage "wheel in a bare container, read-only install"
  scripts/container-check.sh
  stage "container image, sidecar, kube play"
  build_cuda_rc=0
  wait "$build_cuda_pid" || build_cuda_rc=$?
  cat build/build-cuda.log
  [ "$build_cuda_rc" = 0 ] || { echo "test.sh: scripts/build-cuda.sh failed" >&2; exit 1; }
  stage "CUDA libtorch build (what was left of it after the container stages)"
  scripts/test-torch.sh
  stage "PyPI torch and torchrun"
fi
echo "== test.sh: all passed in $SECONDS s"

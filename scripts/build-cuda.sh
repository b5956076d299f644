#!/usr/bin/env bash
# The C++ side built against what GPU users link: PyPI's CUDA build of
# libtorch (from the torch wheel of scripts/torch-venv.sh: libtorch_cuda,
# c10_cuda, c10d with NCCL) and the CUDA toolkit of /usr/local/cuda (its
# nvcc and headers; Torch's CMake files want a toolkit). Builds into
# build-cuda/ (or $BATCHD_CUDA_BUILD) the DDP trainers (examples/, with the
# NCCL process group), batchd/torch.h with its DeviceFeeder (pinned ring,
# asynchronous copies) in torch_adapter_test, and, where build/ has no
# daemon (or $BATCHD_BIN names none), the daemon that test starts. No GPU is needed: it checks that the trainers link
# ProcessGroupNCCL and libtorch_cuda, that they start (--help), and runs
# torch_adapter_test on the CPU. scripts/gpu-check is the run on a GPU.
#
# Usage: scripts/build-cuda.sh [PYTHON]   (the torch venv's Python)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BATCHD_CUDA_BUILD:-build-cuda}
CUDA=${CUDA_HOME:-/usr/local/cuda}
[ -x "$CUDA/bin/nvcc" ] || { echo "build-cuda: no CUDA toolkit at $CUDA (set CUDA_HOME)" >&2; exit 1; }
start=$SECONDS
VENV=$(scripts/torch-venv.sh ${1:+"$1"})
read -r TORCH_VERSION TORCH_CUDA PREFIX < <("$VENV/bin/python" -c '
import torch, torch.utils
print(torch.__version__, torch.version.cuda, torch.utils.cmake_prefix_path)')
[ "$TORCH_CUDA" != None ] || { echo "build-cuda: torch $TORCH_VERSION is a CPU build" >&2; exit 1; }
echo "build-cuda: torch $TORCH_VERSION (CUDA $TORCH_CUDA) against $("$CUDA/bin/nvcc" --version | sed -n 's/.*release \([0-9.]*\).*/CUDA toolkit \1/p') at $CUDA"
# ccache: what does not include torch (base, proto, the client, the
# workloads) is compiled as in build/ and found there.
source scripts/ccache.sh
# torch_adapter_test's daemon: build/'s when it is there (the daemon does not
# link torch: a second build of it here would only cost minutes).
daemon_flags=() targets=(batchd)
DAEMON=${BATCHD_BIN:-$PWD/build/server/batchd}
if [ -x "$DAEMON" ]; then
  daemon_flags=(-DBATCHD_TORCH_TEST_EXTERNAL_DAEMON=ON) targets=()
  export BATCHD_TEST_DAEMON=$DAEMON
else
  daemon_flags=(-DBATCHD_TORCH_TEST_EXTERNAL_DAEMON=OFF)
fi
# TORCH_CUDA_ARCH_LIST: Torch's CMake files otherwise probe for a GPU and,
# finding none, list every architecture; nothing here is compiled by nvcc.
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_PREFIX_PATH="$PREFIX" \
  -DCUDAToolkit_ROOT="$CUDA" -DCMAKE_CUDA_COMPILER="$CUDA/bin/nvcc" \
  -DTORCH_CUDA_ARCH_LIST=9.0 -DBATCHD_WITH_PYTHON=OFF "${ccache_cmake[@]}" \
  "${daemon_flags[@]}" \
  > "$BUILD.configure.log" 2>&1 \
  || { cat "$BUILD.configure.log" >&2; echo "build-cuda: configure failed" >&2; exit 1; }
rm -f "$BUILD.configure.log"
ninja -C "$BUILD" imagenet_resnet_ddp wmt_transformer_ddp torch_adapter_test "${targets[@]}"
for t in imagenet_resnet_ddp wmt_transformer_ddp; do
  bin="$BUILD/examples/$t"
  # (grep -q on a pipe would end it early: pipefail then fails the test)
  grep -q 'libtorch_cuda.so' <<< "$(readelf -d "$bin")" \
    || { echo "build-cuda: $t does not link libtorch_cuda" >&2; exit 1; }
  grep -q 'c10d::ProcessGroupNCCL::ProcessGroupNCCL' <<< "$(nm -C --undefined-only "$bin")" \
    || { echo "build-cuda: $t has no NCCL process group" >&2; exit 1; }
  "$bin" --help > /dev/null \
    || { echo "build-cuda: $t --help failed (its CUDA libraries do not load?)" >&2; exit 1; }
done
echo "build-cuda: torch_adapter_test against ${BATCHD_TEST_DAEMON:-the daemon of $BUILD}"
"$BUILD/tests/torch_adapter_test"
echo "build-cuda: trainers link ProcessGroupNCCL and libtorch_cuda; torch_adapter_test passed; took $((SECONDS - start)) s"

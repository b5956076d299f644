#!/usr/bin/env bash
# Prints the path of a venv that holds the packages AlgoPerf's pipelines are
# built from (TensorFlow, Hugging Face datasets and pyarrow, pyfarmhash,
# h5py, jraph and JAX), which the tests use to compute reference batches
# independently of batchd (tests/python/reference/). Created when missing
# under $BATCHD_CI_CACHE (default /var/cache/batchd-ci) as venv-ref-<X.Y>
# for PYTHON (default: pyenv's 3.12, else the first python3 on PATH); a
# second run reuses it (seconds), a fresh machine creates it (about 2 GB
# from PyPI, about a minute). The tests run it themselves
# (helpers.reference_python); scripts/test.sh --ci starts it early.
#
#   VENV=$(scripts/reference-venv.sh [PYTHON])
#
# Only the venv's path goes to stdout; what it does goes to stderr.
set -euo pipefail
# shellcheck source=scripts/venv.sh
. "$(dirname "$0")/venv.sh"
venv_open reference-venv ref "${1:-}"
PACKAGES="numpy tensorflow-cpu pyarrow datasets pyfarmhash h5py jax jraph"
if venv_reuse "$PACKAGES"; then
  echo "$VENV"
  exit 0
fi
echo "reference-venv: creating $VENV for $PY" >&2
venv_create "$PACKAGES"
venv_done

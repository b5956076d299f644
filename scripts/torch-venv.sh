#!/usr/bin/env bash
# Prints the path of a venv that holds PyPI's current torch (the default,
# CUDA wheel: libtorch with NCCL, and the nvidia-* runtime packages) and
# torchvision, for PYTHON (default: pyenv's 3.12, else the first python3 on
# PATH), creating it when missing. The venv is a cache kept outside the
# clone, under $BATCHD_CI_CACHE (default /var/cache/batchd-ci), as
# venv-torch-<X.Y>: a second CI run on the same machine reuses it (seconds);
# a fresh machine creates it (about 3 GB from PyPI, minutes).
# BATCHD_TORCH_VENV_REFRESH=1 creates it anew (to pick up a newer torch).
#
#   VENV=$(scripts/torch-venv.sh [PYTHON])
#   "$VENV/bin/python" -c 'import torch; print(torch.__version__)'
#
# Only the venv's path goes to stdout; what it does goes to stderr.
set -euo pipefail
# shellcheck source=scripts/venv.sh
. "$(dirname "$0")/venv.sh"
venv_open torch-venv torch "${1:-}"
# Besides torch and torchvision, what the torch suites import (pytest,
# sentencepiece, Pillow) and what their data generators need (scikit-image:
# make_imagenet.py's photos). A venv made with another list gets the
# missing packages added.
PACKAGES="torch torchvision numpy pytest sentencepiece pillow scikit-image"
if [ "${BATCHD_TORCH_VENV_REFRESH:-0}" != 1 ] && venv_reuse "$PACKAGES"; then
  echo "torch-venv: reusing $VENV ($(sed -n 's/^torch==//p' "$VENV/.complete"))" >&2
  echo "$VENV"
  exit 0
fi
echo "torch-venv: creating $VENV for $PY (PyPI's torch, about 3 GB)" >&2
venv_create "$PACKAGES"
"$VENV/bin/python" -c 'import torch, torchvision; print("torch", torch.__version__, "cuda", torch.version.cuda, "torchvision", torchvision.__version__)' >&2
venv_done

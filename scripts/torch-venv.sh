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
PY=${1:-}
if [ -z "$PY" ]; then
  for cand in /root/.pyenv/versions/3.12.*/bin/python3 "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.12.*/bin/python3; do
    [ -x "$cand" ] && { PY=$cand; break; }
  done
fi
PY=${PY:-$(command -v python3)}
VERSION=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
CACHE=${BATCHD_CI_CACHE:-/var/cache/batchd-ci}
VENV="$CACHE/venv-torch-$VERSION"
mkdir -p "$CACHE"
# Two CI runs at once wait for each other rather than build one venv twice.
exec 9>"$VENV.lock"
flock 9
# Besides torch and torchvision, what the torch suites import (pytest,
# sentencepiece, Pillow) and what their data generators need (scikit-image:
# make_imagenet.py's photos). A venv made with another list gets the
# missing packages added.
PACKAGES="torch torchvision numpy pytest sentencepiece pillow scikit-image"
PIP=(-q --disable-pip-version-check --no-cache-dir)
start=$SECONDS
if [ -f "$VENV/.complete" ] && [ "${BATCHD_TORCH_VENV_REFRESH:-0}" != 1 ]; then
  if [ "$(cat "$VENV/.packages" 2>/dev/null)" != "$PACKAGES" ]; then
    echo "torch-venv: adding to $VENV: $PACKAGES" >&2
    "$VENV/bin/pip" install "${PIP[@]}" $PACKAGES >&2
    echo "$PACKAGES" > "$VENV/.packages"
  fi
  echo "torch-venv: reusing $VENV ($(sed -n 's/^torch==//p' "$VENV/.complete"))" >&2
  echo "$VENV"
  exit 0
fi
echo "torch-venv: creating $VENV for $PY (PyPI's torch, about 3 GB)" >&2
rm -rf "$VENV"
"$PY" -m venv "$VENV"
"$VENV/bin/pip" install "${PIP[@]}" $PACKAGES >&2
echo "$PACKAGES" > "$VENV/.packages"
"$VENV/bin/python" -c 'import torch, torchvision; print("torch", torch.__version__, "cuda", torch.version.cuda, "torchvision", torchvision.__version__)' >&2
# Marks the venv whole: one cut short by a kill is created anew next time.
"$VENV/bin/pip" freeze --disable-pip-version-check > "$VENV/.complete"
echo "torch-venv: created $VENV in $((SECONDS - start)) s" >&2
echo "$VENV"

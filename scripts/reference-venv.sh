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
PY=${1:-}
if [ -z "$PY" ]; then
  for cand in /root/.pyenv/versions/3.12.*/bin/python3 "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.12.*/bin/python3; do
    [ -x "$cand" ] && { PY=$cand; break; }
  done
fi
PY=${PY:-$(command -v python3)}
VERSION=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
CACHE=${BATCHD_CI_CACHE:-/var/cache/batchd-ci}
VENV="$CACHE/venv-ref-$VERSION"
mkdir -p "$CACHE"
# Two runs at once (CI's early start and a test) wait for each other.
exec 9>"$VENV.lock"
flock 9
PACKAGES="numpy tensorflow-cpu pyarrow datasets pyfarmhash h5py jax jraph"
PIP=(-q --disable-pip-version-check --no-cache-dir)
start=$SECONDS
if [ -f "$VENV/.complete" ]; then
  if [ "$(cat "$VENV/.packages" 2>/dev/null)" != "$PACKAGES" ]; then
    echo "reference-venv: adding to $VENV: $PACKAGES" >&2
    "$VENV/bin/pip" install "${PIP[@]}" $PACKAGES >&2
    echo "$PACKAGES" > "$VENV/.packages"
  fi
  echo "$VENV"
  exit 0
fi
echo "reference-venv: creating $VENV for $PY" >&2
rm -rf "$VENV"
"$PY" -m venv "$VENV"
"$VENV/bin/pip" install "${PIP[@]}" $PACKAGES >&2
echo "$PACKAGES" > "$VENV/.packages"
# Marks the venv whole: one cut short by a kill is created anew next time.
"$VENV/bin/pip" freeze --disable-pip-version-check > "$VENV/.complete"
echo "reference-venv: created $VENV in $((SECONDS - start)) s" >&2
echo "$VENV"

#!/usr/bin/env bash
# The manylinux wheel where none of batchd's Debian libraries are:
#   1. a bare Debian minbase container (glibc, libstdc++, libgcc_s, libz:
#      what the manylinux policy allows; no gRPC, protobuf, abseil, c-ares,
#      re2 or OpenSSL) with pyenv's Python (not Debian's) mounted read-only:
#      a fresh venv, `pip install` of the wheel (offline, numpy beside it),
#      then tests/container/trainer_check.py reads one epoch on 2 ranks from
#      a daemon on the host through the shared socket directory and the
#      host's /dev/shm (--ipc host), and the bundled OpenSSL is the one loaded;
#   2. `pip install` from the checkout mounted read-only (nothing may be
#      written into the source tree), then the module imports.
# Usage: tests/container/wheel_check.sh [PYTHON]   (default: pyenv's 3.12)
# Needs scripts/build.sh, podman (scripts/install-deps.sh), root, PyPI, and
# the base image of scripts/container-check.sh (made here when missing).
set -euo pipefail
cd "$(dirname "$0")/../.."
REPO=$PWD
unset PYTHONPATH  # the installed package, never build/python (test.sh sets it)
BUILD=${BATCHD_BUILD:-build}
CACHE=${BATCHD_CI_CACHE:-/var/cache/batchd-ci}
PY=${1:-$(ls -d /root/.pyenv/versions/3.12.*/bin/python3 2>/dev/null | sort -V | tail -n 1)}
[ -x "$PY" ] || { echo "wheel-check: no Python given and no pyenv 3.12" >&2; exit 1; }
PYROOT=$(cd "$(dirname "$PY")/.." && pwd)
TAG=$("$PY" -c 'import sys; print("cp%d%d" % sys.version_info[:2])')
BASE=localhost/batchd-ci/debian:bookworm
WORK=$(mktemp -d /tmp/batchd-whl-XXXXXX)
export CONTAINERS_CONF="$WORK/containers.conf"
printf '[containers]\ndefault_ulimits = []\n' > "$CONTAINERS_CONF"
pm() { podman --runtime runc "$@"; }
DAEMON=""
cleanup() {
  [ -z "$DAEMON" ] || kill "$DAEMON" 2> /dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT
passed=0
die() {
  echo "wheel-check: FAILED: $*" >&2
  echo "wheel-check: $passed passed, 1 failed"
  exit 1
}
start=$SECONDS

# The base image (container-check.sh makes and caches it).
if ! pm image exists "$BASE"; then
  echo "wheel-check: no $BASE: making it (scripts/container-check.sh's step 1)"
  scripts/container-check.sh --base-only > "$WORK/base.log" 2>&1 \
    || { cat "$WORK/base.log"; die "the base image"; }
fi
wheel=$(ls "${BATCHD_DIST:-dist}"/batchd-*-$TAG-$TAG-manylinux_2_34_x86_64.whl 2>/dev/null | tail -n 1 || true)
if [ -z "$wheel" ]; then
  scripts/build-wheel.sh "$PY"
  wheel=$(ls "${BATCHD_DIST:-dist}"/batchd-*-$TAG-$TAG-manylinux_2_34_x86_64.whl | tail -n 1)
fi
# numpy for that Python, from PyPI, kept in the cache for the next run.
house="$CACHE/wheelhouse-$TAG"
mkdir -p "$house" "$WORK/wheels"
ls "$house"/numpy-*.whl > /dev/null 2>&1 \
  || "$PY" -m pip download -q --disable-pip-version-check --only-binary=:all: -d "$house" numpy
cp "$wheel" "$house"/numpy-*.whl tests/container/trainer_check.py "$WORK/wheels/"

# A daemon on the host; the container shares its socket directory and the
# host's /dev/shm.
mkdir -p "$WORK/run" "$WORK/data"
prefix="batchdwhl$$"
"$BUILD/server/batchd" --listen "unix://$WORK/run/batchd.sock" --data-root "$WORK/data" \
  --shm-prefix "$prefix" --cache-dir '' --threads 2 > "$WORK/batchd.log" 2>&1 &
DAEMON=$!
for _ in $(seq 300); do [ -S "$WORK/run/batchd.sock" ] && break; sleep 0.1; done
[ -S "$WORK/run/batchd.sock" ] || { cat "$WORK/batchd.log"; die "the host daemon did not start"; }

pm run --rm --network none --ipc host -v "$WORK/run:/run/batchd" \
  -v "$PYROOT:$PYROOT:ro" -v "$WORK/wheels:/wheels:ro" \
  -e BATCHD_SERVER=unix:///run/batchd/batchd.sock "$BASE" sh -ec "
    if ldconfig -p | grep -E 'libgrpc|libprotobuf|libabsl|libssl|libcrypto|libcares|libre2'; then
      echo 'the container has a library the wheel must bring' >&2; exit 1
    fi
    $PY -m venv /tmp/venv
    /tmp/venv/bin/pip install -q --disable-pip-version-check --no-index --find-links /wheels batchd 2>&1 \
      | grep -v 'ssl module in Python is not available' || true
    cd /
    /tmp/venv/bin/python -c '
import batchd, sys
maps = open(\"/proc/self/maps\").read()
ssl = sorted({l.split()[-1] for l in maps.splitlines() if \"libssl\" in l})
assert ssl and all(\"/batchd.libs/\" in p for p in ssl), ssl
assert batchd.__file__.startswith(\"/tmp/venv/\"), batchd.__file__
print(\"wheel-check: batchd\", batchd.__version__, \"on Python\", sys.version.split()[0], \"OpenSSL from\", ssl[0])'
    /tmp/venv/bin/python /wheels/trainer_check.py epoch --stream wheel-epoch \
      --world-size 2 --global-batch-size 64 --examples 1024
  " || { tail -20 "$WORK/batchd.log"; die "the wheel in a bare container"; }
passed=$((passed + 1))
echo "wheel-check: ok: $(basename "$wheel") in a bare container read from the host's daemon ($((SECONDS - start)) s)"
leftover=$(ls /dev/shm | grep "^$prefix\." || true)
[ -z "$leftover" ] || die "rings left after the ranks closed: $leftover"

# pip install from a read-only checkout: a mount namespace of its own
# where the tree is bound read-only, so that even root cannot write to it.
step=$SECONDS
"$PY" -m venv "$WORK/rovenv"
mkdir -p "$WORK/ro"
unshare --mount sh -ec "
  mount --make-rprivate /
  mount --bind '$REPO' '$WORK/ro'
  mount -o remount,bind,ro '$WORK/ro'
  if touch '$WORK/ro/.write-test' 2> /dev/null; then echo 'the bind is writable' >&2; exit 1; fi
  '$WORK/rovenv/bin/pip' install -q --disable-pip-version-check '$WORK/ro'
" > "$WORK/ro.log" 2>&1 || { tail -30 "$WORK/ro.log"; die "pip install from a read-only checkout"; }
(cd / && "$WORK/rovenv/bin/python" -c 'import batchd; print("wheel-check: installed from the read-only tree:", batchd.__version__)') \
  || die "the module installed from a read-only checkout does not import"
passed=$((passed + 1))
echo "wheel-check: ok: pip install from a read-only checkout ($((SECONDS - step)) s)"
echo "wheel-check: took $((SECONDS - start)) s"
echo "wheel-check: $passed passed, 0 failed"

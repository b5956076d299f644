#!/usr/bin/env bash
# Builds the libFuzzer targets (every target fuzz/CMakeLists.txt lists: the
# parsers of files, requests and cache entries) with clang,
# AddressSanitizer and UBSan into build-fuzz/, writes their seed corpora
# (fuzz/make_seeds.py) and runs each target over its seeds and then a fixed
# number of generated inputs: bounded and deterministic (-seed=1), so CI
# can run it (scripts/test.sh --ci).
#
# Each input must finish within 10 s (-timeout), the process stay within
# 1 GiB (-rss_limit_mb) and no allocation exceed 256 MiB (-malloc_limit_mb):
# far above what a parser needs for the inputs here (at most 64 KiB, with a
# sparse hole behind them in arrow_ipc_fuzz), so that a walk that grows
# faster than its input (a schema that is a DAG) or an allocation of what a
# file only claims (2 GiB of metadata in a sparse shard) fails the run on
# its seeds.
#
# Usage: scripts/fuzz.sh [RUNS]        (default 4000 inputs per target)
#        scripts/fuzz.sh --time SECONDS  (each target for SECONDS instead)
# Crashing inputs land in build-fuzz/crashes/<target>/; rerun one with
#   build-fuzz/fuzz/<target> build-fuzz/crashes/<target>/crash-...
# BATCHD_FUZZ_SKIP_DEPS=1 skips scripts/install-deps.sh (test.sh ran it).
# BATCHD_FUZZ_TARGETS="a_fuzz b_fuzz" builds and runs only those.
# BATCHD_FUZZ_BUILD=DIR takes the targets from DIR, a build configured with
# BATCHD_FUZZ=ON (scripts/sanitize.sh --fuzz asan: build-asan), instead of
# configuring build-fuzz.
set -euo pipefail
cd "$(dirname "$0")/.."
TIMEOUT_S=10 RSS_MB=1024 MALLOC_MB=256
[ "${BATCHD_FUZZ_SKIP_DEPS:-0}" = 1 ] || scripts/install-deps.sh
limit=(-runs="${1:-4000}")
if [ "${1:-}" = "--time" ]; then limit=(-max_total_time="${2:?seconds}"); fi
BUILD=${BATCHD_FUZZ_BUILD:-build-fuzz}
if [ "$BUILD" = build-fuzz ]; then
  source scripts/ccache.sh
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_C_COMPILER=clang \
    -DCMAKE_CXX_COMPILER=clang++ -DBATCHD_FUZZ=ON -DBATCHD_WITH_TORCH=OFF \
    -DBATCHD_WITH_PYTHON=OFF -DBATCHD_WITH_TESTS=OFF "${ccache_cmake[@]}" >/dev/null
elif ! grep -qx 'BATCHD_FUZZ:BOOL=ON' "$BUILD/CMakeCache.txt" 2>/dev/null; then
  echo "fuzz: $BUILD is not a build with BATCHD_FUZZ=ON" \
    "(scripts/sanitize.sh --fuzz asan makes build-asan one)" >&2
  exit 1
fi
targets=${BATCHD_FUZZ_TARGETS:-$(sed -n \
  's/^batchd_fuzz(\([a-z0-9_]*\) .*/\1/p' fuzz/CMakeLists.txt)}
# shellcheck disable=SC2086  # one word per target
ninja -C "$BUILD" $targets
rm -rf "$BUILD/seeds"
/usr/bin/python3 fuzz/make_seeds.py "$BUILD/seeds"
# The targets' scratch files (fuzz/fuzz_util.h), kept in the build.
export TMPDIR="$(cd "$BUILD" && pwd)/fuzz-tmp"
rm -rf "$TMPDIR" && mkdir -p "$TMPDIR"
failed=()
stage_start=$SECONDS
for target in $targets; do
  # The corpus grows in a scratch copy; the seeds stay as generated.
  corpus="$BUILD/corpus/$target"
  rm -rf "$corpus" && mkdir -p "$corpus" "$BUILD/crashes/$target" \
    "$BUILD/seeds/$target"
  echo "== $target (${limit[*]})"
  start=$SECONDS
  if ! "$BUILD/fuzz/$target" "${limit[@]}" -seed=1 -max_len=65536 \
    -timeout="$TIMEOUT_S" -rss_limit_mb="$RSS_MB" \
    -malloc_limit_mb="$MALLOC_MB" -print_final_stats=1 \
    -artifact_prefix="$BUILD/crashes/$target/" "$corpus" \
    "$BUILD/seeds/$target" >"$BUILD/$target.log" 2>&1; then
    tail -n 60 "$BUILD/$target.log"
    failed+=("$target")
  fi
  grep -E "^stat::number_of_executed_units|^Done" "$BUILD/$target.log" |
    tr '\n' ' ' || true
  echo "($((SECONDS - start)) s)"
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: FAILED: ${failed[*]} (inputs in $BUILD/crashes/)" >&2
  exit 1
fi
echo "fuzz: every target ran clean ($(echo $targets | wc -w) targets," \
  "$((SECONDS - stage_start)) s)"

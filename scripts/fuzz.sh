#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/: TFRecord framing, tf.train.Example,
# JPEG/PNG decode, the WMT tokenizer, SentencePiece model files, the TOML
# config, OpenStream requests, the cache's entry and blob files and the
# values in them: TFRecord offsets, ImageFolder listings, WMT length tables)
# with clang, AddressSanitizer and UBSan into build-fuzz/, writes their seed
# corpora (fuzz/make_seeds.py) and runs each target over its seeds and then
# a fixed number of generated inputs: bounded and deterministic (-seed=1),
# so CI can run it (scripts/test.sh --ci).
#
# Usage: scripts/fuzz.sh [RUNS]        (default 4000 inputs per target)
#        scripts/fuzz.sh --time SECONDS  (each target for SECONDS instead)
# Crashing inputs land in build-fuzz/crashes/<target>/; rerun one with
#   build-fuzz/fuzz/<target> build-fuzz/crashes/<target>/crash-...
# BATCHD_FUZZ_SKIP_DEPS=1 skips scripts/install-deps.sh (test.sh ran it).
# BATCHD_FUZZ_BUILD=DIR takes the targets from DIR, a build configured with
# BATCHD_FUZZ=ON (scripts/sanitize.sh --fuzz asan: build-asan), instead of
# configuring build-fuzz.
set -euo pipefail
cd "$(dirname "$0")/.."
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
ninja -C "$BUILD" fuzzers
rm -rf "$BUILD/seeds"
/usr/bin/python3 fuzz/make_seeds.py "$BUILD/seeds"
failed=()
for target in tfrecord_fuzz example_fuzz image_decoder_fuzz tokenizer_fuzz \
  sentencepiece_model_fuzz config_fuzz spec_fuzz cache_entry_fuzz \
  cache_index_fuzz wmt_lengths_fuzz npy_fuzz ogbg_graph_fuzz \
  criteo_line_fuzz hdf5_reply_fuzz; do
  # The corpus grows in a scratch copy; the seeds stay as generated.
  corpus="$BUILD/corpus/$target"
  rm -rf "$corpus" && mkdir -p "$corpus" "$BUILD/crashes/$target"
  echo "== $target (${limit[*]})"
  start=$SECONDS
  if ! "$BUILD/fuzz/$target" "${limit[@]}" -seed=1 -max_len=65536 \
    -rss_limit_mb=2048 -timeout=30 -print_final_stats=1 \
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
echo "fuzz: every target ran clean"

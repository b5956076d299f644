#!/usr/bin/env bash
# Builds and runs the GoogleTest suites under sanitizers, each in a build
# directory of its own (no torch, no Python module), with clang, whose
# -Werror=thread-safety also checks the lock annotations:
#   asan  AddressSanitizer + UndefinedBehaviorSanitizer, undefined behaviour
#         fatal (-fno-sanitize-recover=undefined), in build-asan/. CI runs
#         this one (.ci/run through scripts/test.sh --ci).
#   tsan  ThreadSanitizer (tests/tsan.supp), in build-tsan/. Too slow for
#         CI's budget on two cores; run it before changing the ring, the
#         engine or the core.
#
# Usage: scripts/sanitize.sh [--fuzz] [asan|tsan]...  (default: asan tsan)
#   "address,undefined" and "address" mean asan, "thread" means tsan.
#   --fuzz: the asan build also builds the libFuzzer targets (coverage on
#   everything), so that scripts/fuzz.sh with BATCHD_FUZZ_BUILD=build-asan
#   runs them without a build of its own (CI does, to compile once).
# BATCHD_SANITIZE_SKIP_DEPS=1 skips scripts/install-deps.sh (test.sh ran it).
set -euo pipefail
cd "$(dirname "$0")/.."
[ "${BATCHD_SANITIZE_SKIP_DEPS:-0}" = 1 ] || scripts/install-deps.sh
modes=() fuzz=()
for arg in "$@"; do
  if [ "$arg" = --fuzz ]; then fuzz=(-DBATCHD_FUZZ=ON); else modes+=("$arg"); fi
done
[ ${#modes[@]} -gt 0 ] || modes=(asan tsan)
for mode in "${modes[@]}"; do
  case "$mode" in
    asan | address | address,undefined) san=address,undefined dir=build-asan extra=("${fuzz[@]}") ;;
    tsan | thread) san=thread dir=build-tsan extra=() ;;
    *) echo "sanitize.sh: unknown mode '$mode' (asan or tsan)" >&2; exit 2 ;;
  esac
  # clang, so that the build also checks every lock annotation
  # (-Werror=thread-safety, see CMakeLists.txt).
  echo "== $san: building in $dir with clang;" \
    "$(grep -rhoE 'ABSL_(PT_)?GUARDED_BY' base client server workloads tools | wc -l)" \
    "fields carry a lock annotation"
  BATCHD_BUILD=$dir scripts/build.sh -DBATCHD_SANITIZE=$san \
    -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
    -DBATCHD_WITH_TORCH=OFF -DBATCHD_WITH_PYTHON=OFF "${extra[@]}"
  echo "== $san: running the GoogleTest suites"
  # LeakSanitizer's tracer of clang 14 on glibc 2.36 now and then crashes at
  # exit reading a running thread's dynamic TLS ("Tracer caught signal 11")
  # after the test passed: a test runs up to three times, so that only a
  # failure that repeats fails. lsan.supp names leaks inside libraries.
  (cd "$dir" &&
    ASAN_OPTIONS="detect_leaks=1:strict_string_checks=1" \
    LSAN_OPTIONS="suppressions=$PWD/../tests/lsan.supp" \
    UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1" \
    TSAN_OPTIONS="suppressions=$PWD/../tests/tsan.supp halt_on_error=1" \
    ctest --output-on-failure -j2 --repeat until-pass:3)
done

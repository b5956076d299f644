#!/usr/bin/env bash
# ImageNet train, one build against another, on the same files and cores:
# alternating triples of daemons (A; B; B with --readahead-bytes 0), each
# measured by one `batchctl bench` (W ranks), so that a machine that slows
# down slows all three alike. Prints every run's images/s and images per
# daemon CPU-second, and the medians of the per-triple ratios B/A and B
# read-ahead on/off, by each.
#
# Usage: bench/ab.sh BUILD_A BUILD_B
#   e.g. bench/ab.sh ../old/build-rel build-rel   (both Release builds)
#
# Environment:
#   BENCH_DATA        data set directory, generated when missing
#                     (default ${TMPDIR:-/tmp}/batchd-imagenet-bench)
#   BENCH_CLASSES, BENCH_PER_CLASS   its size (default 20 x 100 = 2000)
#   BENCH_TRIPLES     triples (default 5)
#   BENCH_THREADS     each daemon's --threads (default 2)
#   BENCH_WORLD       ranks (default 2)
#   BENCH_GLOBAL_BATCH (default 64)
#   BENCH_STEPS       steps each run reads (default 40)
#   BENCH_BUSY        processes that spin beside every run, as trainers keep
#                     a node's cores busy (default 0; e.g. nproc)
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
[[ $# -eq 2 ]] || { sed -n '2,20p' "$0" >&2; exit 2; }
build_a="$(cd "$1" && pwd)"
build_b="$(cd "$2" && pwd)"
py=/usr/bin/python3
# shellcheck source=bench/lib.sh
. "$repo/bench/lib.sh"
for b in "$build_a" "$build_b"; do
  bench_require ab "$b" "$b/server/batchd" "$b/server/batchctl"
done

data="${BENCH_DATA:-${TMPDIR:-/tmp}/batchd-imagenet-bench}"
triples="${BENCH_TRIPLES:-5}"
threads="${BENCH_THREADS:-2}"
world="${BENCH_WORLD:-2}"
global_batch="${BENCH_GLOBAL_BATCH:-64}"
steps="${BENCH_STEPS:-40}"
busy="${BENCH_BUSY:-0}"
bench_imagenet_data ab "$data" "${BENCH_CLASSES:-20}" \
  "${BENCH_PER_CLASS:-100}" 5
# Every run reads the files from the page cache.
cat "$data"/train/*/* >/dev/null

work="$(mktemp -d "${TMPDIR:-/tmp}/batchd-ab.XXXXXX")"
daemon_pid=""
busy_pids=()
cleanup() {
  bench_kill_daemon
  for pid in "${busy_pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
for _ in $(seq "$busy"); do
  sh -c 'while :; do :; done' &
  busy_pids+=($!)
done

# run BUILD EXTRA_FLAGS...: one daemon, one bench by the build's own
# batchctl (an older daemon may speak an older protocol); prints images/s
# and images per daemon CPU-second, the daemon's CPU read from /proc around
# the bench (its stream's open and ring fill included, alike for every
# build; no warm-up steps, so every image it decodes in the timed pass
# counts).
run() {
  local build=$1
  shift
  local socket="unix://$work/batchd.sock"
  bench_start_daemon "$build/server/batchd" "$build/server/batchctl" \
    "$socket" "$work/batchd.log" --data-root "$data" --cache-dir '' \
    --shm-prefix "ab-$$" --threads "$threads" "$@"
  local cpu0 cpu1
  cpu0=$(bench_cpu_ticks "$daemon_pid")
  "$build/server/batchctl" bench --server "$socket" --workload imagenet \
    --data . --split train --global-batch-size "$global_batch" \
    --world-size "$world" --steps "$steps" --warmup-steps 0 --json \
    >"$work/bench.json"
  cpu1=$(bench_cpu_ticks "$daemon_pid")
  "$py" -c 'import json,os,sys; j=json.load(open(sys.argv[1]))
cpu = (int(sys.argv[3]) - int(sys.argv[2])) / os.sysconf("SC_CLK_TCK")
print("%.1f %.1f" % (j["examples_per_s"], j["examples"] / cpu))' \
    "$work/bench.json" "$cpu0" "$cpu1"
  bench_stop_daemon "$build/server/batchctl" "$socket"
}

results="$work/results"
: >"$results"
for i in $(seq "$triples"); do
  a=$(run "$build_a")
  b=$(run "$build_b")
  b_off=$(run "$build_b" --readahead-bytes 0)
  echo "triple $i: A $a  B $b  B read-ahead off $b_off" \
    "(images/s, images per daemon CPU-s)" >&2
  echo "$a $b $b_off" >>"$results"
done
"$py" - "$results" <<'EOF'
import statistics, sys
rows = [list(map(float, l.split())) for l in open(sys.argv[1]) if l.strip()]
for col, what in ((0, "by rate"), (1, "by CPU ")):
    pairs = (("B/A                ", 2, 0), ("B read-ahead on/off", 2, 4))
    for name, num, den in pairs:
        r = [row[num + col] / row[den + col] for row in rows]
        print("%s %s median %.3f  (%s)" % (name, what, statistics.median(r),
              " ".join("%.3f" % x for x in r)))
EOF

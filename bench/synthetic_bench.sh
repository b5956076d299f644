#!/usr/bin/env bash
# End-to-end delivery of the synthetic workload, side by side with memcpy.
#
# Starts a private batchd daemon (temporary socket and segment prefix), runs
# `batchctl bench` for per-rank slots of 1 MiB, 128x224x224x3 B (~18.4 MiB)
# and 64 MiB at world sizes 1, 2 and 4, prints batches/s, GB/s, the ranks'
# wait fraction and the server's threads and RSS per run next to
# ring_bench's memcpy bandwidth for the same size, and shuts the daemon down.
#
# Usage: bench/synthetic_bench.sh [BUILD_DIR]      (default: ./build)
#
# Environment:
#   BENCH_WORLD_SIZES  world sizes to run (default "1 2 4")
#   BENCH_BYTES        bytes each run delivers, all ranks together
#                      (default 10000000000); steps follow from it
#   BENCH_MIN_STEPS    fewest timed steps per rank (default 20)
#   BENCH_REPEAT       runs per configuration; the fastest is shown (default
#                      2: the figures of a shared machine are noisy)
#   BENCH_SLOTS        ring slots per rank (default 4)
#   BENCH_THREADS      the daemon's --threads (default: its own default)
#   BENCH_TOUCH        page or all (default page), see batchctl bench --help
#   BENCH_JSON         if set, a file that receives every run's JSON, one per
#                      line ({"slot", "world_size", "result"} or "error"),
#                      after ring_bench's ({"ring_bench": ...})
#
# Exit status: 0 when every run finished, 1 otherwise.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-$repo/build}"
batchd="$build/server/batchd"
batchctl="$build/server/batchctl"
ring_bench="$build/bench/ring_bench"
for bin in "$batchd" "$batchctl" "$ring_bench"; do
  if [[ ! -x "$bin" ]]; then
    echo "synthetic_bench: $bin is missing; build it first:" >&2
    echo "  ninja -C $build batchd batchctl ring_bench" >&2
    exit 1
  fi
done
command -v python3 >/dev/null || {
  echo "synthetic_bench: needs python3 (synthetic_bench_report.py)" >&2
  exit 1
}

world_sizes="${BENCH_WORLD_SIZES:-1 2 4}"
target_bytes="${BENCH_BYTES:-10000000000}"
min_steps="${BENCH_MIN_STEPS:-20}"
repeat="${BENCH_REPEAT:-2}"
slots="${BENCH_SLOTS:-4}"
touch="${BENCH_TOUCH:-page}"
json_out="${BENCH_JSON:-}"
[[ -n "$json_out" ]] && : >"$json_out"

work="$(mktemp -d "${TMPDIR:-/tmp}/batchd-bench.XXXXXX")"
socket="unix://$work/batchd.sock"
prefix="batchd-bench-$$"
daemon_pid=""

# shellcheck disable=SC2317  # called by the EXIT trap
cleanup() {
  if [[ -n "$daemon_pid" ]] && kill -0 "$daemon_pid" 2>/dev/null; then
    kill "$daemon_pid" 2>/dev/null || true
    wait "$daemon_pid" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT

# Slot sizes: name, per-rank batch, payload bytes per example.
sizes=(
  "1MiB 32 32768"
  "18.4MiB 128 150528"
  "64MiB 128 524288"
)

echo "ring_bench: memcpy and ring bandwidth on this machine ..." >&2
ring_json="$("$ring_bench" --json --slots "$slots" --seconds 0.25 \
  --latency-samples 1000)"
[[ -n "$json_out" ]] && echo "{\"ring_bench\": $ring_json}" >>"$json_out"

threads_flag=()
[[ -n "${BENCH_THREADS:-}" ]] && threads_flag=(--threads "$BENCH_THREADS")
"$batchd" --listen "$socket" --data-root "$work" --shm-prefix "$prefix" \
  --slots "$slots" ${threads_flag[@]+"${threads_flag[@]}"} \
  2>"$work/batchd.log" &
daemon_pid=$!
for _ in $(seq 100); do
  "$batchctl" status --server "$socket" --timeout 1 >/dev/null 2>&1 && break
  kill -0 "$daemon_pid" 2>/dev/null || {
    echo "synthetic_bench: batchd did not start:" >&2
    cat "$work/batchd.log" >&2
    exit 1
  }
  sleep 0.1
done
"$batchctl" status --server "$socket" >&2

failed=0
results="$work/results.jsonl"
: >"$results"
for size in "${sizes[@]}"; do
  read -r name batch payload <<<"$size"
  for w in $world_sizes; do
    steps=$((target_bytes / (w * batch * payload)))
    ((steps < min_steps)) && steps=$min_steps
    for run in $(seq "$repeat"); do
      echo "batchctl bench: slot $name, world $w, $steps steps, run $run" >&2
      tag="\"slot\": \"$name\", \"world_size\": $w"
      if out="$("$batchctl" bench --server "$socket" --workload synthetic \
        --global-batch-size $((batch * w)) --world-size "$w" \
        --slots "$slots" --option examples=100000 \
        --option "payload_bytes=$payload" --steps "$steps" --touch "$touch" \
        --json 2>"$work/err")"; then
        echo "{$tag, \"result\": $out}" >>"$results"
      else
        failed=1
        error="$(python3 -c \
          'import json, sys; print(json.dumps(sys.stdin.read()))' <"$work/err")"
        echo "{$tag, \"error\": $error}" >>"$results"
        break
      fi
    done
  done
done
[[ -n "$json_out" ]] && cat "$results" >>"$json_out"

"$batchctl" shutdown --server "$socket" >&2 || failed=1
wait "$daemon_pid" 2>/dev/null || true
daemon_pid=""

echo "$ring_json" >"$work/ring.json"
python3 "$repo/bench/synthetic_bench_report.py" "$work/ring.json" "$results" ||
  failed=1
exit "$failed"

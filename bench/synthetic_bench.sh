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
#   BENCH_SLOTS        ring slots per rank (default 4)
#   BENCH_THREADS      the daemon's --threads (default: its own default)
#   BENCH_TOUCH        page or all (default page), see batchctl bench --help
#   BENCH_JSON         if set, a file that receives every run's JSON, one per
#                      line
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
  echo "synthetic_bench: needs python3 to read the JSON figures" >&2
  exit 1
}

world_sizes="${BENCH_WORLD_SIZES:-1 2 4}"
target_bytes="${BENCH_BYTES:-10000000000}"
min_steps="${BENCH_MIN_STEPS:-20}"
slots="${BENCH_SLOTS:-4}"
touch="${BENCH_TOUCH:-page}"
json_out="${BENCH_JSON:-}"
[[ -n "$json_out" ]] && : >"$json_out"

work="$(mktemp -d "${TMPDIR:-/tmp}/batchd-bench.XXXXXX")"
socket="unix://$work/batchd.sock"
prefix="batchd-bench-$$"
daemon_pid=""

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
[[ -n "$json_out" ]] && echo "$ring_json" >>"$json_out"

threads_flag=()
[[ -n "${BENCH_THREADS:-}" ]] && threads_flag=(--threads "$BENCH_THREADS")
"$batchd" --listen "$socket" --data-root "$work" --shm-prefix "$prefix" \
  --slots "$slots" ${threads_flag[@]+"${threads_flag[@]}"} 2>"$work/batchd.log" &
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
results=()
for size in "${sizes[@]}"; do
  read -r name batch payload <<<"$size"
  for w in $world_sizes; do
    slot_bytes=$((batch * payload))
    steps=$((target_bytes / (w * slot_bytes)))
    ((steps < min_steps)) && steps=$min_steps
    echo "batchctl bench: slot $name, world $w, $steps steps ..." >&2
    if out="$("$batchctl" bench --server "$socket" --workload synthetic \
      --global-batch-size $((batch * w)) --world-size "$w" --slots "$slots" \
      --option examples=100000 --option "payload_bytes=$payload" \
      --steps "$steps" --touch "$touch" --json 2>"$work/err")"; then
      results+=("$name $w $out")
      [[ -n "$json_out" ]] && echo "$out" >>"$json_out"
    else
      failed=1
      results+=("$name $w {\"error\": $(python3 -c 'import json,sys; print(json.dumps(sys.stdin.read().strip()))' <"$work/err")}")
    fi
  done
done

"$batchctl" shutdown --server "$socket" >&2 || failed=1
wait "$daemon_pid" 2>/dev/null || true
daemon_pid=""

printf '%s\n' "${results[@]}" | RING_JSON="$ring_json" python3 -c '
import json, os, sys

ring = json.loads(os.environ["RING_JSON"])
memcpy = {m["bytes"]: m for m in ring["memcpy"]}
sizes = {"1MiB": 1 << 20, "18.4MiB": 128 * 224 * 224 * 3, "64MiB": 64 << 20}
lat = ring["latency"]

print()
print("memcpy (ring_bench, one thread): " + "  ".join(
    "%s %.2f GB/s" % (n, memcpy[b]["gb_per_s"]) for n, b in sizes.items()))
print("ring_bench, producer -> consumer process, %d slots: " % ring["ring"]["slots"]
      + "  ".join("%s %.2f GB/s (%.2fx)" % (n, r["gb_per_s"], r["ratio_to_memcpy"])
                  for n, b in sizes.items()
                  for r in ring["ring"]["results"]
                  if r["slot_payload_bytes"] == b and r["touch"] == "page"))
print("publish -> Acquire latency: median %.1f us, p99 %.1f us"
      % (lat["median_us"], lat["p99_us"]))
print()
head = ("slot", "W", "batches/s", "rank b/s", "GB/s", "x memcpy", "wait",
        "srv threads", "srv RSS MiB", "rings MiB")
rows = []
for line in sys.stdin:
    name, w, js = line.split(" ", 2)
    r = json.loads(js)
    if "error" in r:
        rows.append((name, w, "failed: " + r["error"].splitlines()[0]))
        continue
    gbs = r["bytes_per_s"] / 1e9
    rows.append((name, w, "%.1f" % r["batches_per_s"],
                 "%.1f" % r["rank_batches_per_s"], "%.2f" % gbs,
                 "%.2f" % (gbs / memcpy[sizes[name]]["gb_per_s"]),
                 "%.1f%%" % (100 * r["wait_fraction"]),
                 str(r["server_threads"]),
                 "%.1f" % (r["server_rss_bytes"] / 2**20),
                 "%.0f" % (r["server_ring_bytes"] / 2**20)))
widths = [max(len(str(row[i])) for row in [head] + [r for r in rows if len(r) == len(head)])
          for i in range(len(head))]
fmt = lambda row: "  ".join(
    str(c).ljust(widths[i]) if i == 0 else str(c).rjust(widths[i])
    for i, c in enumerate(row))
print(fmt(head))
for row in rows:
    print(fmt(row) if len(row) == len(head) else "  ".join(row))
print()
print("GB/s: tensor bytes delivered to all ranks together; x memcpy: that over")
print("one thread of memcpy of the same size; wait: share of the time each rank")
print("spent in Next(); srv RSS: the daemon without its rings.")
'
exit "$failed"

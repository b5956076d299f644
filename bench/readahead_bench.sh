#!/usr/bin/env bash
# ImageNet train from slow storage, side by side in one run: batchd's
# images/s (W ranks, batchctl bench) reading the files
#   - locally, page cache warm (the reference figure) and cold (caches
#     dropped before the run, when /proc/sys/vm/drop_caches is writable);
#   - through bench/latency_fs (a FUSE passthrough adding LATENCY ms to every
#     open and every read) at each latency of BENCH_LATENCIES;
# and AlgoPerf's torchvision pipeline (per-rank DistributedSampler and
# DataLoader, BENCH_TV_WORKERS workers a rank) on the same mounts. Prints
# images/s and the ratio to batchd's best local warm figure. Defaults are
# batchd's (read-ahead included); BENCH_READAHEAD_BYTES overrides the budget
# (0: no read-ahead, for the before/after comparison).
#
# Usage: bench/readahead_bench.sh [BUILD_DIR]        (default: ./build)
#
# Environment:
#   BENCH_DATA        data set directory, generated when missing
#                     (default ${TMPDIR:-/tmp}/batchd-readahead-bench)
#   BENCH_CLASSES, BENCH_PER_CLASS   its size (default 10 x 80 = 800 files)
#   BENCH_LATENCIES   ms per open and read (default "0 2 10")
#   BENCH_WORLD       ranks (default 2)
#   BENCH_GLOBAL_BATCH (default 32)
#   BENCH_EPOCHS      epochs each run reads (default 2)
#   BENCH_THREADS     daemon worker threads (default: nproc)
#   BENCH_TV_WORKERS  torchvision num_workers a rank (default 2; "" skips it)
#   BENCH_READAHEAD_BYTES  --readahead-bytes (default: the daemon's)
#   BENCH_COLD_PAIRS  cold runs, each followed by a warm one (default 1); the
#                     median of the cold/warm ratios is printed (on a shared
#                     machine single runs vary by +-10%)
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=bench/lib.sh
. "$repo/bench/lib.sh"
bench_init readahead_bench "${1:-}" server/batchd server/batchctl \
  bench/latency_fs
latency_fs="$build/bench/latency_fs"
[[ -c /dev/fuse ]] || { echo "readahead_bench: no /dev/fuse" >&2; exit 1; }
helper="$repo/bench/imagenet_bench.py"

data="${BENCH_DATA:-${TMPDIR:-/tmp}/batchd-readahead-bench}"
classes="${BENCH_CLASSES:-10}"
per_class="${BENCH_PER_CLASS:-80}"
latencies="${BENCH_LATENCIES:-0 2 10}"
world="${BENCH_WORLD:-2}"
global_batch="${BENCH_GLOBAL_BATCH:-32}"
epochs="${BENCH_EPOCHS:-2}"
threads="${BENCH_THREADS:-$(nproc)}"
tv_workers="${BENCH_TV_WORKERS-2}"
cold_pairs="${BENCH_COLD_PAIRS:-1}"
ra_flags=()
[[ -n "${BENCH_READAHEAD_BYTES:-}" ]] &&
  ra_flags=(--readahead-bytes "$BENCH_READAHEAD_BYTES")

bench_imagenet_data readahead_bench "$data" "$classes" "$per_class" 1
n_train=$(find "$data/train" -type f | wc -l)
steps=$((epochs * (n_train / global_batch)))
echo "readahead_bench: $n_train files ($(du -sh "$data/train" | cut -f1))," \
  "W=$world, global batch $global_batch, $steps steps, $threads threads" >&2

work="$(mktemp -d "${TMPDIR:-/tmp}/batchd-rabench.XXXXXX")"
mnt="$work/mnt"
mkdir -p "$mnt"
daemon_pid=""
fs_pid=""
cleanup() {
  bench_kill_daemon
  if mountpoint -q "$mnt"; then
    fusermount3 -u "$mnt" || fusermount3 -uz "$mnt" || true
  fi
  # Never remove through a mount that is still there: it is the data set.
  if mountpoint -q "$mnt"; then
    echo "readahead_bench: $mnt is still mounted; $work left in place" >&2
    return
  fi
  rm -rf "$work"
}
trap cleanup EXIT

results="$work/results"
: >"$results"

# One batchd daemon over `root`, one batchctl bench; appends "name ips".
run_batchd() {  # name root
  local name=$1 root=$2 socket="unix://$work/batchd.sock"
  bench_start_daemon "$batchd" "$batchctl" "$socket" "$work/batchd.log" \
    --data-root "$root" --shm-prefix "rabench-$$" --threads "$threads" \
    "${ra_flags[@]}"
  out="$("$batchctl" bench --server "$socket" --workload imagenet --data . \
    --split train --global-batch-size "$global_batch" --world-size "$world" \
    --steps "$steps" --json)"
  bench_stop_daemon "$batchctl" "$socket"
  ips=$("$py" -c 'import json,sys; print(json.loads(sys.argv[1])["examples_per_s"])' "$out")
  echo "$name $ips" >>"$results"
  echo "  $name: $ips images/s" >&2
}

run_torchvision() {  # name root
  [[ -n "$tv_workers" ]] || return 0
  local name=$1 root=$2
  out="$("$py" "$helper" torchvision --data "$root" --split train \
    --world "$world" --workers "$tv_workers" --global-batch "$global_batch" \
    --steps "$((steps))")"
  ips=$("$py" -c 'import json,sys; print(json.loads(sys.argv[1])["images_per_s"])' "$out")
  echo "$name $ips" >>"$results"
  echo "  $name: $ips images/s" >&2
}

warm() { cat "$data"/train/*/* >/dev/null; }

echo "local, warm page cache ..." >&2
warm
run_batchd batchd_local_warm "$data"
if (echo 3 >/proc/sys/vm/drop_caches) 2>/dev/null; then
  for i in $(seq "$cold_pairs"); do
    echo "local, cold page cache, then warm ($i/$cold_pairs) ..." >&2
    sync
    echo 3 >/proc/sys/vm/drop_caches
    run_batchd "batchd_local_cold$i" "$data"
    warm
    run_batchd "batchd_local_warm_after$i" "$data"
  done
else
  echo "  (cannot write /proc/sys/vm/drop_caches here: cold run skipped)" >&2
fi

for ms in $latencies; do
  echo "latency_fs, $ms ms per open and read ..." >&2
  warm  # the latency is the only cost of the mount
  "$latency_fs" "$data" "$mnt" "--latency-ms=$ms"
  run_batchd "batchd_fuse_${ms}ms" "$mnt"
  run_torchvision "torchvision_fuse_${ms}ms" "$mnt"
  fusermount3 -u "$mnt"
done

"$py" - "$results" <<'EOF'
import sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
ips = {name: float(v) for name, v in rows}
# The best warm local run is the reference: on a shared machine runs vary,
# and the best one makes the ratios lower bounds.
local = max(v for k, v in ips.items() if k.startswith("batchd_local_warm"))
print()
print(f"{'run':<28}{'images/s':>10}{'x local':>9}")
for name, v in rows:
    print(f"{name:<28}{float(v):>10.1f}{float(v) / local:>9.2f}")
pairs = [(ips[k], ips["batchd_local_warm_after" + k[len("batchd_local_cold"):]])
         for k in ips if k.startswith("batchd_local_cold")]
if pairs:
    ratios = sorted(c / w for c, w in pairs)
    print()
    print("cold / the warm run after it: " +
          " ".join(f"{r:.2f}" for r in ratios) +
          f"; median {ratios[len(ratios) // 2]:.2f}")
print()
print("x local: over the best batchd_local_warm* (batchd, local files, warm")
print("page cache). Targets: fuse_2ms >= 0.8, fuse_10ms >= 0.5, local_cold")
print(">= 0.95 (batchd, default settings).")
EOF

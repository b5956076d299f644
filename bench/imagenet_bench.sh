#!/usr/bin/env bash
# The imagenet workload side by side with its two references, on the same
# generated files and the same cores:
#   (a) a plain full decode of every train file (TurboJPEG tjDecompress2 at
#       scale 1 to RGB, imagenet_tool full-decode), with as many threads as
#       the daemon has workers: the limit batchd must beat;
#   (b) batchd's train stream consumed by W = 1, 2, 4 ranks (batchctl bench);
#   (c) AlgoPerf's pipeline, torchvision ImageFolder + DistributedSampler +
#       DataLoader per rank, best of num_workers 0, 1, 2, same W;
# and the eval stream (W = 1) against torchvision's eval pipeline. Prints
# images/s, threads and RSS per run, and the ratios.
#
# Usage: bench/imagenet_bench.sh [BUILD_DIR]            (default: ./build)
#
# Environment:
#   BENCH_DATA      data set directory; generated there when missing (with
#                   the grayscale, CMYK and PNG files, without the truncated
#                   one, which stops torchvision's pipeline)
#                   (default ${TMPDIR:-/tmp}/batchd-imagenet-bench)
#   BENCH_CLASSES, BENCH_PER_CLASS, BENCH_VAL_PER_CLASS
#                   its size (default 20 x 100 train = 2000, 20 x 25 val)
#   BENCH_THREADS   the daemon's worker threads and (a)'s threads
#                   (default: nproc)
#   BENCH_WORLD_SIZES  (default "1 2 4")
#   BENCH_GLOBAL_BATCH (default 64)
#   BENCH_EPOCHS    train epochs each run reads (default 2)
#   BENCH_WORKERS   torchvision num_workers to try (default "0 1 2")
#   BENCH_JSON      keep every run's JSON line in this file
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=bench/lib.sh
. "$repo/bench/lib.sh"
bench_init imagenet_bench "${1:-}" server/batchd server/batchctl \
  workloads/imagenet/imagenet_tool
tool="$build/workloads/imagenet/imagenet_tool"
helper="$repo/bench/imagenet_bench.py"

data="${BENCH_DATA:-${TMPDIR:-/tmp}/batchd-imagenet-bench}"
classes="${BENCH_CLASSES:-20}"
per_class="${BENCH_PER_CLASS:-100}"
val_per_class="${BENCH_VAL_PER_CLASS:-25}"
threads="${BENCH_THREADS:-$(nproc)}"
world_sizes="${BENCH_WORLD_SIZES:-1 2 4}"
global_batch="${BENCH_GLOBAL_BATCH:-64}"
epochs="${BENCH_EPOCHS:-2}"
workers_list="${BENCH_WORKERS:-0 1 2}"

bench_imagenet_data imagenet_bench "$data" "$classes" "$per_class" \
  "$val_per_class"
n_train=$(find "$data/train" -type f | wc -l)
n_val=$(find "$data/val" -type f | wc -l)
# Every run reads the files from the page cache.
cat "$data"/train/*/* "$data"/val/*/* >/dev/null
steps=$((epochs * (n_train / global_batch)))
echo "imagenet_bench: $n_train train / $n_val val files, $(du -sh "$data" | cut -f1)," \
  "$threads threads, global batch $global_batch, $steps steps" >&2

work="$(mktemp -d "${TMPDIR:-/tmp}/batchd-imgbench.XXXXXX")"
json="${BENCH_JSON:-$work/runs.jsonl}"
: >"$json"
daemon_pid=""
cleanup() {
  bench_kill_daemon
  rm -rf "$work"
}
trap cleanup EXIT

# (a) the full-decode limit.
echo "(a) full decode, $threads threads ..." >&2
"$tool" full-decode --threads "$threads" "$data"/train/*/* |
  "$py" -c 'import json,sys; r=json.load(sys.stdin); r["pipeline"]="full_decode"; print(json.dumps(r))' \
  >>"$json"

# (b) batchd.
socket="unix://$work/batchd.sock"
bench_start_daemon "$batchd" "$batchctl" "$socket" "$work/batchd.log" \
  --data-root "$data" --shm-prefix "imgbench-$$" --threads "$threads"
run_batchd() {  # split world steps
  local split=$1 w=$2 s=$3
  echo "(b) batchd $split, W=$w ..." >&2
  out="$("$batchctl" bench --server "$socket" --workload imagenet --data . \
    --split "$split" --global-batch-size "$global_batch" --world-size "$w" \
    --steps "$s" --json)"
  "$py" -c 'import json,sys; print(json.dumps({"pipeline": "batchd", "split": sys.argv[1], "world": int(sys.argv[2]), "threads": int(sys.argv[3]), "bench": json.loads(sys.argv[4])}))' \
    "$split" "$w" "$threads" "$out" >>"$json"
}
for w in $world_sizes; do run_batchd train "$w" "$steps"; done
run_batchd val 1 $(((n_val + global_batch - 1) / global_batch))
bench_stop_daemon "$batchctl" "$socket"

# (c) torchvision, per rank.
for w in $world_sizes; do
  for nw in $workers_list; do
    echo "(c) torchvision train, W=$w, num_workers=$nw ..." >&2
    "$py" "$helper" torchvision --data "$data" --split train --world "$w" \
      --workers "$nw" --global-batch "$global_batch" --steps "$steps" >>"$json"
  done
done
for nw in $workers_list; do
  echo "(c) torchvision val, W=1, num_workers=$nw ..." >&2
  "$py" "$helper" torchvision --data "$data" --split val --world 1 \
    --workers "$nw" --global-batch "$global_batch" --steps 1000000 >>"$json"
done

"$py" "$helper" report "$json"

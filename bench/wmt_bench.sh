#!/usr/bin/env bash
# The wmt workload's train stream side by side with AlgoPerf's TensorFlow
# input pipeline (tf.data + tensorflow-text's SentencePiece tokenizer +
# pack_dataset, bench/wmt_tf_pipeline.py) on the same generated TFDS shards
# and the same SentencePiece model:
#   (a) rows/s and non-padding tokens/s per core: TF with one thread
#       (AlgoPerf's setting for ranks > 0) under `taskset -c 0`, and with
#       its default threads; batchd with --threads 1 under `taskset -c 0`
#       (the consumer on core 1), and with --threads 2; the ratio per core,
#       batchd / TF, whose target is >= 5x. Also rows per CPU-second of the
#       pipeline's process, which other load on the machine does not skew.
#   (b) threads and RSS for W = 1, 2, 4, 8 ranks: the daemon's
#       (batchctl bench --world-size W) against W TF pipeline processes.
# Prints one table at the end (and its JSON with --json).
#
# Usage: bench/wmt_bench.sh [--json] [BUILD_DIR]       (default: ./build)
#
# Needs: the build's batchd and batchctl (and build/python for the token
# count: Debian's python3 with python3-torch), python3-sentencepiece, and
# PyPI for the TF venv (set up once; without it the TF side is skipped and
# the script says why).
#
# Environment:
#   BATCHD_BENCH_VENV  venv with tensorflow-cpu and tensorflow-text
#                      (default ~/.cache/batchd-bench-venv; created here)
#   BENCH_TF_VERSION, BENCH_TF_TEXT_VERSION
#                      versions installed into it (default 2.21.0, 2.21.1;
#                      tensorflow-text must match tensorflow's minor)
#   BENCH_DATA         data set directory; generated there when missing or
#                      made with other sizes
#                      (default ${TMPDIR:-/tmp}/batchd-wmt-bench)
#   BENCH_PAIRS        train pairs (default 40000; generate_wmt.py
#                      --stats wmt17: WMT17's line lengths and word tail)
#   BENCH_VOCAB        SentencePiece pieces (default 32000, AlgoPerf's;
#                      lowered to what the corpus supports)
#   BENCH_STEPS        timed global batches of each batchd run (default 300)
#   BENCH_TF_BATCHES   timed batches of each TF run (default 50)
#   BENCH_WORLD_SIZES  (default "1 2 4 8")
#   BENCH_JSON         keep every run's JSON line in this file
set -euo pipefail

want_json=0
if [[ "${1:-}" == "--json" ]]; then want_json=1; shift; fi
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=bench/lib.sh
. "$repo/bench/lib.sh"
bench_init wmt_bench "${1:-}" server/batchd server/batchctl
helper="$repo/bench/wmt_tf_pipeline.py"
tools="$repo/workloads/wmt/tools"

venv="${BATCHD_BENCH_VENV:-$HOME/.cache/batchd-bench-venv}"
tf_version="${BENCH_TF_VERSION:-2.21.0}"
tf_text_version="${BENCH_TF_TEXT_VERSION:-2.21.1}"
data="${BENCH_DATA:-${TMPDIR:-/tmp}/batchd-wmt-bench}"
pairs="${BENCH_PAIRS:-40000}"
vocab="${BENCH_VOCAB:-32000}"
steps="${BENCH_STEPS:-300}"
short_steps=20
tf_batches="${BENCH_TF_BATCHES:-50}"
world_sizes="${BENCH_WORLD_SIZES:-1 2 4 8}"
global_batch=128
cores=$(nproc)

work="$(mktemp -d "${TMPDIR:-/tmp}/batchd-wmtbench.XXXXXX")"
json="${BENCH_JSON:-$work/runs.jsonl}"
: >"$json"
daemon_pid=""
tf_pids=()
stop_daemon() {
  if [[ -n "$daemon_pid" ]] && kill -0 "$daemon_pid" 2>/dev/null; then
    kill "$daemon_pid" 2>/dev/null || true
    wait "$daemon_pid" 2>/dev/null || true
  fi
  daemon_pid=""
}
cleanup() {
  for p in "${tf_pids[@]}"; do kill "$p" 2>/dev/null || true; done
  stop_daemon
  rm -rf "$work"
}
trap cleanup EXIT

# --- 1. The TensorFlow venv (once). -------------------------------------
# tensorflow-text declares a dependency on the full `tensorflow` package;
# it is installed without dependencies on top of tensorflow-cpu of the
# same minor, so the venv holds one TensorFlow.
tf_missing=""
tf_ok() {
  "$venv/bin/python" -c 'import tensorflow, tensorflow_text' >/dev/null 2>&1
}
if ! tf_ok; then
  echo "wmt_bench: setting up $venv (tensorflow-cpu $tf_version," \
    "tensorflow-text $tf_text_version) ..." >&2
  if [[ ! -x "$venv/bin/python" ]]; then
    mkdir -p "$(dirname "$venv")"
    for base in "$py" python3; do
      "$base" -m venv "$venv" >"$work/venv.log" 2>&1 && break
      rm -rf "$venv"
    done
  fi
  if [[ ! -x "$venv/bin/python" ]]; then
    tf_missing="could not create a venv at $venv (python3 -m venv failed;"
    tf_missing+=" Debian package python3-venv)"
  elif ! "$venv/bin/pip" install -q "tensorflow-cpu==$tf_version" \
        >>"$work/venv.log" 2>&1 ||
       ! "$venv/bin/pip" install -q --no-deps \
        "tensorflow-text==$tf_text_version" >>"$work/venv.log" 2>&1; then
    tf_missing="PyPI did not provide tensorflow-cpu==$tf_version and"
    tf_missing+=" tensorflow-text==$tf_text_version: $(tail -1 "$work/venv.log")"
  elif ! tf_ok; then
    tf_missing="tensorflow/tensorflow_text installed in $venv but do not"
    tf_missing+=" import: $("$venv/bin/python" -c 'import tensorflow_text' 2>&1 | tail -1)"
  fi
fi
if [[ -n "$tf_missing" ]]; then
  echo "wmt_bench: WARNING: no TensorFlow reference: $tf_missing" >&2
  echo "wmt_bench: running the batchd side only" >&2
fi

# --- 2. Data and SentencePiece model (once per size). -------------------
# A directory this script did not make (no .wmt-bench stamp) is used as it
# is when it holds TFDS train shards and a model, and never removed.
stamp="pairs=$pairs vocab=$vocab stats=wmt17"
if [[ -d "$data" && ! -f "$data/.wmt-bench" &&
      -n "$(ls -A "$data" 2>/dev/null)" ]]; then
  if [[ ! -f "$data/wmt_sentencepiece_model" ]] ||
     ! compgen -G "$data/wmt17_translate/de-en/1.0.0/*-train.tfrecord-*" >/dev/null; then
    echo "wmt_bench: $data is not a generated bench data set and lacks" \
      "wmt17_translate train shards or wmt_sentencepiece_model;" \
      "set BENCH_DATA to another directory" >&2
    exit 1
  fi
  pairs="?"
elif [[ "$(cat "$data/.wmt-bench" 2>/dev/null)" != "$stamp" ]]; then
  echo "wmt_bench: generating $pairs pairs in $data ..." >&2
  rm -rf "$data"
  mkdir -p "$data"
  echo "incomplete" >"$data/.wmt-bench"  # regenerated if this run stops
  "$py" "$tools/generate_wmt.py" --out "$data" --train "$pairs" \
    --validation 300 --test 300 --stats wmt17 >&2
  if ! "$py" "$tools/train_sentencepiece.py" --data "$data" \
       --vocab-size "$vocab" --threads "$cores" >"$work/spm.log" 2>&1; then
    # A small corpus supports fewer pieces; SentencePiece names the most.
    most=$(grep -o 'set it to a value <= [0-9]*' "$work/spm.log" |
           grep -o '[0-9]*$' || true)
    [[ -n "$most" ]] || { cat "$work/spm.log" >&2; exit 1; }
    echo "wmt_bench: the corpus supports $most pieces, not $vocab" >&2
    "$py" "$tools/train_sentencepiece.py" --data "$data" \
      --vocab-size "$most" --threads "$cores" >"$work/spm.log" 2>&1 ||
      { cat "$work/spm.log" >&2; exit 1; }
  fi
  grep '^train_sentencepiece:' "$work/spm.log" >&2 || true
  echo "$stamp" >"$data/.wmt-bench"
fi
pieces=$("$py" -c 'import sentencepiece as s, sys
print(s.SentencePieceProcessor(model_file=sys.argv[1]).get_piece_size())' \
  "$data/wmt_sentencepiece_model")
# Every run reads the files from the page cache.
cat "$data"/wmt17_translate/de-en/1.0.0/* >/dev/null
"$py" -c 'import json,sys; print(json.dumps({"pipeline": "meta", "pairs": sys.argv[1], "vocab": int(sys.argv[2]), "cores": int(sys.argv[3]), "tf_missing": sys.argv[4], "global_batch": 128}))' \
  "$pairs" "$pieces" "$cores" "$tf_missing" >>"$json"
echo "wmt_bench: $pairs pairs, $pieces pieces, $cores cores," \
  "batchd $steps steps, TF $tf_batches batches" >&2

# --- 3. batchd. ----------------------------------------------------------
socket="unix://$work/batchd.sock"
start_daemon() {  # threads [cpu list]
  local threads=$1 cpus=${2:-}
  local pin=()
  [[ -n "$cpus" ]] && pin=(taskset -c "$cpus")
  "${pin[@]}" "$batchd" --listen "$socket" --data-root "$data" \
    --shm-prefix "wmtbench-$$" --threads "$threads" \
    --throughput-log-seconds 0 2>>"$work/batchd.log" &
  daemon_pid=$!
  for _ in $(seq 100); do
    "$batchctl" status --server "$socket" --timeout 1 >/dev/null 2>&1 && return
    sleep 0.1
  done
  echo "wmt_bench: batchd did not start:" >&2
  cat "$work/batchd.log" >&2
  exit 1
}
cpu_ticks() {  # utime + stime of the daemon, clock ticks
  awk '{sub(/^.*\) /, ""); print $12 + $13}' "/proc/$daemon_pid/stat"
}
bench() {  # steps world [consumer cpu list]
  local pin=()
  [[ -n "${3:-}" ]] && pin=(taskset -c "$3")
  "${pin[@]}" "$batchctl" bench --server "$socket" --workload wmt --data . \
    --split train --global-batch-size "$global_batch" --world-size "$2" \
    --steps "$1" --json
}
tck=$(getconf CLK_TCK)
single_batchd() {  # threads pinned(0/1)
  local threads=$1 pinned=$2 daemon_cpus="" consumer_cpus=""
  if [[ "$pinned" == 1 ]]; then daemon_cpus=0; consumer_cpus=1; fi
  echo "(a) batchd --threads $threads${daemon_cpus:+, taskset -c 0} ..." >&2
  start_daemon "$threads" "$daemon_cpus"
  # The daemon's CPU over a short and a long run: the difference is the
  # cost of the long run's extra rows, without the stream's one-time
  # length pass and warm-up.
  local c0 c1 c2 out
  c0=$(cpu_ticks)
  bench "$short_steps" 1 "$consumer_cpus" >/dev/null
  c1=$(cpu_ticks)
  out="$(bench "$steps" 1 "$consumer_cpus")"
  c2=$(cpu_ticks)
  if [[ "$pinned" == 1 ]]; then
    echo "(a) batchd: non-padding tokens per row, from 20 batches ..." >&2
    PYTHONPATH="$build/python" "$py" "$helper" batchd-tokens \
      --server "$socket" --data . --batches 20 >>"$json"
  fi
  stop_daemon
  "$py" -c 'import json,sys
a = sys.argv
print(json.dumps({"pipeline": "batchd_single", "label": f"t{a[1]}p{a[2]}",
  "threads": int(a[1]), "pinned": a[2] == "1",
  "cpu_seconds": ((int(a[5]) - int(a[4])) - (int(a[4]) - int(a[3]))) / int(a[6]),
  "rows_for_cpu": (int(a[7]) - int(a[8])) * 128,
  "bench": json.loads(a[9])}))' \
    "$threads" "$pinned" "$c0" "$c1" "$c2" "$tck" "$steps" "$short_steps" \
    "$out" >>"$json"
}
single_batchd 1 1
single_batchd 2 0

# --- 4. TensorFlow, one process. -----------------------------------------
if [[ -z "$tf_missing" ]]; then
  echo "(a) TF, 1 thread, taskset -c 0 ..." >&2
  taskset -c 0 "$venv/bin/python" "$helper" tf --data "$data" --threads one \
    --batches "$tf_batches" 2>>"$work/tf.log" |
    "$py" -c 'import json,sys; r=json.load(sys.stdin); r.update(pipeline="tf_single", label="one"); print(json.dumps(r))' \
    >>"$json"
  echo "(a) TF, default threads ..." >&2
  "$venv/bin/python" "$helper" tf --data "$data" --threads default \
    --batches "$tf_batches" 2>>"$work/tf.log" |
    "$py" -c 'import json,sys; r=json.load(sys.stdin); r.update(pipeline="tf_single", label="default"); print(json.dumps(r))' \
    >>"$json"
fi

# --- 5. Threads and RSS against W ranks. ---------------------------------
start_daemon 0
for w in $world_sizes; do
  echo "(b) W=$w: batchd ..." >&2
  out="$(bench 50 "$w")"
  tf_out="$work/tf-w$w.jsonl"
  : >"$tf_out"
  if [[ -z "$tf_missing" ]]; then
    echo "(b) W=$w: $w TF processes (rank 0 default threads, others 1) ..." >&2
    tf_pids=()
    for ((r = 0; r < w; r++)); do
      mode=one
      [[ $r == 0 ]] && mode=default
      "$venv/bin/python" "$helper" tf --data "$data" --threads "$mode" \
        --rank "$r" --warmup 3 --batches 10 >"$work/tf-w$w-r$r.json" \
        2>>"$work/tf.log" &
      tf_pids+=($!)
    done
    for p in "${tf_pids[@]}"; do wait "$p"; done
    tf_pids=()
    cat "$work"/tf-w"$w"-r*.json >"$tf_out"
  fi
  "$py" -c 'import json,sys
tf = [json.loads(l) for l in open(sys.argv[3]) if l.strip()]
print(json.dumps({"pipeline": "world", "world": int(sys.argv[1]), "bench": json.loads(sys.argv[2]), "tf": tf}))' \
    "$w" "$out" "$tf_out" >>"$json"
done
stop_daemon

# --- 6. The table. -------------------------------------------------------
report=("$py" "$helper" report "$json")
[[ "$want_json" == 1 ]] && report+=(--json)
"${report[@]}"

#!/usr/bin/env bash
# The main job: installs, builds, then shows batchd end to end on small
# generated data sets: one server per node, two thin DDP trainers (Gloo on
# CPU) of two ranks each — a ResNet on ImageNet-like JPEGs and a Transformer
# on packed WMT-like sentence pairs — reading their batches from the server,
# the server's status table while they run, a delivery benchmark, and a
# clean shutdown that leaves nothing in /dev/shm.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
BUILD=${BATCHD_BUILD:-build}
BIN="$PWD/$BUILD/server"
EXAMPLES="$PWD/$BUILD/examples"

WORK=$(mktemp -d /tmp/batchd-demo-XXXXXX)
export BATCHD_SERVER="unix://$WORK/batchd.sock"
cleanup() {
  if [ -n "${SERVER_PID:-}" ]; then kill "$SERVER_PID" 2>/dev/null || true; fi
  rm -rf "$WORK"
}
trap cleanup EXIT

echo "== generating small data sets in $WORK/data"
mkdir -p "$WORK/data"
/usr/bin/python3 workloads/imagenet/make_imagenet.py "$WORK/data/imagenet" \
  --classes 4 --per-class 32 --val-per-class 4 --no-tfrecord
/usr/bin/python3 workloads/wmt/tools/generate_wmt.py --out "$WORK/data/wmt" \
  --train 3000 --validation 100 --test 50 --shards 2 --seed 1 > /dev/null
/usr/bin/python3 workloads/wmt/tools/train_sentencepiece.py \
  --data "$WORK/data/wmt" --vocab-size 1000 --threads 2 > /dev/null
echo "wmt: 3000 training pairs, SentencePiece model of 1000 pieces"

echo
echo "== starting batchd (socket $WORK/batchd.sock, log $WORK/batchd.log)"
"$BIN/batchd" --listen "$BATCHD_SERVER" --data-root "$WORK/data" \
  --shm-prefix batchd-demo --throughput-log-seconds 10 2> "$WORK/batchd.log" &
SERVER_PID=$!
for _ in $(seq 100); do
  "$BIN/batchctl" status > /dev/null 2>&1 && break
  sleep 0.1
done

show_status() {
  sleep "$1"
  echo
  echo "-- batchctl status, while the trainers run"
  "$BIN/batchctl" status || true
  echo
}

echo
echo "== ResNet (ResNet-50's shape, width 8, 112 x 112 crops for the CPU) on"
echo "   imagenet: 2 DDP ranks, 96 steps"
show_status 8 &
STATUS_PID=$!
"$EXAMPLES/imagenet_resnet_ddp" --nproc 2 --data imagenet --image-size 112 \
  --global-batch-size 16 --steps 96 --classes 4 --lr 0.02 --log-every 16
wait "$STATUS_PID"

echo
echo "== Transformer on packed wmt rows: 2 DDP ranks, 32 steps"
"$EXAMPLES/wmt_transformer_ddp" --nproc 2 --data wmt --vocab-size 1000 \
  --global-batch-size 8 --steps 32 --log-every 8

echo
echo "== batchctl bench: the synthetic stream, 19 MiB per-rank batches (128 x 224 x 224 x 3), W = 1 and 2"
for w in 1 2; do
  "$BIN/batchctl" bench --world-size "$w" --global-batch-size $((128 * w)) \
    --steps 100 --option examples=20000 --option payload_bytes=150528 --slots 4
done

echo
echo "== shutting down"
"$BIN/batchctl" shutdown
wait "$SERVER_PID" && SERVER_PID=""
left=$(ls /dev/shm | grep -c '^batchd-demo\.' || true)
echo "segments left in /dev/shm: $left"
grep -E "event=(throughput|stopped)" "$WORK/batchd.log" | tail -n 4

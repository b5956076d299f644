#!/usr/bin/env bash
# The main job: installs, builds, then shows batchd end to end on a generated
# synthetic data set: one server, a 2-rank DDP training job over Gloo that
# reads its batches from the server, the server's status table, a delivery
# benchmark with 1 and 2 consumer ranks, and a clean shutdown.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
BUILD=${BATCHD_BUILD:-build}
BIN="$PWD/$BUILD/server"
export PYTHONPATH="$PWD/$BUILD/python"

WORK=$(mktemp -d /tmp/batchd-demo-XXXXXX)
export BATCHD_SERVER="unix://$WORK/batchd.sock"
cleanup() {
  [ -n "${SERVER_PID:-}" ] && kill "$SERVER_PID" 2>/dev/null && wait "$SERVER_PID" 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT

echo "== starting batchd (socket $WORK/batchd.sock, log $WORK/batchd.log)"
"$BIN/batchd" --listen "$BATCHD_SERVER" --data-root "$WORK" \
  --shm-prefix batchd-demo 2> "$WORK/batchd.log" &
SERVER_PID=$!
for _ in $(seq 100); do
  "$BIN/batchctl" status > /dev/null 2>&1 && break
  sleep 0.1
done

echo
echo "== 2 DDP ranks (Gloo) train a linear model on the synthetic stream"
/usr/bin/python3 workloads/examples/launch.py --nproc 2 -- \
  workloads/examples/synthetic_ddp.py --steps 4000 &
TRAIN_PID=$!
sleep 2
echo
echo "== batchctl status, while the job runs"
"$BIN/batchctl" status || true
wait "$TRAIN_PID"

echo
echo "== batchctl bench: 4 MiB global batches (64 x 64 KiB), W = 1 and 2"
for w in 1 2; do
  "$BIN/batchctl" bench --world-size "$w" --global-batch-size 64 --steps 2000 \
    --option examples=20000 --option payload_bytes=65536 --slots 4
done

echo
echo "== shutting down"
"$BIN/batchctl" shutdown
wait "$SERVER_PID" && SERVER_PID=""
left=$(ls /dev/shm | grep -c '^batchd-demo\.' || true)
echo "segments left in /dev/shm: $left"
tail -n 3 "$WORK/batchd.log"

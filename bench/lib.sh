# shellcheck shell=bash disable=SC2154
# What the benchmark scripts share (ab.sh, imagenet_bench.sh, index_bench.sh,
# readahead_bench.sh, wmt_bench.sh): their binaries, the generated ImageNet
# set, and one batchd daemon at a time. Sourced, not run; the caller sets
# `set -euo pipefail`.
#
# Globals it uses: repo (the source tree), py (the Python: bench_init sets
# it), daemon_pid (the running daemon, "" when none; bench_stop_daemon and
# bench_kill_daemon reset it).

# bench_init NAME BUILD_DIR TARGET...: a script's start. Sets build
# (BUILD_DIR made absolute; empty: $repo/build), batchd and batchctl (the
# build's daemon and CLI) and py (Debian's python3), and checks every
# TARGET, a path under the build (server/batchd, bench/latency_fs, ...),
# with bench_require.
bench_init() {
  local name=$1 target targets=()
  build="$(cd "${2:-$repo/build}" && pwd)"
  shift 2
  batchd="$build/server/batchd"
  batchctl="$build/server/batchctl"
  py=/usr/bin/python3
  for target in "$@"; do
    targets+=("$build/$target")
  done
  bench_require "$name" "$build" "${targets[@]}"
}

# bench_require NAME BUILD BIN...: every BIN (a path under BUILD) exists and
# is executable, or NAME says which targets to build and the script exits.
bench_require() {
  local name=$1 build=$2 bin
  shift 2
  for bin in "$@"; do
    [[ -x "$bin" ]] || {
      echo "$name: $bin is missing; build it first:" >&2
      echo "  ninja -C $build $(for b in "$@"; do printf '%s ' "${b##*/}"; done)" >&2
      exit 1
    }
  done
}

# bench_imagenet_data NAME DIR CLASSES PER_CLASS VAL_PER_CLASS: generates an
# ImageFolder set in DIR unless DIR/train exists (no TFRecord shards, no
# truncated JPEG: torchvision's pipeline stops on one).
bench_imagenet_data() {
  local name=$1 dir=$2 classes=$3 per_class=$4 val_per_class=$5
  [[ -d "$dir/train" ]] && return 0
  echo "$name: generating $classes x $per_class images in $dir ..." >&2
  "$py" "$repo/workloads/imagenet/make_imagenet.py" "$dir" \
    --classes "$classes" --per-class "$per_class" \
    --val-per-class "$val_per_class" --no-tfrecord --no-truncated >/dev/null
}

# bench_start_daemon BATCHD BATCHCTL SOCKET LOG ARGS...: starts BATCHD on
# SOCKET (a unix:// address) with ARGS, stderr to LOG, sets daemon_pid, and
# waits (up to 10 s) until it answers batchctl status.
bench_start_daemon() {
  local batchd=$1 batchctl=$2 socket=$3 log=$4
  shift 4
  "$batchd" --listen "$socket" "$@" 2>"$log" &
  daemon_pid=$!
  for _ in $(seq 100); do
    "$batchctl" status --server "$socket" --timeout 1 >/dev/null 2>&1 && break
    sleep 0.1
  done
}

# bench_cpu_ticks PID: the user + system CPU time process PID has used, in
# clock ticks (getconf CLK_TCK a second), from /proc/PID/stat.
bench_cpu_ticks() {
  local stat
  stat=$(<"/proc/$1/stat")
  stat=${stat##*) }  # the fields after the command name, from state on
  # shellcheck disable=SC2086
  set -- $stat
  echo $((${12} + ${13}))
}

# bench_stop_daemon BATCHCTL SOCKET: shuts the daemon down and waits for it.
bench_stop_daemon() {
  "$1" shutdown --server "$2" >/dev/null 2>&1 || true
  wait "$daemon_pid" 2>/dev/null || true
  daemon_pid=""
}

# bench_kill_daemon: for the EXIT trap; kills a daemon still running.
bench_kill_daemon() {
  if [[ -n "$daemon_pid" ]] && kill -0 "$daemon_pid" 2>/dev/null; then
    kill "$daemon_pid" 2>/dev/null || true
    wait "$daemon_pid" 2>/dev/null || true
  fi
  daemon_pid=""
}

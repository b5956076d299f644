#!/usr/bin/env bash
# The sidecar image built and run as users run it, with podman (Debian's,
# runc; no image registry is needed):
#   1. a Debian 12 base image made from Debian's packages (mmdebstrap
#      minbase, cached in $BATCHD_CI_CACHE, default /var/cache/batchd-ci);
#   2. docker/Dockerfile built (--prebuilt, the default: its runtime stage
#      from build/'s binaries; --full: both stages, as `docker build` does);
#   3. a trainer image: Debian's bare Python 3 + numpy and the manylinux
#      wheel from pip (tests/container/Dockerfile.trainer);
#   4. batchd run from its image as its user (uid 10001) with the socket
#      volume and a shareable IPC namespace; trainer containers that join
#      it (another uid, in the group batchd) read one epoch on 2 ranks,
#      checking every step's slices disjoint and complete (Python; and C++
#      ranks, tests/consumer_main.cc), and batchctl bench's C++ ranks read
#      through batchd::Loader;
#   5. `podman stop` (SIGTERM) with a stream open: exit status 0, the
#      trainer told the daemon is exiting (after its reconnect window), no
#      ring left in /dev/shm;
#   6. a /dev/shm smaller than the rings: the error with the sizes, no Bus
#      error; `batchctl plan`'s --shm-size for that spec then works;
#   7. docker/kubernetes-pod.yaml and the pod of
#      docker/kubernetes-daemonset.yaml with a trainer pod, by
#      `podman kube play` (tests/container/kube_check.py adapts what podman
#      needs).
# Prints each step's time and "container-check: N passed, 0 failed".
#
# Usage: scripts/container-check.sh [--prebuilt | --full | --base-only]
#   --base-only  makes (or imports) the base image and stops there
# Needs scripts/install-deps.sh (podman, runc, mmdebstrap), scripts/build.sh,
# root, and the package registry (apt inside the builds).
set -euo pipefail
cd "$(dirname "$0")/.."
mode=prebuilt
for arg in "$@"; do
  case "$arg" in
    --prebuilt) mode=prebuilt ;;
    --full) mode=full ;;
    --base-only) mode=base ;;
    *) echo "usage: scripts/container-check.sh [--prebuilt | --full | --base-only]" >&2; exit 2 ;;
  esac
done
REPO=$PWD
BUILD=${BATCHD_BUILD:-build}
CACHE=${BATCHD_CI_CACHE:-/var/cache/batchd-ci}
BASE=localhost/batchd-ci/debian:bookworm
IMAGE=localhost/batchd-ci/batchd:check
TRAINER=localhost/batchd-ci/trainer:check
N=bdck$$  # prefix of this run's containers and volumes
WORK=$(mktemp -d /tmp/batchd-ctr-XXXXXX)
# crun and runc may not set rlimits on these machines, and crun refuses
# their cgroup layout: no default ulimits, runc.
export CONTAINERS_CONF="$WORK/containers.conf"
printf '[containers]\ndefault_ulimits = []\n' > "$CONTAINERS_CONF"
pm() { podman --runtime runc "$@"; }
# The image's HEALTHCHECK runs through systemd timers under podman, and
# CI machines run no systemd: the checks below ask batchctl themselves.
NOHC=--no-healthcheck
cleanup() {
  local c
  for c in $(pm ps -a --format '{{.Names}}' | grep "^$N" || true); do
    pm rm -f -v -t 0 "$c" > /dev/null 2>&1 || true
  done
  for c in $(pm pod ps --format '{{.Name}}' | grep "^$N" || true); do
    pm pod rm -f "$c" > /dev/null 2>&1 || true
  done
  for c in $(pm volume ls --format '{{.Name}}' | grep "^$N" || true); do
    pm volume rm -f "$c" > /dev/null 2>&1 || true
  done
  umount "$WORK/node/dev/shm" 2> /dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT
passed=0
step_start=$SECONDS
ok() {
  passed=$((passed + 1))
  echo "container-check: ok: $* ($((SECONDS - step_start)) s)"
  step_start=$SECONDS
}
die() {
  echo "container-check: FAILED: $*" >&2
  echo "container-check: $passed passed, 1 failed"
  exit 1
}
# until CMD succeeds, for at most SECONDS (a generous bound: loaded machines).
wait_for() {
  local seconds=$1; shift
  local deadline=$((SECONDS + seconds))
  until "$@" > /dev/null 2>&1; do
    [ $SECONDS -lt $deadline ] || return 1
    sleep 0.2
  done
}
[ "$(id -u)" = 0 ] || die "run as root (rootful podman)"
for tool in podman runc mmdebstrap; do
  command -v $tool > /dev/null || die "$tool missing: run scripts/install-deps.sh"
done
[ "$mode" = base ] || [ -x "$BUILD/server/batchd" ] || die "build first (scripts/build.sh)"

# 1. The base image, from Debian's packages. The tarball is kept in the
#    cache (a second run imports it in seconds); docs, man pages and
#    locales are left out as in Docker's debian:*-slim images.
mkdir -p "$CACHE"
base_tar="$CACHE/debian-bookworm-minbase.tar"
if [ ! -s "$base_tar" ]; then
  mmdebstrap --variant=minbase --quiet \
    --dpkgopt='path-exclude=/usr/share/man/*' \
    --dpkgopt='path-exclude=/usr/share/doc/*' \
    --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --dpkgopt='path-exclude=/usr/share/locale/*' \
    --dpkgopt='path-exclude=/usr/share/info/*' \
    --aptopt='APT::Install-Recommends "false"' \
    --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*' \
    bookworm "$WORK/base.tar" || die "mmdebstrap of bookworm failed"
  mv "$WORK/base.tar" "$base_tar"
fi
base_id=$(sha256sum < "$base_tar" | cut -c1-16)
if [ "$(pm image inspect -f '{{index .Labels "base-tar"}}' "$BASE" 2>/dev/null)" != "$base_id" ]; then
  pm import --change "LABEL base-tar=$base_id" "$base_tar" "$BASE" > /dev/null
fi
[ "$(pm run --rm --network none "$BASE" cat /etc/debian_version)" \> 12 ] \
  || die "the base image does not run"
ok "base image $BASE from $base_tar"
[ "$mode" != base ] || exit 0

# 2. The sidecar image. The images this run replaces are removed after it
#    (their layers stay cached while the new ones use them).
old_images=$(pm image inspect -f '{{.Id}}' "$IMAGE" "$TRAINER" 2>/dev/null || true)
drop_old_images() {
  local id now
  now=$(pm image inspect -f '{{.Id}}' "$IMAGE" "$TRAINER")
  for id in $old_images; do
    grep -q "$id" <<< "$now" || pm rmi "$id" > /dev/null 2>&1 || true
  done
}
build_args=(--runtime runc build --format docker --pull=never --network host
            --build-arg "BASE=$BASE" -f "$REPO/docker/Dockerfile")
if [ "$mode" = full ]; then
  podman "${build_args[@]}" -t "$IMAGE" "$REPO" > "$WORK/image-build.log" 2>&1 \
    || { tail -40 "$WORK/image-build.log"; die "docker/Dockerfile did not build"; }
else
  # The runtime stage alone, from the binaries of build/ (stripped, as the
  # build stage installs them).
  mkdir -p "$WORK/ctx/prebuilt"
  install -s "$BUILD/server/batchd" "$BUILD/server/batchctl" "$WORK/ctx/prebuilt/"
  cp docker/batchd.toml "$WORK/ctx/prebuilt/"
  docker/runtime-packages.sh "$BUILD/server/batchd" "$BUILD/server/batchctl" \
    > "$WORK/ctx/prebuilt/runtime-packages.txt"
  podman "${build_args[@]}" --build-arg BINARIES=prebuilt --target runtime \
    -t "$IMAGE" "$WORK/ctx" > "$WORK/image-build.log" 2>&1 \
    || { tail -40 "$WORK/image-build.log"; die "the runtime stage did not build"; }
fi
image_mb=$(( $(pm image inspect -f '{{.Size}}' "$IMAGE") / 1000000 ))
[ "$(pm run --rm --network none $NOHC "$IMAGE" --version | head -c 6)" = batchd ] \
  || die "batchd --version does not run in the image"
[ "$(pm run --rm --network none $NOHC --entrypoint id "$IMAGE" -u)" = 10001 ] \
  || die "the image does not run as uid 10001"
ok "image $IMAGE ($mode): ${image_mb} MB"

# 3. The trainer image: the wheel for the image's Python (Debian's 3.11).
wheel=$(ls "${BATCHD_DIST:-dist}"/batchd-*-cp311-cp311-manylinux_2_34_x86_64.whl 2>/dev/null | tail -n 1 || true)
if [ -z "$wheel" ]; then
  BATCHD_DIST="$WORK/dist" scripts/build-wheel.sh /usr/bin/python3 > "$WORK/wheel.log" 2>&1 \
    || { cat "$WORK/wheel.log"; die "scripts/build-wheel.sh /usr/bin/python3 failed"; }
  wheel=$(ls "$WORK"/dist/batchd-*-cp311-cp311-manylinux_2_34_x86_64.whl)
fi
mkdir -p "$WORK/trainer/wheels"
cp "$wheel" "$WORK/trainer/wheels/"
cp tests/container/trainer_check.py "$WORK/trainer/"
pm build --format docker --pull=never --network host --build-arg "BASE=$BASE" \
  -f "$REPO/tests/container/Dockerfile.trainer" -t "$TRAINER" "$WORK/trainer" \
  > "$WORK/trainer-build.log" 2>&1 \
  || { tail -40 "$WORK/trainer-build.log"; die "the trainer image did not build"; }
# It holds none of gRPC's libraries (Debian's python3 brings libssl3 along;
# tests/container/wheel_check.sh runs the wheel without it).
if pm run --rm --network none "$TRAINER" sh -c 'ldconfig -p | grep -E "libgrpc|libprotobuf|libabsl|libcares|libre2"'; then
  die "the trainer image has a library the wheel should bring"
fi
drop_old_images
ok "trainer image $TRAINER with $(basename "$wheel")"

# 4. The sidecar and its trainers.
SOCK=unix:///run/batchd/batchd.sock
trainer_flags=(--network none --user 20000:20000 --group-add 10001
               -e BATCHD_SERVER=$SOCK)
start_sidecar() {  # NAME SHM_SIZE [batchd flags]
  local name=$1 shm=$2; shift 2
  pm volume create "$name-run" > /dev/null
  pm run -d --name "$name" --network none $NOHC --ipc shareable --shm-size "$shm" \
    -v "$name-run:/run/batchd" "$IMAGE" --config /etc/batchd/batchd.toml \
    --threads 2 "$@" > /dev/null
  wait_for 60 pm exec "$name" batchctl status --timeout 2 \
    || { pm logs "$name" 2>&1 | tail -20; die "the sidecar $name did not come up"; }
}
start_sidecar "$N-batchd" 64m
pm run -d --name "$N-trainer" --ipc "container:$N-batchd" -v "$N-batchd-run:/run/batchd" \
  "${trainer_flags[@]}" "$TRAINER" > /dev/null
pm exec "$N-trainer" python3 /usr/local/bin/trainer_check.py epoch --stream ctr-epoch \
  --world-size 2 --global-batch-size 64 --examples 1024 \
  || die "the Python trainer's epoch"
ok "Python trainer container: 2 ranks, one epoch, disjoint and complete"
pm run --rm --ipc "container:$N-batchd" -v "$N-batchd-run:/run/batchd" \
  "${trainer_flags[@]}" $NOHC --entrypoint batchctl "$IMAGE" bench --world-size 2 \
  --global-batch-size 64 --steps 50 --option examples=1024 \
  --option payload_bytes=4096 --stream ctr-bench > "$WORK/bench.log" 2>&1 \
  || { cat "$WORK/bench.log"; die "batchctl bench's C++ ranks"; }
ok "C++ ranks (batchctl bench, batchd::Loader) in a trainer container"
# C++ ranks whose batches are checked: tests/consumer_main.cc (1000
# synthetic examples) in a container of the batchd image, which holds the
# libraries it links; the host checks one epoch of both ranks.
mkdir -p "$WORK/cxx"
chmod 0777 "$WORK/cxx"
install -m 0755 "$BUILD/tests/test_consumer" "$WORK/cxx/"
pm run --rm --ipc "container:$N-batchd" -v "$N-batchd-run:/run/batchd" -v "$WORK/cxx:/cxx" \
  "${trainer_flags[@]}" $NOHC --entrypoint sh "$IMAGE" -ec '
    for r in 0 1; do
      /cxx/test_consumer unix:///run/batchd/batchd.sock ctr-cxx 100 2 $r 0 10 0 > /cxx/rank$r.out &
      eval "pid$r=\$!"
    done
    wait $pid0; wait $pid1' > "$WORK/cxx.log" 2>&1 || { cat "$WORK/cxx.log"; die "the C++ ranks"; }
PYTHONPATH="$BUILD/python" /usr/bin/python3 tests/container/trainer_check.py cxx-outputs \
  --outputs "$WORK/cxx/rank0.out" "$WORK/cxx/rank1.out" --global-batch-size 100 \
  --examples 1000 || die "the C++ ranks' batches"
ok "C++ trainer ranks (batchd::Loader) in a container: one epoch, disjoint and complete"

# 5. podman stop with a stream open and a batch held.
pm exec -d "$N-trainer" python3 /usr/local/bin/trainer_check.py hold --stream ctr-hold \
  --ready /tmp/ready --result /tmp/result > /dev/null
wait_for 60 pm exec "$N-trainer" test -s /tmp/ready || die "the holding trainer did not start"
segment=$(pm exec "$N-trainer" cat /tmp/ready)
pm exec "$N-trainer" test -e "/dev/shm/${segment#/}" || die "ring $segment is not in /dev/shm"
pm stop -t 60 "$N-batchd" > /dev/null
code=$(pm inspect -f '{{.State.ExitCode}}' "$N-batchd")
pm logs "$N-batchd" > "$WORK/batchd.log" 2>&1
[ "$code" = 0 ] || { tail -20 "$WORK/batchd.log"; die "batchd exited $code on SIGTERM"; }
grep -q 'event=shutdown signal=SIGTERM' "$WORK/batchd.log" && grep -q 'event=stopped' "$WORK/batchd.log" \
  || { tail -20 "$WORK/batchd.log"; die "batchd's log has no SIGTERM shutdown and stop"; }
wait_for 60 pm exec "$N-trainer" test -s /tmp/result || die "the trainer did not see the stop"
result=$(pm exec "$N-trainer" cat /tmp/result)
grep -q '"error": "ServerUnavailableError"' <<< "$result" && grep -q 'is exiting' <<< "$result" \
  || die "the trainer saw $result, not its daemon exiting"
pm exec "$N-trainer" python3 /usr/local/bin/trainer_check.py no-rings \
  || die "rings left after podman stop"
ok "podman stop: exit 0, the trainer told ($(grep -o '"message": "[^"]*' <<< "$result" | cut -c13-140)...), no ring left"
pm rm -f -v -t 0 "$N-trainer" > /dev/null  # first: it joined batchd's IPC namespace
pm rm -f -v -t 0 "$N-batchd" > /dev/null

# 6. A /dev/shm smaller than the job's rings, then batchctl plan's size.
spec=(--world-size 2 --global-batch-size 64 --payload-bytes 131072 --slots 4 --examples 256)
start_sidecar "$N-small" 8m
pm run --rm --ipc "container:$N-small" -v "$N-small-run:/run/batchd" \
  "${trainer_flags[@]}" "$TRAINER" python3 /usr/local/bin/trainer_check.py too-big \
  --stream ctr-small "${spec[@]}" > "$WORK/small.log" 2>&1 \
  || { cat "$WORK/small.log"; die "the too-small /dev/shm"; }
set +e
pm exec "$N-small" batchctl plan --json --world-size 2 --global-batch-size 64 --slots 4 \
  --option examples=256 --option payload_bytes=131072 > "$WORK/plan.json"
plan_rc=$?
set -e
[ "$plan_rc" = 3 ] || die "batchctl plan exited $plan_rc in an 8 MiB /dev/shm, not 3"
shm=$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["docker_shm_size"])' "$WORK/plan.json")
pm rm -f -v -t 0 "$N-small" > /dev/null
start_sidecar "$N-planned" "$shm"
pm run --rm --ipc "container:$N-planned" -v "$N-planned-run:/run/batchd" \
  "${trainer_flags[@]}" "$TRAINER" python3 /usr/local/bin/trainer_check.py epoch \
  --stream ctr-planned "${spec[@]}" > "$WORK/planned.log" 2>&1 \
  || { cat "$WORK/planned.log"; die "the stream in batchctl plan's --shm-size $shm"; }
pm rm -f -v -t 0 "$N-planned" > /dev/null
ok "8 MiB /dev/shm: $(grep -o 'shared memory too small.*' "$WORK/small.log" | cut -c1-120)...; plan's --shm-size=$shm runs it"

# 7. The Kubernetes manifests, as podman kube play runs them.
/usr/bin/python3 tests/container/kube_check.py --prefix "$N" --image "$IMAGE" \
  --trainer "$TRAINER" --work "$WORK" || die "the Kubernetes manifests"
ok "podman kube play: docker/kubernetes-pod.yaml and docker/kubernetes-daemonset.yaml"

echo "container-check: image ${image_mb} MB ($mode); took $SECONDS s"
echo "container-check: $passed passed, 0 failed"

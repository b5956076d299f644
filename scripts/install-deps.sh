#!/usr/bin/env bash
# Installs everything batchd needs to build, test and run on Debian 12, from
# Debian's packages only. Idempotent; run as root (or through sudo).
#   --daemon  only what builds batchd and batchctl (the image's build stage)
set -euo pipefail
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO=sudo
PACKAGES=(
  build-essential cmake ninja-build pkg-config
  ccache  # every build's compiles, shared between build directories (scripts/ccache.sh)
  libboost-dev libabsl-dev
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libgtest-dev libgmock-dev
  libcivetweb-dev libsystemd-dev libtomlplusplus-dev
  libcli11-dev nlohmann-json3-dev  # batchctl: flags, JSON
  systemd python3-yaml openssl  # service tests: unit verify, pod, TLS
  libtorch-dev python3-torch libgloo-dev  # trainers: libtorch, c10d Gloo
  pybind11-dev libdlpack-dev python3-dev python3-pytest python3-numpy
  python3-venv  # scripts/test-pip.sh: pip install . into a venv
  libsentencepiece-dev python3-sentencepiece wngerman  # wmt: tokenizer, generator
  libjpeg62-turbo-dev libturbojpeg0-dev libpng-dev  # imagenet: decode, bench
  libfarmhash-dev  # criteo1tb: FarmHash Fingerprint64 (TF's to_hash_bucket_fast)
  libhdf5-dev libfftw3-dev python3-h5py  # fastmri: volumes, inverse FFT; generator
  libseccomp-dev  # fastmri: the HDF5 helper's system-call filter
  python3-torchvision python3-pil python3-skimage  # imagenet: tests, generator
  clang libclang-rt-dev  # fuzz/: libFuzzer and the sanitizer runtimes
  libfuse3-dev fuse3  # bench: latency_fs, the network-storage stand-in; tests: stall_fs
  podman runc mmdebstrap catatonit  # scripts/container-check.sh: image, base, pods
)
# The daemon and batchctl alone (docker/Dockerfile's build stage).
DAEMON_PACKAGES=(
  build-essential cmake ninja-build pkg-config
  libboost-dev libabsl-dev
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libcivetweb-dev libsystemd-dev libtomlplusplus-dev
  libcli11-dev nlohmann-json3-dev
  libsentencepiece-dev libjpeg62-turbo-dev libturbojpeg0-dev libpng-dev
  libfarmhash-dev libhdf5-dev libfftw3-dev libseccomp-dev
)
case "${1:-}" in
  --daemon) PACKAGES=("${DAEMON_PACKAGES[@]}") ;;
  "") ;;
  *) echo "usage: scripts/install-deps.sh [--daemon]" >&2; exit 2 ;;
esac
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "batchd: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

#!/usr/bin/env bash
# Prints the Debian packages that hold the shared libraries the given
# binaries load, one a line: what a slim image needs to run what was built
# in a full one. Run where the binaries were built (dpkg knows the files).
#
#   docker/runtime-packages.sh build/server/batchd build/server/batchctl
set -euo pipefail
[ $# -gt 0 ] || { echo "usage: $0 BINARY..." >&2; exit 2; }
deps=$(ldd "$@")
if grep -q "not found" <<< "$deps"; then
  echo "runtime-packages: a library is missing:" >&2
  grep "not found" <<< "$deps" >&2
  exit 1
fi
libs=$(awk '$2 == "=>" && $3 ~ /^\// {print $3}' <<< "$deps" | sort -u)
for lib in $libs; do
  # Debian 12 merges /lib into /usr/lib; dpkg knows each file by the path
  # its package ships, so try both spellings.
  owner=$({ dpkg -S "$lib" || dpkg -S "/usr$lib" || dpkg -S "${lib#/usr}"; } \
            2>/dev/null | head -n 1 | cut -d: -f1) || true
  if [ -z "$owner" ]; then
    echo "runtime-packages: no package holds $lib" >&2
    exit 1
  fi
  echo "$owner"
done | sort -u

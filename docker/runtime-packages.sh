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
# Debian 12 merges /lib into /usr/lib; dpkg knows each file by the path
# its package ships, so ask for every spelling, in one call (each call reads
# dpkg's whole file list).
query=()
for lib in $libs; do query+=("$lib" "/usr$lib" "${lib#/usr}"); done
known=$(dpkg -S "${query[@]}" 2>/dev/null | grep -v '^diversion by ') || true
for lib in $libs; do
  owner=$(awk -v a="$lib" -v b="/usr$lib" -v c="${lib#/usr}" '
    { path = $NF; pkg = $0; sub(/: [^:]*$/, "", pkg) }
    path == a || path == b || path == c { split(pkg, p, /[:,]/); print p[1]; exit }
  ' <<< "$known")
  if [ -z "$owner" ]; then
    echo "runtime-packages: no package holds $lib" >&2
    exit 1
  fi
  echo "$owner"
done | sort -u

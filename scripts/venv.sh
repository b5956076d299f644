# shellcheck shell=bash
# Sourced by scripts/reference-venv.sh and scripts/torch-venv.sh: a venv of
# PyPI packages for one Python, kept outside the clone under
# $BATCHD_CI_CACHE (default /var/cache/batchd-ci) as venv-<NAME>-<X.Y>, and
# reused by later runs. The caller sets `set -euo pipefail`; only the
# venv's path goes to stdout, what is done goes to stderr as "TOOL: ...".

# venv_open TOOL NAME [PYTHON]: sets PY (PYTHON; default pyenv's 3.12, else
# the first python3 on PATH) and VENV, and holds VENV's lock (fd 9) until
# the script exits: two runs at once (CI's early start and a test) wait for
# each other rather than build one venv twice.
venv_open() {
  local tool=$1 name=$2 cand
  PY=${3:-}
  if [ -z "$PY" ]; then
    for cand in /root/.pyenv/versions/3.12.*/bin/python3 "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.12.*/bin/python3; do
      [ -x "$cand" ] && { PY=$cand; break; }
    done
  fi
  PY=${PY:-$(command -v python3)}
  local version cache=${BATCHD_CI_CACHE:-/var/cache/batchd-ci}
  version=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
  VENV="$cache/venv-$name-$version"
  mkdir -p "$cache"
  exec 9>"$VENV.lock"
  flock 9
  VENV_TOOL=$tool
  VENV_PIP=(-q --disable-pip-version-check --no-cache-dir)
  VENV_START=$SECONDS
}

# venv_reuse PACKAGES: true when VENV is whole (made to the end before);
# then PACKAGES are added to it if it was made with another list (a failed
# install ends the script with pip's status: `set -e` does not reach into
# a function called as a condition).
venv_reuse() {
  [ -f "$VENV/.complete" ] || return 1
  if [ "$(cat "$VENV/.packages" 2>/dev/null)" != "$1" ]; then
    echo "$VENV_TOOL: adding to $VENV: $1" >&2
    # shellcheck disable=SC2086  # one word per package
    "$VENV/bin/pip" install "${VENV_PIP[@]}" $1 >&2 || exit $?
    echo "$1" > "$VENV/.packages" || exit 1
  fi
}

# venv_create PACKAGES: VENV made anew with PACKAGES (not yet marked whole).
venv_create() {
  rm -rf "$VENV"
  "$PY" -m venv "$VENV"
  # shellcheck disable=SC2086  # one word per package
  "$VENV/bin/pip" install "${VENV_PIP[@]}" $1 >&2
  echo "$1" > "$VENV/.packages"
}

# venv_done: marks VENV whole (one cut short by a kill is created anew next
# time), says how long it took and prints its path.
venv_done() {
  "$VENV/bin/pip" freeze --disable-pip-version-check > "$VENV/.complete"
  echo "$VENV_TOOL: created $VENV in $((SECONDS - VENV_START)) s" >&2
  echo "$VENV"
}

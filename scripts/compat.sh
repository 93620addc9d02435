#!/usr/bin/env bash
# Run dynscope's whole test suite against another torch release, in a side venv.
#
# Usage:
#   scripts/compat.sh VERSION [PYTEST_ARGS...]
#
#   VERSION      2.11, 2.14 or 2.15 (mapped to 2.11.0, 2.14.1 and 2.15.0), or a full version such as 2.12.0.
#   PYTEST_ARGS  passed on to pytest (for example `tests/torch/test_parsers.py -x`); default: the whole suite.
#
# Which venv it uses, first match wins:
#   1. $COMPAT_VENV, if set (an existing venv; torch==VERSION is installed into it if missing).
#   2. $COMPAT_VENV_ROOT/venv-VERSION (or venv-X.Y.Z, venv-X.Y), if it exists and already has that torch.
#   3. $COMPAT_VENV_ROOT/venv-VERSION-compat, created with $PYTHON (default python3) if missing.
#   COMPAT_VENV_ROOT defaults to /work.
#
# What it does: installs torch==FULLVERSION if the venv lacks it (PyPI's builds are CUDA builds of
# several GB; they run on CPU), then dynscope with its test and dev extras (`pip install -e ".[test,dev]"`)
# under a constraints file that pins torch to the version already installed, so pip never swaps
# torch. It checks that Graphviz `dot` and Chromium exist (installing them with apt-get as
# scripts/setup.sh does; DYNSCOPE_SKIP_BROWSER=1 skips Chromium), then runs
# `python -m pytest -q -p no:cacheprovider` from the repo root with the venv's python, tees the
# output to compat-VERSION.log in the repo root (override with COMPAT_LOG), prints a one-line
# summary and exits with pytest's status.
#
# The short-name -> full-version map below is the only place a compat version is pinned.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$(pwd)"

if [ $# -lt 1 ] || [ "$1" = "-h" ] || [ "$1" = "--help" ]; then
  sed -n '2,25p' "$0" | sed 's/^# \{0,1\}//'
  [ $# -lt 1 ] && exit 2 || exit 0
fi
VERSION="$1"
shift

# Short names for the releases we check against; anything else must be a full X.Y.Z version.
case "$VERSION" in
  2.11) FULL=2.11.0 ;;
  2.14) FULL=2.14.1 ;;
  2.15) FULL=2.15.0 ;;
  *)
    if [[ "$VERSION" =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]]; then
      FULL="$VERSION"
    else
      echo "compat: unknown torch version '$VERSION': give 2.11, 2.14, 2.15 or a full version like 2.12.0" >&2
      exit 2
    fi
    ;;
esac

VENV_ROOT="${COMPAT_VENV_ROOT:-/work}"
PYTHON="${PYTHON:-python3}"

# True when the venv's python imports torch at exactly $FULL (ignoring a local tag like +cu130).
has_torch() {
  [ -x "$1/bin/python" ] && "$1/bin/python" -c \
    "import sys, torch; sys.exit(torch.__version__.split('+')[0] != sys.argv[1])" "$FULL" 2>/dev/null
}

VENV=""
if [ -n "${COMPAT_VENV:-}" ]; then
  VENV="$COMPAT_VENV"
  if [ ! -x "$VENV/bin/python" ]; then
    echo "compat: COMPAT_VENV=$VENV is not a venv (no bin/python); create it or unset COMPAT_VENV" >&2
    exit 2
  fi
else
  for candidate in "$VENV_ROOT/venv-$VERSION" "$VENV_ROOT/venv-$FULL" "$VENV_ROOT/venv-${FULL%.*}"; do
    if has_torch "$candidate"; then
      VENV="$candidate"
      break
    fi
  done
  if [ -z "$VENV" ]; then
    VENV="$VENV_ROOT/venv-$VERSION-compat"
    if [ ! -x "$VENV/bin/python" ]; then
      echo "compat: creating $VENV"
      "$PYTHON" -m venv "$VENV"
    fi
  fi
fi
PY="$VENV/bin/python"

# pip, without the warnings some machines' pip.conf adds for every package.
pip_install() {
  "$PY" -m pip install -q "$@" 2>&1 | { grep -v "is ignored: it is neither a file nor a directory" || true; }
  return "${PIPESTATUS[0]}"
}

if ! has_torch "$VENV"; then
  echo "compat: installing torch==$FULL into $VENV (a multi-GB download)"
  pip_install "torch==$FULL"
fi
TORCH_INSTALLED="$("$PY" -c 'import torch; print(torch.__version__)')"

# Pin torch to what is installed (without the local tag, which == then ignores) so that
# resolving dynscope's `torch>=...` dependency can never replace it.
constraints="$(mktemp)"
trap 'rm -f "$constraints"' EXIT
echo "torch==${TORCH_INSTALLED%%+*}" >"$constraints"
echo "compat: installing dynscope with test and dev extras into $VENV (torch $TORCH_INSTALLED)"
pip_install -c "$constraints" -e ".[test,dev]"
if ! has_torch "$VENV"; then
  echo "compat: torch in $VENV changed during install; expected $FULL" >&2
  exit 1
fi

# System tools the suite needs (Graphviz, Chromium), as scripts/setup.sh installs them.
"$ROOT/scripts/system_packages.sh"

LOG="${COMPAT_LOG:-$ROOT/compat-$VERSION.log}"
echo "compat: running the suite with $PY (torch $TORCH_INSTALLED); log: $LOG"
set +e
"$PY" -m pytest -q -p no:cacheprovider "$@" 2>&1 | tee "$LOG"
status=${PIPESTATUS[0]}
set -e

# pytest's last line is its count summary, e.g. "== 3 failed, 200 passed in 310.2s ==".
summary="$(grep -E '[0-9]+ (passed|failed|error|errors|skipped)|no tests ran' "$LOG" | tail -n 1 | sed 's/^=* *//; s/ *=*$//')"
echo "compat: torch $TORCH_INSTALLED: ${summary:-no pytest summary line} (exit $status)"
exit "$status"

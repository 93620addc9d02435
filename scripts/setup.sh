#!/usr/bin/env bash
# Set up a fresh machine for dynscope: system packages (Graphviz for SVG pictures,
# Chromium for the HTML report tests), a virtual environment with the CPU build of
# torch 2.13.0 (pinned: an unpinned torch pulls a multi-GB CUDA build), and dynscope
# itself with its test and dev extras (dev: ruff and mypy, which tests/house/test_lint.py runs).
# Safe to run again: it only installs what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON="${PYTHON:-python3}"
extra=()
"$PYTHON" -c "import ensurepip, venv" >/dev/null 2>&1 || extra+=(python3-venv)
scripts/system_packages.sh "${extra[@]}"

# pip, without the warnings some machines' pip.conf adds for every package.
pip_install() {
  .venv/bin/pip install -q "$@" 2>&1 | { grep -v "is ignored: it is neither a file nor a directory" || true; }
  return "${PIPESTATUS[0]}"
}

if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv"
  "$PYTHON" -m venv .venv
fi
if ! .venv/bin/python -c "import torch, sys; sys.exit(torch.__version__.split('+')[0] != '2.13.0')" 2>/dev/null; then
  echo "setup: installing torch 2.13.0 (CPU build)"
  pip_install torch==2.13.0
fi
stamp=.venv/.dynscope-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  echo "setup: installing dynscope with test and dev extras"
  pip_install -e ".[test,dev]"
  touch "$stamp"
fi

#!/usr/bin/env bash
# System packages the suite needs, installed with apt-get only when missing: Graphviz's
# `dot` for SVG pictures and Chromium for the HTML report tests (DYNSCOPE_SKIP_BROWSER=1
# skips it). Extra package names given as arguments are installed with them.
# Used by scripts/setup.sh and scripts/compat.sh.
set -euo pipefail

need_apt=("$@")
command -v dot >/dev/null 2>&1 || need_apt+=(graphviz)
if [ "${DYNSCOPE_SKIP_BROWSER:-0}" != "1" ]; then
  command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 \
    || command -v google-chrome >/dev/null 2>&1 || need_apt+=(chromium)
fi
if [ ${#need_apt[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  echo "setup: installing ${need_apt[*]} with apt-get"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

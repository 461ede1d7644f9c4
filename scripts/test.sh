#!/usr/bin/env bash
# Sets up everything the tests need on a fresh Debian machine, then runs them.
# Usage: bash scripts/test.sh [pytest args...]
set -euo pipefail
cd "$(dirname "$0")/.."

# Chromium for the real-browser UI tests (Debian's package; never `playwright install`).
if ! command -v chromium >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  else
    sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  fi
fi

PY=${PYTHON:-python3}

# A C compiler and Python's headers, so the install builds the collectors' C step context (collectors/_fast_step.c)
# and the tests run both step contexts. Optional: without them the install goes on and only the Python one is tested.
if ! command -v cc >/dev/null 2>&1 || ! "$PY" -c 'import os, sysconfig; raise SystemExit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))'; then
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
  { $SUDO apt-get update -qq && $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq gcc python3-dev; } >/dev/null 2>&1 \
    || echo "no C compiler or Python headers: the collectors' step context is tested in Python only" >&2
fi
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
# Pinned torch first (on the project's machines this is the local CPU build; a plain `torch`
# would pull a multi-GB CUDA build), then the package with its extras.
.venv/bin/python -m pip install -q "torch==2.13.0"
.venv/bin/python -m pip install -q -e ".[collectors,app,test]"
# The fault zoo, a distribution of its own beside the core (zoo/): tests/faults, tests/hangs and the CLI loop use it.
.venv/bin/python -m pip install -q -e ./zoo

.venv/bin/python -c 'from workbench.collectors.collector import STEP_IMPLS; print("step contexts built:", ", ".join(STEP_IMPLS))'

set +e
.venv/bin/python -m pytest "$@"
rc=$?
set -e
if [ "$rc" = 5 ]; then echo "no tests collected" >&2; exit 1; fi
exit "$rc"

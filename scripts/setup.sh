#!/usr/bin/env bash
# Create .venv (if missing) and install autopar with its test extras. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip >/dev/null 2>&1 || true
.venv/bin/python -m pip install -q -e ".[test]"
# Byte-compile autopar now: with PYTHONDONTWRITEBYTECODE set (containers often set it) every process would
# otherwise recompile each module it imports (~0.1 s of every command's start-up).
.venv/bin/python -m compileall -q autopar >/dev/null

#!/usr/bin/env bash
# Create .venv (if missing) and install autopar. Idempotent.
#   bash scripts/setup.sh          runtime dependencies only (what `autopar` needs; the quick start)
#   bash scripts/setup.sh extras   plus every optional extra a README command may need, torch aside (calibrate, tune,
#                                  parquet, postgres, serve: `calibrate fit`, `tune`, Parquet records, PostgreSQL
#                                  studies, `autopar serve`)
#   bash scripts/setup.sh test     plus the test extras (pytest, hypothesis, playwright, ruff, psycopg, ...) and
#                                  the frameworks that check the launch files (launch-check: torchtitan, DeepSpeed)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
case "${1:-runtime}" in
  runtime) TARGET="." ;;
  extras) TARGET=".[calibrate,tune,parquet,postgres,serve]" ;;
  test) TARGET=".[test,launch-check]" ;;
  *) echo "error: scripts/setup.sh takes 'runtime', 'extras' or 'test', not '$1'" >&2; exit 2 ;;
esac
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
# -qq: pip prints errors only (a failed install still prints why and stops the script), not its notices
# (setuptools' editable-install banner, a newer pip, index locations it skips).
PIP_DISABLE_PIP_VERSION_CHECK=1 .venv/bin/python -m pip install -qq -e "$TARGET"
# Byte-compile autopar now: with PYTHONDONTWRITEBYTECODE set (containers often set it) every process would
# otherwise recompile each module it imports (~0.1 s of every command's start-up).
.venv/bin/python -m compileall -q autopar >/dev/null

#!/usr/bin/env bash
# Create .venv-megatron/ (Python 3.12) holding Megatron-LM's own argument parser, which
# tests/launch/test_megatron_parser.py runs on the arguments autopar generates (tests/megatron_check.py). Idempotent:
# with the pins below already installed it returns at once.
#
# Pins:
#   megatron-core==0.19.0  autopar's default Megatron-LM target (autopar/launch/schema.py VERSIONS["megatron"][0],
#                          core_v0.19.0). The PyPI wheel ships megatron/training/arguments.py (parse_args,
#                          validate_args) beside megatron/core; there is no megatron-lm package. It needs
#                          Python >= 3.12, hence this venv beside the project's 3.11 .venv.
#   torch==2.14.1          PyPI has no CPU-only Linux build (the CPU wheel in /opt/wheels is for Python 3.11), so
#                          this is the CUDA build, which imports on a machine without a GPU; 2.14.1 because its CUDA
#                          libraries lie on this machine's local wheel index (elsewhere pip downloads them, ~2 GB).
#                          parse_args/validate_args need nothing else beyond megatron-core's own numpy + packaging.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=.venv-megatron
PINS="megatron-core==0.19.0 torch==2.14.1"

# A Python 3.12: MEGATRON_PYTHON, python3.12 on PATH (a pyenv shim only runs where 3.12 is selected), the newest
# pyenv 3.12.x (pyenv need not be on PATH).
is312() { [ -n "$1" ] && "$1" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 12))' 2>/dev/null; }
find_python() {
  local c root
  for c in "${MEGATRON_PYTHON:-}" "$(command -v python3.12 || true)"; do
    if is312 "$c"; then echo "$c"; return; fi
  done
  root=$(pyenv root 2>/dev/null || echo "${PYENV_ROOT:-$HOME/.pyenv}")
  c=$(ls -d "$root"/versions/3.12.*/bin/python3.12 2>/dev/null | sort -V | tail -n 1 || true)
  if is312 "$c"; then echo "$c"; fi
}

STAMP="$VENV/autopar-pins.txt"
if is312 "$VENV/bin/python" && [ "$(cat "$STAMP" 2>/dev/null)" = "$PINS" ]; then
  exit 0  # already installed at the pinned versions
fi
PY=$(find_python)
if [ -z "$PY" ]; then
  echo "error: scripts/megatron_venv.sh needs Python 3.12 (Debian 12 ships none): set MEGATRON_PYTHON=/path/to/python3.12, or put python3.12 on PATH (e.g. pyenv install 3.12)" >&2
  exit 1
fi
if ! is312 "$VENV/bin/python"; then
  rm -rf "$VENV"
  "$PY" -m venv "$VENV"
fi
rm -f "$STAMP"
echo "scripts/megatron_venv.sh: installing $PINS into $VENV (first time: about 1.5 min, 5.5 GB)" >&2
# -qq: errors only (a failed install still says why and stops the script)
# shellcheck disable=SC2086  # PINS is a list of requirements
PIP_DISABLE_PIP_VERSION_CHECK=1 "$VENV/bin/python" -m pip install -qq $PINS
echo "$PINS" >"$STAMP"

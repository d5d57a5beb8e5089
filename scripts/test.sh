#!/usr/bin/env bash
# Set up and run the test suite (unit, property, CLI and, when Debian's chromium is present, browser tests).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh test
.venv/bin/ruff check autopar tests bench
.venv/bin/ruff format --check autopar tests bench
# Type check (settings: [tool.mypy] in pyproject.toml): the package at baseline, strict on perf/, layouts, specs.
.venv/bin/mypy autopar
.venv/bin/python -m pytest "$@"

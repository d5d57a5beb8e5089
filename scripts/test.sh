#!/usr/bin/env bash
# Set up and run the checks and the whole test suite (unit, property, CLI, docs build and, when Debian's chromium is
# present, browser tests).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh test
# Python 3.12 venv with Megatron-LM's own argument parser (tests/launch/test_megatron_parser.py); ~1.5 min the first time.
bash scripts/megatron_venv.sh
.venv/bin/ruff check autopar tests bench
.venv/bin/ruff format --check autopar tests bench
# Type check (settings: [tool.mypy] in pyproject.toml): the package at baseline, strict on perf/, layouts, specs.
.venv/bin/mypy autopar
# The documentation site (mkdocs.yml): --strict fails on a broken link, an unlisted page or a bad anchor.
NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict --quiet --site-dir "$(mktemp -d)"
.venv/bin/python -m pytest "$@"

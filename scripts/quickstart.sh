#!/usr/bin/env bash
# Set up and run the main job on the embedded default problem; writes reports/quickstart.html.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/autopar optimize --budget 300 --out reports/quickstart.html "$@"

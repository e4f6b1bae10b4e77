#!/usr/bin/env bash
# The main job: set up, then run notebooks/demo.ipynb headless and print where the result is.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$ROOT/scripts/bootstrap.sh"
cd "$ROOT"
.venv/bin/python scripts/run_notebooks.py notebooks/demo.ipynb

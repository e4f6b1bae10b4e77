#!/usr/bin/env bash
# The main job: set up (and install the "Python 3 (sandbox)" kernel), then run
# notebooks/demo.ipynb headless and print where the result is.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$ROOT/scripts/bootstrap.sh"
cd "$ROOT"
# The kernel that loads the extension at start, in .venv: `.venv/bin/jupyter lab` offers it in
# the Launcher.
.venv/bin/python -m jupyter_sandbox install-kernel
.venv/bin/python scripts/run_notebooks.py notebooks/demo.ipynb

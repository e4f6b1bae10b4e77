#!/usr/bin/env bash
# The whole test suite: set up (engine, venv, base image, browser), lint, type-check, test.
# Extra arguments go to pytest, e.g. `bash scripts/test.sh -k orchestrate`.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$ROOT/scripts/bootstrap.sh" --browser
cd "$ROOT"
.venv/bin/ruff check jupyter_sandbox tests benchmarks scripts
.venv/bin/ruff format --check jupyter_sandbox tests benchmarks scripts
.venv/bin/mypy
.venv/bin/python -m pytest -ra --durations=20 "$@"  # the slowest tests, to keep CI under 30 min

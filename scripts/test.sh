#!/usr/bin/env bash
# The whole test suite: set up (engine, venv, base image, browser), lint, type-check, build the
# docs, test.
# Extra arguments go to pytest, e.g. `bash scripts/test.sh -k orchestrate`.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$ROOT/scripts/bootstrap.sh" --browser
cd "$ROOT"
bash scripts/lock.sh --check  # the lock still matches pyproject.toml
# npm installs from the committed lock; a changed lock means package.json moved without it.
if git rev-parse --git-dir >/dev/null 2>&1 && ! git diff --quiet -- labextension/package-lock.json; then
  git diff --stat -- labextension/package-lock.json >&2
  echo "labextension/package-lock.json changed during the build: run npm install there and commit it" >&2
  exit 1
fi
# The sdist and wheel people install, built in clean environments; tests/e2e/test_install.py installs them.
bash scripts/package.sh
export JUPYTER_SANDBOX_DIST="$ROOT/dist"
.venv/bin/ruff check jupyter_sandbox tests benchmarks scripts docs/conf.py
.venv/bin/ruff format --check jupyter_sandbox tests benchmarks scripts docs/conf.py
.venv/bin/mypy
# The layers and front doors of ARCHITECTURE.md ([tool.importlinter]; a contract type of ours).
PYTHONPATH=scripts .venv/bin/lint-imports
bash scripts/docs.sh  # the docs site, warnings as errors (the reference is generated from the code)
.venv/bin/python -m pytest -ra --durations=20 "$@"  # the slowest tests, to keep CI under 30 min

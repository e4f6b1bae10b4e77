#!/usr/bin/env bash
# The release artifacts: dist/jupyter_sandbox-VERSION.tar.gz (sdist, carrying the built JupyterLab
# extension, so installing it needs no Node) and the wheel built from that sdist, each in a clean
# isolated environment whose build backend is pinned by requirements/constraints.txt; then
# `twine check --strict` on both. Needs .venv (scripts/bootstrap.sh), which also builds the extension.
#   bash scripts/package.sh [OUTDIR]     (default: dist)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
OUT="${1:-dist}"
rm -rf "$OUT"
log=$(mktemp)
PIP_CONSTRAINT="$ROOT/requirements/constraints.txt" .venv/bin/python -m build --outdir "$OUT" . \
  >"$log" 2>&1 || { cat "$log" >&2; rm -f "$log"; echo "package.sh: python -m build failed" >&2; exit 1; }
rm -f "$log"
.venv/bin/twine check --strict "$OUT"/*

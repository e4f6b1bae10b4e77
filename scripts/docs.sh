#!/usr/bin/env bash
# The documentation site: Sphinx (PyData theme, MyST Markdown, the notebooks rendered without
# running them, the reference from docstrings). Warnings are errors. Needs the `docs` extra,
# which the locked .venv has (scripts/bootstrap.sh).
#   bash scripts/docs.sh            -> docs/_build/html/index.html
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
start=$(date +%s)
.venv/bin/sphinx-build -W --keep-going -q -b html docs docs/_build/html "$@"
echo "docs.sh: built in $(( $(date +%s) - start )) s: $ROOT/docs/_build/html/index.html"

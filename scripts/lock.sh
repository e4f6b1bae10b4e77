#!/usr/bin/env bash
# The development environment's lock: requirements/dev.txt (exact versions with hashes, what
# scripts/bootstrap.sh installs) and requirements/constraints.txt (the same versions without
# hashes, given to pip as PIP_CONSTRAINT so isolated builds use the tested build backend).
#
#   bash scripts/lock.sh            refresh after editing pyproject.toml (keeps every pin that
#                                   still fits; add --upgrade to move everything to the newest)
#   bash scripts/lock.sh --check    fail if the lock no longer matches pyproject.toml (CI runs it)
#
# What is locked: the project's dependencies with the `test`, `cluster` and `docs` extras, the build
# backend of [build-system] (bootstrap builds the editable install without isolation, from the
# lock), and the release tools (build, twine, uv itself). For CPython 3.11 on Linux x86_64,
# the platform the project supports and CI runs on.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
UV=.venv/bin/uv
[ -x "$UV" ] || { echo "lock.sh: no $UV; run scripts/bootstrap.sh first" >&2; exit 1; }
mode=write
extra=()
for arg in "$@"; do
  case "$arg" in
    --check) mode=check ;;
    --upgrade) extra+=(--upgrade) ;;
    *) echo "lock.sh: unknown argument $arg (use --check or --upgrade)" >&2; exit 2 ;;
  esac
done

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# The build backend's requirements, read from pyproject.toml so they are written down once.
.venv/bin/python - "$work/build.in" <<'PY'
import sys, tomllib
with open("pyproject.toml", "rb") as f:
    requires = tomllib.load(f)["build-system"]["requires"]
open(sys.argv[1], "w").write("\n".join(requires) + "\n")
PY
# editables: hatchling asks for it to build the editable install (get_requires_for_build_editable).
printf "%s\n" build twine uv pip editables > "$work/tools.in"

out=requirements/dev.txt
target="$work/dev.txt"
# uv keeps the versions already in the output file where they still fit: start from the lock.
cp "$out" "$target" 2>/dev/null || true
# Only the public index: a machine's own mirrors or find-links must not leak into the lock.
UV_INDEX_URL= UV_EXTRA_INDEX_URL= UV_FIND_LINKS= \
"$UV" pip compile --quiet --generate-hashes --python-version 3.11 \
  --python-platform x86_64-manylinux_2_28 --no-config --index-url https://pypi.org/simple \
  --custom-compile-command "bash scripts/lock.sh" \
  --extra test --extra cluster --extra docs "${extra[@]}" \
  pyproject.toml "$work/build.in" "$work/tools.in" -o "$target"
pins() { grep -E '^[A-Za-z0-9._-]+==' "$1" | sed 's/ .*//' | sort; }

if [ "$mode" = check ]; then
  if ! diff <(pins "$out") <(pins "$target") >"$work/diff"; then
    echo "lock.sh: requirements/dev.txt is stale against pyproject.toml:" >&2
    cat "$work/diff" >&2
    echo "run: bash scripts/lock.sh   (and commit requirements/)" >&2
    exit 1
  fi
  if ! diff <(pins "$out") <(sort requirements/constraints.txt | grep -v '^#') >/dev/null; then
    echo "lock.sh: requirements/constraints.txt differs from dev.txt; run: bash scripts/lock.sh" >&2
    exit 1
  fi
  echo "lock.sh: requirements/ matches pyproject.toml ($(pins "$out" | wc -l) pins)"
  exit 0
fi
cp "$target" "$out"
{ echo "# The versions of requirements/dev.txt without hashes, for PIP_CONSTRAINT. Made by scripts/lock.sh."
  pins "$out"; } > requirements/constraints.txt
echo "lock.sh: wrote $out and requirements/constraints.txt ($(pins "$out" | wc -l) pins)"

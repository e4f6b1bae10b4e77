"""Execute notebooks headless, keep widget state, and print where each executed copy is.

Used by `scripts/demo.sh` (the README's main job) and by the notebook tests.
Usage: python scripts/run_notebooks.py NOTEBOOK [NOTEBOOK ...] [--out DIR]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parent.parent


def run_notebook(path: Path, out_dir: Path, timeout: int = 600) -> Path:
    """Run ``path`` top to bottom in its own folder; write the executed copy to ``out_dir``."""
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(
        nb,
        timeout=timeout,
        kernel_name="python3",
        store_widget_state=True,
        resources={"metadata": {"path": str(path.parent)}},
    )
    out_dir.mkdir(parents=True, exist_ok=True)
    out = out_dir / path.name
    try:
        client.execute()
    finally:  # a failed run is kept too: it is what you need to see
        nbformat.write(nb, out)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="+", type=Path)
    parser.add_argument("--out", type=Path, default=ROOT / "artifacts" / "notebooks")
    args = parser.parse_args()
    for path in args.notebooks:
        started = time.perf_counter()
        out = run_notebook(path.resolve(), args.out)
        print(f"{path}: executed in {time.perf_counter() - started:.1f} s -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

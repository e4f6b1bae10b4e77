"""Benchmark of what showing a cell's displays costs a run that displays nothing: a warm
``create().run()`` of ``print(42)`` by this checkout, against the same run by the commit before
displays (the baseline), and a run that displays a small HTML table.

    git archive 0cd0e39 jupyter_sandbox | tar -x -C /tmp/before    # the baseline's package
    .venv/bin/python benchmarks/bench_displays.py --before /tmp/before [--rounds N]

Since displays, an auto-IO run always goes through the outputs' script (the program ran as the
exec itself when no output was declared; tar still runs only when a display exists) and the
runner imports ``jsbx_display``. Each side runs in a process of its own (one package per
process), taking turns each round; within a process the first run starts the spare and is not
timed, the next runs are (warm, spaced so the next spare is up). Medians.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

from _timing import print_table

ROOT = Path(__file__).resolve().parent.parent
WORKER = """
import json, sys, time
from jupyter_sandbox import create
from jupyter_sandbox.sandbox._pool import quiesce
code, runs = sys.argv[1], int(sys.argv[2])
sandbox = create("bench", code=code)
sandbox.run()
times = []
for _ in range(runs):
    quiesce()  # the next spare is up, as between cells
    start = time.perf_counter()
    sandbox.run()
    times.append(time.perf_counter() - start)
print(json.dumps(times))
"""
PLAIN = "print(42)"
TABLE = (
    "class T:\n    def _repr_html_(self):\n        return '<table><tr><td>1</td></tr></table>'\nT()"
)


def timed(package_root: Path, code: str, runs: int) -> list[float]:
    done = subprocess.run(
        [sys.executable, "-c", WORKER, code, str(runs)],
        cwd=package_root,
        env={"PYTHONPATH": str(package_root), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout.splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--before", type=Path, required=True, help="folder holding the baseline")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--runs", type=int, default=5, help="timed runs per process")
    args = parser.parse_args()
    rows = [
        ("print(42), before displays", args.before, PLAIN),
        ("print(42), with displays", ROOT, PLAIN),
        ("an HTML table displayed", ROOT, TABLE),
    ]
    samples: list[list[float]] = [[] for _ in rows]
    for _ in range(args.rounds):
        for (_, root, code), times in zip(rows, samples, strict=True):
            times.extend(timed(root, code, args.runs))
    print_table(
        "warm create().run(), medians",
        [(label, statistics.median(t)) for (label, _, _), t in zip(rows, samples, strict=True)],
        unit="ms",
    )


if __name__ == "__main__":
    main()

"""What bounding the kept values costs a tool call, and what it saves.

Each call's arguments are counted (``--max-transfer``) and kept whole or as a summary
(`_keep`): this is on the hot path of a loop of plain calls. Rows, per call, interleaved:
small arguments (the hot path), a 2 KB text (kept whole, counted), a 5 MB text (kept as a
summary: one sha256 a call). Then the process's RSS after runs of the 5 MB loop with a
journal (before the bounds it grew ~950 MB a run of 200 calls).

    .venv/bin/python benchmarks/bench_keep.py [--calls 2000] [--rounds 15]

To compare with a checkout without the bounds, run the same script with ``PYTHONPATH``
pointing at that checkout's package (the 2 KB and 5 MB rows measure it too).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from _timing import measure, print_table

from jupyter_sandbox.orchestration import Journal, orchestrate


def add(x: int, y: int) -> int:
    return x + y


def size(s: str) -> int:
    return len(s)


def rss_mb() -> float:
    for line in Path(f"/proc/{os.getpid()}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=15)
    options = parser.parse_args()
    n = options.calls
    small = f"acc = 0\nfor i in range({n}):\n    acc = add(acc, i)\nacc"
    text = f"s = 'x' * 2_000\nfor i in range({n}):\n    size(s)"
    big = "s = 'x' * 5_000_000\nfor i in range(200):\n    size(s)"
    rows = measure(
        [
            ("small arguments (hot path)", lambda: orchestrate(small, tools=[add])),
            ("a 2 KB text, kept whole", lambda: orchestrate(text, tools=[size])),
        ],
        options.rounds,
    )
    print_table(f"per call, {n} calls a run", rows, per=n)
    (row,) = measure(
        [("a 5 MB text, kept as a summary", lambda: orchestrate(big, tools=[size]))], 3
    )
    print_table("per call, 200 calls a run", [row], per=200)
    journal = Journal()
    start = rss_mb()
    grown = []
    for _ in range(5):
        orchestrate(big, tools=[size], journal=journal)
        grown.append(round(rss_mb() - start))
    print(f"RSS after five runs of 200 calls with a 5 MB argument: +{grown} MB")


if __name__ == "__main__":
    main()

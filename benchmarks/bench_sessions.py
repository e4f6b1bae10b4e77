"""What a session costs a cell: loading the session's dump into the cell's worker (with the
cell's own limits and type-check declarations put into it), dumping it when the cell ends, and
reading its variables' types. Medians over interleaved rounds; no type check, so the
checker's own time (tens of ms) does not hide the difference.

    .venv/bin/python benchmarks/bench_sessions.py [--rounds 50]

Baseline: the same cell without a session (a fresh worker, as every cell has always run).
"""

from __future__ import annotations

import argparse

from _timing import measure, print_table

from jupyter_sandbox.orchestration import orchestrate
from jupyter_sandbox.orchestration.durable._sessions import sessions

CELL = "x = add(1, 2)\ny = [x] * 10"


def add(x: int, y: int) -> int:
    return x + y


def cell(code: str, session: str | None = None) -> None:
    orchestrate(code, tools=[add], session=session, scope="bench", type_check=False)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=50)
    rounds = parser.parse_args().rounds
    cell("small = 1", "small")
    cell("big = list(range(100_000))", "big")
    sizes = {name: state.size for name, state in sessions.listed("bench").items()}
    rows = measure(
        [
            ("no session", lambda: cell(CELL)),
            (f"session of 2 variables ({sizes['small']:,} B)", lambda: cell(CELL, "small")),
            (f"session holding 100k ints ({sizes['big']:,} B)", lambda: cell(CELL, "big")),
        ],
        rounds,
    )
    print_table("one cell, one tool call", rows, unit="ms")


if __name__ == "__main__":
    main()

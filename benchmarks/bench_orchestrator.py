"""Calls per second of a reusable orchestrator (issue 25) against a plain `orchestrate` of the
same body, for a body that calls no tool (the fast path) and for one that calls one tool.
Prints tables; medians over interleaved rounds, with the machine's load.

    .venv/bin/python benchmarks/bench_orchestrator.py [--calls 200] [--rounds 9]

Baseline rows run ``orchestrate(code, tools=..., inputs=...)`` with the code an orchestrator
runs for each call (its ``def`` and the line calling it): what a notebook paid per call before
orchestrators existed. The orchestrator's own call adds binding and checking its arguments
and value on the host; its fast path (no tools) runs on a kept thread instead of starting one,
and neither row type-checks per call (the orchestrator checked its body when it was defined;
``orchestrate`` skips the check for code that names no tool, and its checks of a body that
does are cached after the first).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from _timing import measure, print_table

from jupyter_sandbox import Orchestrator, orchestrate, orchestrator, tool


@tool
def add(x: int, y: int) -> int:
    return x + y


@orchestrator
def pure(n: int) -> int:
    total = 0
    for i in range(n):
        total = total + i
    return total


@orchestrator
def one_call(n: int) -> int:
    return add(n, 1)


def calling(function: Callable[[int], object], calls: int) -> Callable[[], None]:
    def run() -> None:
        for i in range(calls):
            function(i % 10)

    return run


def plain(o: Orchestrator) -> Callable[[int], object]:
    """``orchestrate`` of the code the orchestrator runs, with the same tools and inputs."""

    def run(n: int) -> object:
        return orchestrate(o.code, tools=o.tools, inputs={"n": n}).value

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200, help="calls per timed sample")
    parser.add_argument("--rounds", type=int, default=9, help="interleaved timed samples")
    args = parser.parse_args()
    for title, o in (
        ("a body that calls no tool (the fast path)", pure),
        ("a body that calls one tool", one_call),
    ):
        rows = measure(
            [
                ("orchestrate(code) of the same body", calling(plain(o), args.calls)),
                (f"{o.name}(n), the orchestrator", calling(o, args.calls)),
            ],
            args.rounds,
        )
        print_table(f"{title}: {args.calls} calls per sample", rows, per=args.calls)
        for label, seconds in rows:
            print(f"{label:44} {args.calls / seconds:12,.0f} calls/s")


if __name__ == "__main__":
    main()

"""A reusable orchestrator's call against Monty's own floor and against a plain `orchestrate` of
the same body, and the sync tool-call row against the bare loop, idle and beside a CPU hog.
Prints tables; medians over interleaved rounds, with the machine's load.

    .venv/bin/python benchmarks/bench_orchestrator.py [--calls 200] [--rounds 15]

Tables, each row against the first (its baseline) in the same rounds:

1. A body that calls no tool: the baseline is Monty by hand, a checkout of the same pool
   with the same limits and one ``feed_run`` of the same code per call (each call in a
   session of its own, as each orchestrator call is: nothing carried over). Goal <= 1.5x.
2. A body that calls one tool: the baseline is ``orchestrate(code, tools=..., inputs=...)``
   with the code an orchestrator runs for each call (its ``def`` and the line calling it):
   what a notebook paid per call before orchestrators existed. Goal <= 1.3x.
3. The sync tool-call row (``--tool-calls`` calls of one tool in one run): the bare
   ``feed_start``/``resume`` loop against ``orchestrate()``; goal <= 1.10x. Then the same
   again with one CPU hog beside it (a ``python -c 'while 1: pass'`` process this script
   starts and stops), the load a shared 2-core machine sees.

"paired" is the median of each round's ratio (the load moves less within a round than
between rounds); "x" is the ratio of the medians, as every table of `_timing` prints.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator

from _timing import print_table
from bench_orchestrate import bare_monty, loop_code

from jupyter_sandbox import Orchestrator, orchestrate, orchestrator, tool
from jupyter_sandbox.orchestration._workers import pool


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


def by_hand(o: Orchestrator) -> Callable[[int], object]:
    """Monty's floor for one call of ``o``: a session of the runs' pool checked out with the
    same limits, the same code fed once with the same input, the session handed back."""
    limits = o.limits
    monty_limits = {
        "max_feed_duration_secs": limits.timeout,
        "max_memory": limits.max_memory * 2**20,
        "max_suspensions": 2 * limits.max_calls + 1000,
        "max_recursion_depth": limits.max_stack_depth,
    }
    workers = pool()

    def run(n: int) -> object:
        with workers.checkout(script_name="cell.py", limits=monty_limits) as session:
            return session.feed_run(o.code, inputs={"n": n})

    return run


def paired(
    rows: list[tuple[str, Callable[[], object]]], rounds: int
) -> tuple[list[tuple[str, float]], list[float]]:
    """Median seconds per row (rows taken in turn each round, the order turned each round)
    and the median of each row's per-round ratio to the first row."""
    for _, fn in rows:
        fn()  # warm-up: workers, stubs, the kept threads
    samples: list[list[float]] = [[] for _ in rows]
    for round_ in range(rounds):
        order = list(range(len(rows)))
        if round_ % 2:
            order.reverse()
        for index in order:
            start = time.perf_counter()
            rows[index][1]()
            samples[index].append(time.perf_counter() - start)
    medians = [(label, statistics.median(t)) for (label, _), t in zip(rows, samples, strict=True)]
    base = samples[0]
    ratios = [statistics.median(a / b for a, b in zip(t, base, strict=True)) for t in samples]
    return medians, ratios


def table(title: str, rows: list[tuple[str, Callable[[], object]]], rounds: int, per: int) -> None:
    load = os.getloadavg()[0]
    medians, ratios = paired(rows, rounds)
    print_table(
        f"{title}: {per} per sample, {rounds} rounds (load {load:.2f} -> {os.getloadavg()[0]:.2f})",
        medians,
        per=per,
    )
    for (label, _), ratio in zip(medians, ratios, strict=True):
        print(f"{label:44} {'paired':>12} {ratio:11.2f}x")


@contextlib.contextmanager
def cpu_hog() -> Iterator[None]:
    """One process spinning on a core while the block runs, stopped after it."""
    hog = subprocess.Popen([sys.executable, "-c", "while 1: pass"])
    try:
        time.sleep(0.5)  # let it take its core
        yield
    finally:
        hog.kill()
        hog.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200, help="orchestrator calls per sample")
    parser.add_argument("--tool-calls", type=int, default=1000, help="tool calls per run")
    parser.add_argument("--rounds", type=int, default=15, help="interleaved timed samples")
    args = parser.parse_args()
    calls = args.calls
    table(
        "a body that calls no tool",
        [
            ("Monty checkout + feed_run (baseline)", calling(by_hand(pure), calls)),
            (f"{pure.name}(n), the orchestrator", calling(pure, calls)),
            ("orchestrate(code) of the same body", calling(plain(pure), calls)),
        ],
        args.rounds,
        calls,
    )
    table(
        "a body that calls one tool",
        [
            ("orchestrate(code) of the same body (baseline)", calling(plain(one_call), calls)),
            (f"{one_call.name}(n), the orchestrator", calling(one_call, calls)),
        ],
        args.rounds,
        calls,
    )
    code = loop_code(args.tool_calls)
    sync_rows: list[tuple[str, Callable[[], object]]] = [
        ("bare feed_start/resume loop (baseline)", lambda: bare_monty(code)),
        ("orchestrate() API, sync tool", lambda: orchestrate(code, tools=[add], type_check=False)),
    ]
    table("sync tool call", sync_rows, args.rounds, args.tool_calls)
    with cpu_hog():
        table("sync tool call beside one CPU hog", sync_rows, args.rounds, args.tool_calls)


if __name__ == "__main__":
    main()

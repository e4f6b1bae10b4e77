"""What the type check costs a cell: a cell run with ``--no-type-check``
(the baseline), the same cell checked cold (the cache emptied before each run) and checked
with a cached pass (the same cell and tools run before). Medians of interleaved rounds, with
the machine's load; "check" is a row's median minus the baseline's.

    .venv/bin/python benchmarks/bench_typecheck.py [--rounds 40]

Two cells: a one-liner and a 40-line cell, each calling a registered tool (a cell naming no
tool skips the check, see `Driver.__init__`). Under each table, the cached check's cost again
as the median of paired differences (unchecked and cached runs back to back), then its parts
timed alone: the cache hit (hashing stubs and code), the stubs it hashes when they are kept
(`_stubs.kept`: unchanged tools and input types) and when they are written anew, and what
Monty adds: a worker checked out with the stubs and fed with the check skipped, against one
checked out without type checking (interleaved rounds).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable

from _timing import measure, measure_prepared, print_table

from jupyter_sandbox.orchestration import Tool, _typecheck, orchestrate, resolve_tools
from jupyter_sandbox.orchestration._stubs import build_stubs, kept
from jupyter_sandbox.orchestration._workers import pool


def add(x: int, y: int) -> int:
    return x + y


def scale(values: list[int], factor: float = 1.0) -> list[float]:
    return [v * factor for v in values]


TOOLS = [add, scale]
SMALL = "add(1, 2)"
LARGE = "\n".join(
    [
        "total = 0",
        "def step(i: int) -> int:",
        "    return add(i, i * 2)",
        *(f"total = add(total, step({i}))" for i in range(30)),
        "values = scale([1, 2, 3], 0.5)",
        "for v in values:",
        "    total = add(total, int(v))",
        "class Acc:",
        "    def __init__(self, n: int) -> None:",
        "        self.n = n",
        "Acc(total).n",
    ]
)


def rows(code: str) -> list[tuple[str, object, object]]:
    def unchecked() -> object:
        return orchestrate(code, tools=TOOLS, type_check=False)

    def checked() -> object:
        return orchestrate(code, tools=TOOLS)

    def nothing() -> None:
        pass

    def warm() -> None:  # a pass of this very cell is in the cache
        checked()

    return [
        ("--no-type-check (baseline)", nothing, unchecked),
        ("checked, cold (cache emptied)", _typecheck.passed.clear, checked),
        ("checked, cached (unchanged cell and tools)", warm, checked),
    ]


def per_call_us(fn: Callable[[], object], runs: int = 2000) -> float:
    start = time.perf_counter()
    for _ in range(runs):
        fn()
    return (time.perf_counter() - start) / runs * 1e6


def paired(code: str, rounds: int) -> str:
    """A cached check's cost as the median of paired differences: each round runs the cell
    unchecked and checked with a cached pass back to back (in turn first), so load that
    comes and goes over the run falls on both runs of a pair."""
    orchestrate(code, tools=TOOLS)  # its pass is cached
    differences = []
    for i in range(rounds):
        took = {}
        for check in (i % 2 == 0, i % 2 == 1):
            start = time.perf_counter()
            orchestrate(code, tools=TOOLS, type_check=check)
            took[check] = time.perf_counter() - start
        differences.append(took[True] - took[False])
    low, median, high = (q * 1e3 for q in statistics.quantiles(differences, n=4))
    return (
        f"cached check, median of {rounds} paired differences {median:.3f} ms "
        f"(quartiles {low:.2f} .. {high:.2f})"
    )


def stubs_part(tools: dict[str, Tool], inputs: dict[str, object]) -> str:
    again = per_call_us(lambda: build_stubs(tools, inputs))

    def written() -> None:
        kept.clear()
        build_stubs(tools, inputs)

    anew = per_call_us(written, runs=200)
    return (
        f"stubs ({len(tools)} tools, {len(inputs)} inputs) kept {again:.1f} us, "
        f"written anew {anew:.0f} us"
    )


def parts(code: str) -> str:
    """A cached check's parts: the cache hit (building the key and finding it) and the
    stubs the key hashes (which every checked run gets, cached or not), kept or written,
    for this cell's tools and for a registry of 20."""
    tools = resolve_tools(TOOLS)
    inputs: dict[str, object] = {"x": 1, "values": [1, 2, 3]}
    stubs = build_stubs(tools, inputs)
    _typecheck.passed.add(_typecheck.key(stubs, code, None))
    hit = per_call_us(lambda: _typecheck.checked(stubs, code, None, lambda: False))
    many = {f"tool{i}": Tool(TOOLS[i % 2], f"tool{i}") for i in range(20)}
    return f"cache hit {hit:.1f} us; {stubs_part(tools, inputs)}; {stubs_part(many, inputs)}"


def monty_part(rounds: int) -> str:
    """What Monty itself adds to a cached check (see the module docstring)."""
    stubs = build_stubs(resolve_tools(TOOLS), {})

    def fed(type_check: bool) -> Callable[[], object]:
        def run() -> object:
            declared = stubs if type_check else None
            with pool().checkout(type_check=type_check, type_check_stubs=declared) as session:
                return session.feed_run("1", skip_type_check=True)

        return run

    (_, off), (_, on) = measure([("off", fed(False)), ("stubs", fed(True))], rounds)
    return (
        f"Monty: checked out with the stubs, check skipped {on * 1e6:.0f} us vs "
        f"without type checking {off * 1e6:.0f} us ({(on - off) * 1e6:+.0f} us)"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=40)
    args = parser.parse_args()
    for label, code in (("one-line cell", SMALL), ("40-line cell", LARGE)):
        load = os.getloadavg()[0]
        table = measure_prepared(rows(code), args.rounds)  # type: ignore[arg-type]
        print_table(
            f"type check, {label}: median of {args.rounds} interleaved rounds "
            f"(load {load:.2f} -> {os.getloadavg()[0]:.2f})",
            table,
            unit="ms",
        )
        base = table[0][1]
        for name, seconds in table[1:]:
            print(f"  check cost, {name:40} {(seconds - base) * 1e3:8.2f} ms")
        print(f"  {paired(code, args.rounds * 5)} (load {os.getloadavg()[0]:.2f})")
        print(f"  {parts(code)}")
    print(f"  {monty_part(args.rounds * 10)} (load {os.getloadavg()[0]:.2f})")


if __name__ == "__main__":
    main()

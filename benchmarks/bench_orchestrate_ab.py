"""The tool-call rows of two versions of the engine, paired in one process: a git revision
(``--before``, the baseline) against the working tree.

    .venv/bin/python benchmarks/bench_orchestrate_ab.py --before main [--calls 1000] [--rounds 41]

On a shared machine the load moves more between two runs of `bench_orchestrate.py` than a
change to the run loop moves its rows, so this script imports both versions side by side
(each copied under a package name of its own: ``js_before``, ``js_after``) and times their
cells alternately, the order swapped each round; the ratio is the median of each round's
after/before. Wall time moves with the machine's load; the CPU time this process spent (the
run's thread, the tool loop: our side, not Monty's worker process) much less, so both are
shown. Rows: a sync tool in a run nobody watches, the same watched (``on_event``),
with the cache, with a store; an awaited async tool, without and with a store.

``--count`` prints instead how many Python function calls each tool call makes in each version
(a profile hook on every thread, a cell of ``--calls`` calls less an empty one): exact, so it
shows a change to the per-call path whatever the load.
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def add(x: int, y: int) -> int:
    return x + y


async def aadd(x: int, y: int) -> int:
    return x + y


def copy_as(source: Path, name: str, into: Path) -> None:
    """The package at ``source`` copied to ``into/name``, its absolute imports renamed."""
    target = into / name
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__", "labextension"))
    for path in target.rglob("*.py"):
        text = path.read_text()
        path.write_text(re.sub(r"\bjupyter_sandbox\b", name, text))


def rows(name: str, calls: int, folder: str) -> dict[str, Callable[[int], object]]:
    """Each row's cell, run with a number of tool calls (``calls`` by default)."""
    engine: Any = importlib.import_module(f"{name}.orchestration")
    store = engine.Store(os.path.join(folder, f"{name}.sqlite"))
    run = engine.orchestrate
    seen: list[object] = []

    def sync(n: int) -> str:
        return f"t = 0\nfor i in range({n}):\n    t = add(t, i)\nt"

    def awaited(n: int) -> str:
        return f"t = 0\nfor i in range({n}):\n    t = await aadd(t, i)\nt"

    return {
        "sync tool, nobody watches": lambda n=calls: run(sync(n), tools=[add], type_check=False),
        "sync tool, watched (on_event)": lambda n=calls: run(
            sync(n), tools=[add], type_check=False, on_event=seen.append
        ),
        "sync tool, cache": lambda n=calls: run(
            sync(n), tools=[add], type_check=False, cache=engine.ToolCache()
        ),
        "sync tool, store": lambda n=calls: run(
            sync(n), tools=[add], type_check=False, store=store
        ),
        "async tool awaited": lambda n=calls: run(awaited(n), tools=[aadd], type_check=False),
        "async tool awaited, store": lambda n=calls: run(
            awaited(n), tools=[aadd], type_check=False, store=store
        ),
    }


def python_calls(cell: Callable[[int], object], calls: int) -> float:
    """Python function calls per tool call of ``cell`` (on every thread of the process)."""

    def counted(n: int) -> int:
        count = 0

        def hook(frame: object, event: str, arg: object) -> None:
            nonlocal count
            count += event == "call"

        threading.setprofile(hook)
        sys.setprofile(hook)
        try:
            cell(n)
        finally:
            sys.setprofile(None)
            threading.setprofile(None)
        return count

    return (counted(calls) - counted(0)) / calls


def count(versions: dict[str, dict[str, Callable[[int], object]]], calls: int, ref: str) -> None:
    print(f"\nPython calls per tool call, {calls} calls per cell, before = {ref}")
    print(f"{'':32} {'before':>8} {'after':>8}")
    for row in versions["before"]:
        before, after = (python_calls(versions[v][row], calls) for v in ("before", "after"))
        print(f"{row:32} {before:8.1f} {after:8.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", required=True, help="the git revision to compare against")
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=41)
    parser.add_argument("--count", action="store_true", help="count Python calls, no timing")
    args = parser.parse_args()
    folder = tempfile.mkdtemp(prefix="bench-ab-")
    checkout = Path(folder) / "before"
    checkout.mkdir()
    archive = subprocess.run(
        ["git", "archive", args.before, "jupyter_sandbox"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    )
    subprocess.run(["tar", "-x", "-C", str(checkout)], input=archive.stdout, check=True)
    copy_as(checkout / "jupyter_sandbox", "js_before", Path(folder))
    copy_as(ROOT / "jupyter_sandbox", "js_after", Path(folder))
    sys.path.insert(0, folder)
    versions = {v: rows(f"js_{v}", args.calls, folder) for v in ("before", "after")}
    for fn in [*versions["before"].values(), *versions["after"].values()]:
        fn()  # warm-up: workers, stubs, the stores
    if args.count:
        count(versions, args.calls, args.before)
        shutil.rmtree(folder, ignore_errors=True)
        return
    times: dict[str, dict[str, list[float]]] = {
        v: {r: [] for r in rows_} for v, rows_ in versions.items()
    }
    cpu: dict[str, dict[str, list[float]]] = {
        v: {r: [] for r in rows_} for v, rows_ in versions.items()
    }
    load = os.getloadavg()[0]
    for i in range(args.rounds):
        order = ("before", "after") if i % 2 == 0 else ("after", "before")
        for row in versions["before"]:
            for version in order:
                start, used = time.perf_counter(), time.process_time()
                versions[version][row]()
                times[version][row].append((time.perf_counter() - start) / args.calls)
                cpu[version][row].append((time.process_time() - used) / args.calls)
    print(
        f"\nper tool call, {args.calls} calls per cell, {args.rounds} paired rounds in one "
        f"process, before = {args.before} (load {load:.2f} -> {os.getloadavg()[0]:.2f})"
    )
    head = f"{'wall us: before':>15} {'after':>7} {'ratio':>7}"
    print(f"{'':32} {head}   {'CPU us: before':>14} {'after':>7} {'ratio':>7}")
    for row in versions["before"]:
        line = f"{row:32}"
        for kept in (times, cpu):
            before, after = kept["before"][row], kept["after"][row]
            ratio = statistics.median(a / b for a, b in zip(after, before, strict=True))
            line += (
                f" {statistics.median(before) * 1e6:14.2f} {statistics.median(after) * 1e6:7.2f}"
                f" {ratio:6.3f}x  "
            )
        print(line.rstrip())
    shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()

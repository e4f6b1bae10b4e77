"""Timing helpers the benchmark scripts share: medians (these machines are noisy) and a table
with every row compared against the named baseline measured in the same run.

With ``JUPYTER_SANDBOX_BENCH_JSON=PATH`` set, every table a script prints with `print_table` is
also written to PATH as JSON when the script ends, with the machine it ran on (cores, load
averages at the start and the end, date, Python): ``benchmarks/tables.py`` turns such files
into the Markdown tables of the docs' performance page.
"""

from __future__ import annotations

import atexit
import datetime
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

JSON_ENV = "JUPYTER_SANDBOX_BENCH_JSON"
_START_LOAD = os.getloadavg()
_tables: list[dict[str, object]] = []


def machine() -> dict[str, object]:
    """What the numbers depend on: the machine and how busy it was."""
    return {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "cores": os.cpu_count(),
        "load_start": [round(x, 2) for x in _START_LOAD],
        "load_end": [round(x, 2) for x in os.getloadavg()],
        "python": platform.python_version(),
        "platform": platform.platform(),
    }


def write_json(path: str | os.PathLike[str]) -> None:
    """The tables printed so far, with the command and the machine, as JSON at ``path``."""
    result = {
        "script": Path(sys.argv[0]).name,
        "argv": sys.argv[1:],
        "machine": machine(),
        "tables": _tables,
    }
    Path(path).write_text(json.dumps(result, indent=1) + "\n")
    print(f"\nwrote {path}")


def _write_at_exit() -> None:
    path = os.environ.get(JSON_ENV)
    if path and _tables:
        write_json(path)


atexit.register(_write_at_exit)


def median_seconds(fn: Callable[[], object], runs: int, pause: float = 0.0) -> float:
    """Median wall time of ``fn`` after a warm-up call; ``pause`` (untimed) between calls."""
    fn()  # warm-up: imports, first connection, page cache
    samples = []
    for _ in range(runs):
        time.sleep(pause)
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def measure(rows: list[tuple[str, Callable[[], object]]], rounds: int) -> list[tuple[str, float]]:
    """Median seconds per row, taking the rows in turn each round (not one row's rounds in a
    block), so load that comes and goes on a shared machine hits every row alike."""
    for _, fn in rows:
        fn()  # warm-up
    samples: list[list[float]] = [[] for _ in rows]
    for _ in range(rounds):
        for (_, fn), times in zip(rows, samples, strict=True):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
    return [(label, statistics.median(t)) for (label, _), t in zip(rows, samples, strict=True)]


def print_table(
    title: str, rows: list[tuple[str, float]], *, per: int = 1, unit: str = "us"
) -> None:
    """Rows of (label, seconds); the first row is the baseline the ratios are against.

    ``per`` divides each time (e.g. per call); ``unit`` is ``us``, ``ms`` or ``s``."""
    scale = {"us": 1e6, "ms": 1e3, "s": 1.0}[unit]
    base = rows[0][1]
    _tables.append(
        {
            "title": title,
            "unit": unit,
            "per": per,
            "rows": [
                {"label": label, "value": seconds / per * scale, "ratio": seconds / base}
                for label, seconds in rows
            ],
        }
    )
    print(f"\n{title}")
    print(f"{'':44} {unit + (' each' if per > 1 else ''):>12} {'vs ' + 'baseline':>12}")
    for label, seconds in rows:
        print(f"{label:44} {seconds / per * scale:12.2f} {seconds / base:11.2f}x")


def measure_prepared(
    rows: list[tuple[str, Callable[[], object], Callable[[], object]]], rounds: int
) -> list[tuple[str, float]]:
    """`measure` for rows of (label, prepare, fn): ``prepare`` runs untimed right before each
    timed ``fn`` (wait for background work, remove spares, a first run...), so one row's
    state is set up the same way every round whatever row ran before it."""
    samples: list[list[float]] = [[] for _ in rows]
    for round_ in range(rounds + 1):  # round 0 warms up: imports, first connection, page cache
        for (_, prepare, fn), times in zip(rows, samples, strict=True):
            prepare()
            start = time.perf_counter()
            fn()
            if round_:
                times.append(time.perf_counter() - start)
    return [(label, statistics.median(t)) for (label, _, _), t in zip(rows, samples, strict=True)]


def descendants_cpu() -> float:
    """CPU seconds (user + system) the live descendants of this process have used: the
    worker processes of the pools. ``/proc`` counts in clock ticks (10 ms), so take the
    difference over many calls and average, never a median of short samples."""
    parents: dict[int, tuple[int, int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    text = stat.read()
            except OSError:
                continue
            fields = text[text.rindex(")") + 2 :].split()
            parents[int(entry)] = (int(fields[1]), int(fields[11]) + int(fields[12]))
    ours, grown = {os.getpid()}, True
    while grown:
        grown = False
        for pid, (parent, _) in parents.items():
            if parent in ours and pid not in ours:
                ours.add(pid)
                grown = True
    ours.discard(os.getpid())
    return sum(parents[pid][1] for pid in ours) / os.sysconf("SC_CLK_TCK")


def measure_split(
    rows: list[tuple[str, Callable[[], object]]], rounds: int
) -> list[tuple[str, float, float, float]]:
    """`measure` with where each row's time went: (label, median wall seconds, median CPU
    seconds of this process (every thread: the host side), mean CPU seconds of the worker
    processes). CPU time moves much less with the machine's load than wall time."""
    for _, fn in rows:
        fn()  # warm-up
    walls: list[list[float]] = [[] for _ in rows]
    hosts: list[list[float]] = [[] for _ in rows]
    workers = [0.0 for _ in rows]
    for _ in range(rounds):
        for i, (_, fn) in enumerate(rows):
            worker = descendants_cpu()
            start, used = time.perf_counter(), time.process_time()
            fn()
            walls[i].append(time.perf_counter() - start)
            hosts[i].append(time.process_time() - used)
            workers[i] += descendants_cpu() - worker
    return [
        (label, statistics.median(walls[i]), statistics.median(hosts[i]), workers[i] / rounds)
        for i, (label, _) in enumerate(rows)
    ]

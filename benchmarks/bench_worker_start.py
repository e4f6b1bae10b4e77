"""What the OS confinement of the Monty workers costs: starting a worker, and a cell.

    .venv/bin/python benchmarks/bench_worker_start.py [--rounds 30]

Compares the bare ``monty`` binary, every confinement level that works on this machine, and
the first launcher's way (all workers ``nobody``, host PID namespace). A worker starts
when the pool warms up and after every interrupt or crash (the pool replaces the killed one);
a cell on a warm worker never starts one.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import resource
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence

import pydantic_monty as pm
from _timing import measure, print_table
from pydantic_monty._binary import find_monty_binary

from jupyter_sandbox.orchestration._confine import (
    _levels,
    kill_worker,
    launcher_script,
    launcher_works,
)

BEFORE = [
    "unshare", "--net", "--ipc", "--uts", "--",
    "setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
    "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs", "--",
]  # fmt: skip


def launchers(folder: str) -> list[tuple[str, str]]:
    """(label, program the pool would start) for each way of starting a worker here."""
    monty = find_monty_binary()
    found = [("bare monty (no confinement)", monty)]
    candidates: list[tuple[str, Sequence[str]]] = [("before: shared nobody + netns", BEFORE)]
    for level, prefix in [*candidates, *_levels()]:
        path = os.path.join(folder, f"launcher-{len(found)}")
        with open(path, "w") as script:
            script.write(launcher_script(prefix, monty))
        os.chmod(path, 0o700)
        if launcher_works(path):
            found.append((level, path))
    return found


def start_and_exit(program: str) -> Callable[[], object]:
    return lambda: subprocess.run([program, "-c", "1"], check=True, capture_output=True)


def cpu_to_start(program: str) -> float:
    """CPU seconds (user + system, the whole launcher chain) to start a worker and exit: what
    wall time shows too, without the waiting that other load on a shared machine adds."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start_and_exit(program)()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime


def replacement(pool: pm.Monty) -> float:
    """Seconds from a killed worker (an interrupted cell) to the next cell's answer."""
    with pool.checkout() as session:
        session.feed_run("1")
        pid = session.worker_pid
        assert pid is not None
        kill_worker(pid)  # as an interrupt does
        with contextlib.suppress(pm.MontyCrashedError):
            session.feed_run("1")
    start = time.perf_counter()
    with pool.checkout() as session:
        session.feed_run("1")
    return time.perf_counter() - start


def empty_cell(pool: pm.Monty) -> None:
    with pool.checkout() as session:
        session.feed_run("1")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=30)
    rounds = parser.parse_args().rounds
    with tempfile.TemporaryDirectory() as folder:
        found = launchers(folder)
        print_table(
            f"worker start to exit (`launcher -c 1`), median of {rounds} interleaved rounds",
            measure([(label, start_and_exit(path)) for label, path in found], rounds),
            unit="ms",
        )
        cpu: dict[str, list[float]] = {label: [] for label, _ in found}
        for _ in range(rounds):
            for label, path in found:
                cpu[label].append(cpu_to_start(path))
        print_table(
            f"CPU to start a worker and exit, mean of {rounds} interleaved rounds",
            [(label, statistics.mean(seconds)) for label, seconds in cpu.items()],
            unit="ms",
        )
        pools = [(label, pm.Monty(binary_path=path, max_processes=1)) for label, path in found]
        for _, pool in pools:
            pool.__enter__()
        try:
            print_table(
                f"empty cell on a warm worker (checkout + feed_run), median of {rounds * 10}",
                measure(
                    [(label, functools.partial(empty_cell, pool)) for label, pool in pools],
                    rounds * 10,
                ),
                unit="ms",
            )
            kills = [(label, statistics.median(replacement(pool) for _ in range(rounds)))
                     for label, pool in pools]  # fmt: skip
            print_table(
                f"killed worker to next cell's answer, median of {rounds}", kills, unit="ms"
            )
        finally:
            for _, pool in pools:
                pool.__exit__(None, None, None)


if __name__ == "__main__":
    main()

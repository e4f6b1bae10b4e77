"""What each isolation level costs: a run and a fan-out under runc and under gVisor's runsc.

    .venv/bin/python benchmarks/bench_isolation.py [--rounds N] [--pause S]

For each level (`jupyter_sandbox.sandbox._isolation`), against ``docker run --rm`` of the same
one-line program with the same confinement under the same runtime (the level's baseline): a
warm ``create().run`` spaced like cells (the spare started after the previous run is up), a
cold one (no spare waiting), and a fan-out of 16 runs through ``tool(sandbox,
concurrency=16)`` and ``asyncio.gather`` in ``orchestrate``, against 16 parallel CLI runs. The
last table puts gVisor's time for each row over runc's. Rows take turns each round (medians),
so load that comes and goes hits them alike. A script, not a test: numbers depend on the
machine.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from _timing import measure_prepared, print_table
from bench_sandbox import cold

from jupyter_sandbox import create, orchestrate, tool
from jupyter_sandbox.sandbox import DEFAULT_BASE_IMAGE
from jupyter_sandbox.sandbox._isolation import RUNTIMES, Isolation
from jupyter_sandbox.sandbox._pool import quiesce, settle

FAN_OUT = 16
LEVELS: tuple[Isolation, ...] = ("container", "gvisor")
CONFINED = [
    "--network=none",
    "--user=1000:1000",
    "--read-only",
    "--tmpfs=/tmp:rw,nosuid,nodev,size=256m",
    "--cap-drop=ALL",
    "--security-opt=no-new-privileges",
    "--pids-limit=256",
    "--memory=1g",
    "--cpus=1",
]
GATHER = f"import asyncio\nawait asyncio.gather(*[double(i) for i in range({FAN_OUT})])"


def nothing() -> None:
    pass


def spaced(pause: float) -> Callable[[], None]:
    """Like cells: background starts and removals done, then a pause to read the output."""

    def prepare() -> None:
        quiesce()
        time.sleep(pause)

    return prepare


def level_rows(
    level: Isolation, pause: float
) -> list[tuple[str, Callable[[], object], Callable[[], object]]]:
    """The rows of one level, its CLI baseline first."""
    runtime = RUNTIMES[level]
    cli_command = [
        "docker",
        "run",
        "--rm",
        *CONFINED,
        *([f"--runtime={runtime}"] if runtime else []),
        DEFAULT_BASE_IMAGE,
        "python3",
        "-c",
        "print(21 * 2)",
    ]
    sandbox = create(
        "bench", code="y = x * 2", inputs={"x": int}, outputs={"y": int}, isolation=level
    )
    double = tool(sandbox, name="double", concurrency=FAN_OUT)

    def cli() -> None:
        subprocess.run(cli_command, check=True, capture_output=True)

    def cli_parallel() -> None:
        with ThreadPoolExecutor(FAN_OUT) as pool:
            list(pool.map(lambda _: cli(), range(FAN_OUT)))

    def run() -> None:
        assert sandbox.run(x=21) == 42

    def gather() -> None:
        assert orchestrate(GATHER, tools=[double]).value == [2 * i for i in range(FAN_OUT)]

    return [
        (f"{level}: docker run --rm CLI", quiesce, cli),
        (f"{level}: warm create().run, {pause:g} s apart", spaced(pause), run),
        (f"{level}: cold create().run (no spare)", *cold(level)),
        (f"{level}: {FAN_OUT} parallel docker run CLI", quiesce, cli_parallel),
        (f"{level}: fan-out of {FAN_OUT}, tool + gather", spaced(pause), gather),
    ]


def _load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument(
        "--pause", type=float, default=1.0, help="seconds between runs spaced like cells"
    )
    args = parser.parse_args()

    load_before = _load()
    rows = [row for level in LEVELS for row in level_rows(level, args.pause)]
    times = dict(measure_prepared(rows, args.rounds))
    settle()
    print(f"median of {args.rounds} interleaved rounds; load before {load_before}, after {_load()}")
    per_level = len(rows) // len(LEVELS)
    for at, level in enumerate(LEVELS):
        own = [(label, times[label]) for label, _, _ in rows[at * per_level : (at + 1) * per_level]]
        print_table(
            f"{level} (ratios against its own CLI run; fan-out rows: all 16)", own, unit="ms"
        )
        for label, seconds in own[-2:]:
            print(f"  {label:42} {FAN_OUT / seconds:6.2f} containers/s")
    print(f"\n{'gVisor over runc, same row':44} {'runc ms':>12} {'gVisor ms':>12} {'ratio':>8}")
    for (label, _, _), (gvisor, _, _) in zip(rows[:per_level], rows[per_level:], strict=True):
        what = label.split(": ", 1)[1]
        runc_s, gvisor_s = times[label], times[gvisor]
        print(f"{what:44} {runc_s * 1e3:12.1f} {gvisor_s * 1e3:12.1f} {gvisor_s / runc_s:7.2f}x")


if __name__ == "__main__":
    main()

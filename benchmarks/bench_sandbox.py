"""Benchmark of the sandbox engine; prints two tables, each row against a baseline measured in
the same run.

    .venv/bin/python benchmarks/bench_sandbox.py [--rounds N] [--pause S] [--builds]

Runs: ``docker run --rm`` of a one-line program through the CLI, with the confinement a sandbox
gets (the baseline); a warm ``create().run`` spaced like cells (the spare started after the
previous run is up), back to back (mean of 4 runs in a row, with limits of their own; as when
a cell's loop runs again, the pool remembers the previous round's row and keeps 4 spares), and
cold (a tmpfs size no run had, new each round: no spare can serve it), and fresh limits (a
memory limit no run had, new each round: a waiting spare is set to it); the
same warm run through ``%%sandbox``; a cache hit. Fan-out: 16 runs through
``tool(sandbox, concurrency=16)`` and ``asyncio.gather`` in ``orchestrate``, with the spares
that recent demand left and with none, against 16 parallel CLI runs. Rows take turns each
round (medians), so load that comes and goes hits them alike. ``--builds`` adds an environment
build with uv and one with pip, from scratch. A script, not a test: numbers depend on the
machine.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import itertools
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from _timing import measure_prepared, print_table
from docker.errors import ImageNotFound
from IPython.core.interactiveshell import InteractiveShell

from jupyter_sandbox import create, orchestrate, tool
from jupyter_sandbox._shared._events import ignore
from jupyter_sandbox.sandbox import DEFAULT_BASE_IMAGE, ImageSpec
from jupyter_sandbox.sandbox._client import client
from jupyter_sandbox.sandbox._image import ensure_image
from jupyter_sandbox.sandbox._isolation import Isolation
from jupyter_sandbox.sandbox._pool import quiesce, settle

FAN_OUT = 16
IN_A_ROW = 4
CONFINED = [
    "--network=none",
    "--user=1000:1000",
    "--read-only",
    "--tmpfs=/tmp:size=256m",
    "--cap-drop=ALL",
    "--security-opt=no-new-privileges",
    "--pids-limit=256",
    "--memory=1g",
    "--cpus=1",
]
CLI = ["docker", "run", "--rm", *CONFINED, DEFAULT_BASE_IMAGE, "python3", "-c", "print(21 * 2)"]
SANDBOX = create("bench", code="y = x * 2", inputs={"x": int}, outputs={"y": int})
ROW = create(
    "bench-row", code="y = x * 2", inputs={"x": int}, outputs={"y": int}, resources={"disk": "255m"}
)
"""The back-to-back row's own tmpfs size, so its own spares (a spare of another size cannot be
set to it): spares follow each image and limits' demand, and the rows spaced like cells must
not be served by the spares a row left."""
GATHER = f"import asyncio\nawait asyncio.gather(*[double(i) for i in range({FAN_OUT})])"


def nothing() -> None:
    pass


def cli() -> None:
    subprocess.run(CLI, check=True, capture_output=True)


def cli_parallel() -> None:
    with ThreadPoolExecutor(FAN_OUT) as pool:
        list(pool.map(lambda _: cli(), range(FAN_OUT)))


def run() -> None:
    assert SANDBOX.run(x=21) == 42


def fan_out() -> Callable[[], None]:
    double = tool(SANDBOX, name="double", concurrency=FAN_OUT)

    def gather() -> None:
        result = orchestrate(GATHER, tools=[double])
        assert result.value == [2 * i for i in range(FAN_OUT)]

    return gather


def spaced(pause: float) -> Callable[[], None]:
    """Like cells: background starts and removals done, then a pause to read the output."""

    def prepare() -> None:
        quiesce()
        time.sleep(pause)

    return prepare


def back_to_back() -> None:
    for _ in range(IN_A_ROW):
        assert ROW.run(x=21) == 42


def _new_each_round(
    name: str, resource: str, sizes: Iterator[int], **options: Any
) -> tuple[Callable[[], None], Callable[[], None]]:
    """(prepare, run): each round, once the spares are up, a sandbox whose ``resource`` is a
    size no run had before; created untimed, as the other rows' sandboxes are."""
    sandbox = [SANDBOX]

    def prepare() -> None:
        quiesce()
        sandbox[0] = create(
            name,
            code="y = x * 2",
            inputs={"x": int},
            outputs={"y": int},
            resources={resource: f"{next(sizes)}m"},
            **options,
        )

    def run_it() -> None:
        assert sandbox[0].run(x=21) == 42

    return prepare, run_it


def cold(
    isolation: Isolation = "container", network: str | list[str] = "none"
) -> tuple[Callable[[], None], Callable[[], None]]:
    """A tmpfs size no run had (fixed when a container is made): no spare can serve it, and
    the other rows' spares stay. ``network`` as `create`'s (an allow-list's proxy is up from
    round 0)."""
    disks = itertools.count(1000)
    return _new_each_round("bench-cold", "disk", disks, isolation=isolation, network=network)


def fresh_limits() -> tuple[Callable[[], None], Callable[[], None]]:
    """A memory limit no run had: a waiting spare of the other rows' limits is set to it
    (`_pool.retune`)."""
    return _new_each_round("bench-fresh", "memory", itertools.count(700))


def magic_run() -> Callable[[], None]:
    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "jupyter_sandbox")
    shell.user_ns["x"] = 21

    def cell() -> None:
        with contextlib.redirect_stdout(io.StringIO()):
            result = shell.run_cell("%%sandbox --quiet --in x --out y\ny = x * 2\nprint(y)")
        assert result.success
        assert shell.user_ns["y"] == 42

    return cell


def cache_hit() -> Callable[[], object]:
    sandbox = create("bench", code="y = x * 2", inputs={"x": int}, outputs={"y": int}, cache="auto")
    sandbox.run(x=21)  # fill the cache
    return lambda: sandbox.execute({"x": 21})


def build_seconds(packages: list[str], installer: str) -> float:
    docker = client()
    spec = ImageSpec.normalise(DEFAULT_BASE_IMAGE, packages=packages, installer=installer)  # type: ignore[arg-type]
    tag = spec.tag(str(docker.images.get(DEFAULT_BASE_IMAGE).id))
    with contextlib.suppress(ImageNotFound):  # not built yet
        docker.images.remove(tag, force=True)
    start = time.perf_counter()
    _, _, info = ensure_image(docker, spec, ignore)
    assert info is not None
    assert info.error is None, info.error
    return time.perf_counter() - start


def _load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=11)
    parser.add_argument(
        "--pause", type=float, default=1.0, help="seconds between runs spaced like cells"
    )
    parser.add_argument("--builds", action="store_true", help="also time two builds")
    parser.add_argument(
        "--only", choices=["runs", "fan-out"], help="one table only (the other takes long)"
    )
    parser.add_argument("--packages", nargs="+", default=["requests", "pyyaml", "rich"])
    args = parser.parse_args()

    load_before = _load()
    runs = fans = []
    if args.only != "fan-out":
        runs = measure_prepared(
            [
                ("docker run --rm CLI, same confinement", quiesce, cli),
                (f"warm create().run, {args.pause:g} s apart", spaced(args.pause), run),
                (f"warm create().run, back to back (mean of {IN_A_ROW})", quiesce, back_to_back),
                ("cold create().run (no spare)", *cold()),
                ("fresh limits create().run (spare retuned)", *fresh_limits()),
                (f"warm %%sandbox, {args.pause:g} s apart", spaced(args.pause), magic_run()),
                ("cache hit (identical run, cache='auto')", nothing, cache_hit()),
            ],
            args.rounds,
        )
        label, seconds = runs[2]
        runs[2] = (label, seconds / IN_A_ROW)
    if args.only != "runs":
        gather = fan_out()
        fans = measure_prepared(
            [
                (f"{FAN_OUT} parallel docker run CLI", quiesce, cli_parallel),
                (f"tool(concurrency={FAN_OUT}) gather, spares up", spaced(args.pause), gather),
                (f"tool(concurrency={FAN_OUT}) gather, no spare", settle, gather),
            ],
            args.rounds,
        )
    settle()
    print(f"median of {args.rounds} interleaved rounds; load before {load_before}, after {_load()}")
    if runs:
        print_table("one run", runs, unit="ms")
    if fans:
        title = f"fan-out of {FAN_OUT} runs (time for all; ratio < 1 is faster)"
        print_table(title, fans, unit="s")
        for label, seconds in fans:
            print(f"  {label:42} {FAN_OUT / seconds:6.2f} containers/s")
    if args.builds:
        uv = build_seconds(args.packages, "uv")
        pip = build_seconds(args.packages, "pip")
        print_table(
            f"build from scratch: {' '.join(args.packages)}",
            [("uv", uv), ("pip", pip)],
            unit="s",
        )


if __name__ == "__main__":
    main()

"""Benchmark of the %%sandbox engine; prints one table.

    .venv/bin/python benchmarks/bench_sandbox.py [--runs N] [--packages P ...]

Rows: a warm ``%%sandbox`` run (image cached), spaced like cells (the spare container started
after each run is ready) and back to back (it is not), against ``docker run --rm`` of the same
code via the CLI (with and without the same confinement flags); the cache-hit check of an
identical run; an environment build with uv against one with pip for the same packages (from
scratch: the image is removed first). A script, not a test: numbers depend on the machine.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import subprocess
import time
from collections.abc import Callable

from _timing import median_seconds
from docker.errors import ImageNotFound
from IPython.core.interactiveshell import InteractiveShell

from jupyter_sandbox import create
from jupyter_sandbox._events import ignore
from jupyter_sandbox.sandbox import DEFAULT_BASE_IMAGE, ImageSpec
from jupyter_sandbox.sandbox._client import client
from jupyter_sandbox.sandbox._image import ensure_image

CODE = "print(21 * 2)"
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


def cli(flags: list[str]) -> Callable[[], object]:
    cmd = ["docker", "run", "--rm", *flags, DEFAULT_BASE_IMAGE, "python3", "-c", CODE]
    return lambda: subprocess.run(cmd, check=True, capture_output=True)


def magic_run() -> Callable[[], object]:
    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "jupyter_sandbox")
    shell.user_ns["x"] = 21

    def run() -> None:
        with contextlib.redirect_stdout(io.StringIO()):
            result = shell.run_cell("%%sandbox --quiet --in x --out y\ny = x * 2\nprint(y)")
        assert result.success
        assert shell.user_ns["y"] == 42

    return run


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
    _, info = ensure_image(docker, spec, ignore)
    assert info is not None
    assert info.error is None, info.error
    return time.perf_counter() - start


def _load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--packages", nargs="+", default=["requests", "pyyaml", "rich"])
    parser.add_argument(
        "--pause", type=float, default=1.0, help="seconds between timed runs, as between cells"
    )
    args = parser.parse_args()

    magic = magic_run()
    warm = median_seconds(magic, args.runs, pause=args.pause)
    back_to_back = median_seconds(magic, args.runs)
    plain = median_seconds(cli(["--network=none"]), args.runs, pause=args.pause)
    confined = median_seconds(cli(CONFINED), args.runs, pause=args.pause)
    hit = median_seconds(cache_hit(), args.runs)
    uv = build_seconds(args.packages, "uv")
    pip = build_seconds(args.packages, "pip")

    rows = [
        (f"warm %%sandbox run, {args.pause:g} s apart", warm, ""),
        ("warm %%sandbox run, back to back", back_to_back, ""),
        ("docker run --rm, same confinement", confined, f"%%sandbox / CLI = {warm / confined:.2f}"),
        ("docker run --rm --network=none only", plain, f"%%sandbox / CLI = {warm / plain:.2f}"),
        ("cache hit (identical run, cache='auto')", hit, ""),
        (f"build with uv: {' '.join(args.packages)}", uv, ""),
        (f"build with pip: {' '.join(args.packages)}", pip, f"pip / uv = {pip / uv:.2f}"),
    ]
    print(f"median of {args.runs} runs (builds: one each, from scratch); load {_load()}")
    print(f"| {'what':<48} | {'seconds':>8} | {'ratio':<22} |")
    print(f"|{'-' * 50}|{'-' * 10}|{'-' * 24}|")
    for what, seconds, ratio in rows:
        print(f"| {what:<48} | {seconds:>8.3f} | {ratio:<22} |")


if __name__ == "__main__":
    main()

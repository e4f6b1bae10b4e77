"""Benchmark of what putting a ``%%sandbox`` cell's `File` output beside the notebook costs
: the same warm cell writing a file of SIZE MB, with linking off
(``%config SandboxMagics.link_limit = '0'``, the baseline: the cell as before) and on, taking
turns each round in one real IPython shell; and the copy step alone on that file. Medians.

    .venv/bin/python benchmarks/bench_file_links.py [--rounds N] [--size MB]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from _timing import print_table
from IPython.core.interactiveshell import InteractiveShell

from jupyter_sandbox import File
from jupyter_sandbox.magics._files import link_outputs
from jupyter_sandbox.sandbox._pool import quiesce


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--size", type=int, default=8, help="MB the cell writes")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="bench-file-links-"))
    os.chdir(folder)  # the notebook's folder: sandbox-outputs/ goes here
    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "jupyter_sandbox")
    cell = (
        "%%sandbox --quiet --out data:File\n"
        f"open('/var/outputs/data', 'wb').write(bytes(range(256)) * (4096 * {args.size}));"
    )
    times: dict[str, list[float]] = {"0": [], "100m": []}
    shell.run_cell(cell)  # the image and the first spare: not timed
    for round_ in range(args.rounds):
        order = list(times.items())
        for limit, kept in order if round_ % 2 else order[::-1]:  # neither side always first
            shell.run_line_magic("config", f"SandboxMagics.link_limit = '{limit}'")
            quiesce()  # the next spare is up, as between cells
            start = time.perf_counter()
            assert shell.run_cell(cell).success
            kept.append(time.perf_counter() - start)
    print_table(
        f"%%sandbox writing a {args.size} MB File, warm, median of {args.rounds}",
        [
            ("not linked (link_limit 0: as before)", statistics.median(times["0"])),
            ("copied into sandbox-outputs/", statistics.median(times["100m"])),
        ],
        unit="ms",
    )
    source = File(shell.user_ns["data"])
    alone = []
    for i in range(args.rounds):
        start = time.perf_counter()
        link_outputs({"data": source}, root=folder, cell=1000 + i, limit=2**40)
        alone.append(time.perf_counter() - start)
    print_table(
        "the copy step alone (link_outputs), against the whole linked cell",
        [
            ("the linked cell", statistics.median(times["100m"])),
            (f"link_outputs of {args.size} MB", statistics.median(alone)),
        ],
        unit="ms",
    )


if __name__ == "__main__":
    main()

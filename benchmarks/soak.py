"""Soak: thousands of cells in one real kernel; prints what the kernel holds as it goes.

    .venv/bin/python benchmarks/soak.py [--cells 3000] [--runs 300] [--every 500]

Starts a kernel with jupyter_client and executes cells the way a frontend does: ``--cells``
``%%orchestrate`` cells (each calls a tool, so each shows and then replaces a live widget) with
``--runs`` ``%%sandbox`` runs spread among them. Every ``--every`` cells, and at the start and
the end, a probe cell reports the kernel's RSS (after ``gc.collect``, so only what is really
kept counts), Python and OS threads, open fds, open ipywidgets models, child processes, its
containers and its temp folders; the comm_open/comm_close messages the frontend saw are
counted too. After the table, the kernel is shut down as a frontend does it and the script
says what stayed behind, before and after the next load's reaping. Everything should stay flat.
A script, not a test: it takes minutes at full size (``--cells 300 --runs 30`` is ~1 minute).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from typing import Any

from jupyter_client.blocking.client import BlockingKernelClient
from jupyter_client.manager import KernelManager, start_new_kernel

SETUP = """
%load_ext jupyter_sandbox
from jupyter_sandbox import tool

@tool
def add(x: int, y: int) -> int:
    return x + y

x = 41
"""

PROBE = """
def _soak_probe():
    import gc, json, os, tempfile, threading
    import psutil
    import ipywidgets.widgets.widget as widget_module
    from jupyter_sandbox.sandbox._client import client

    gc.collect()
    me = psutil.Process()
    mine = {"label": [f"jupyter-sandbox.owner-pid={os.getpid()}"]}
    print(json.dumps({
        "pid": os.getpid(),
        "rss_mb": me.memory_info().rss / 2**20,
        "threads": threading.active_count(),
        "os_threads": me.num_threads(),
        "fds": me.num_fds(),
        "widgets": len(widget_module._instances),
        "children": len(me.children(recursive=True)),
        "containers": len(client().api.containers(all=True, filters=mine)),
        "folders": sum(f"-{os.getpid()}-" in name for name in os.listdir(tempfile.gettempdir())),
    }))
"""

ORCHESTRATE = "%%orchestrate --in x\n[add(x, i) for i in range(3)]"
SANDBOX = "%%sandbox --in x --out y\ny = x + 1"

COLUMNS = [
    ("cells", "cells"),
    ("runs", "runs"),
    ("rss_mb", "RSS MB"),
    ("threads", "py threads"),
    ("os_threads", "OS threads"),
    ("fds", "fds"),
    ("widgets", "widget models"),
    ("opened", "comm opens"),
    ("closed", "comm closes"),
    ("children", "children"),
    ("containers", "containers"),
    ("folders", "temp folders"),
]


class Soak:
    """One kernel and the counts of widget comms its frontend (this script) saw."""

    def __init__(self) -> None:
        self.manager: KernelManager
        self.client: BlockingKernelClient
        self.manager, self.client = start_new_kernel(kernel_name="python3")
        self.opened = 0
        self.closed = 0
        self.run(SETUP)
        self.run(PROBE)

    def run(self, code: str) -> str:
        """Execute a cell; its printed text. A failing cell ends the soak (it proves nothing)."""
        printed: list[str] = []

        def hook(message: dict[str, Any]) -> None:
            kind = message["msg_type"]
            self.opened += kind == "comm_open"
            self.closed += kind == "comm_close"
            if kind == "stream":
                printed.append(message["content"]["text"])

        reply = self.client.execute_interactive(code, output_hook=hook, timeout=600)
        if reply["content"]["status"] != "ok":
            raise SystemExit(f"cell failed: {code!r}: {reply['content'].get('evalue')}")
        return "".join(printed)

    def probe(self, cells: int, runs: int) -> dict[str, Any]:
        row: dict[str, Any] = json.loads(self.run("_soak_probe()"))
        return {**row, "cells": cells, "runs": runs, "opened": self.opened, "closed": self.closed}

    def shutdown(self) -> None:
        self.client.stop_channels()
        self.manager.shutdown_kernel(now=False)


def print_row(row: dict[str, Any]) -> None:
    cells = [
        f"{row[key]:.1f}" if isinstance(row[key], float) else str(row[key]) for key, _ in COLUMNS
    ]
    print(
        " | ".join(c.rjust(len(title)) for c, (_, title) in zip(cells, COLUMNS, strict=True)),
        flush=True,
    )


def leftovers(pid: int) -> tuple[int, int]:
    """Containers and temp folders a (dead) kernel left."""
    from jupyter_sandbox.sandbox._client import client

    mine = {"label": [f"jupyter-sandbox.owner-pid={pid}"]}
    containers = len(client().api.containers(all=True, filters=mine))
    folders = sum(f"-{pid}-" in name for name in os.listdir(tempfile.gettempdir()))
    return containers, folders


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", type=int, default=3000, help="%%%%orchestrate cells")
    parser.add_argument("--runs", type=int, default=300, help="%%%%sandbox runs among them")
    parser.add_argument("--every", type=int, default=500, help="probe every N cells")
    args = parser.parse_args()

    soak = Soak()
    soak.run(ORCHESTRATE)
    soak.run(SANDBOX)  # first use of each: imports, worker pool, image, spare container
    print(" | ".join(title for _, title in COLUMNS))
    start = time.monotonic()
    first = soak.probe(0, 0)
    print_row(first)
    stride = max(1, args.cells // args.runs) if args.runs else 0
    runs = 0
    for cell in range(1, args.cells + 1):
        soak.run(ORCHESTRATE)
        if stride and cell % stride == 0 and runs < args.runs:
            soak.run(SANDBOX)
            runs += 1
        if cell % args.every == 0 and cell != args.cells:
            print_row(soak.probe(cell, runs))
    while runs < args.runs:  # more runs than cells
        soak.run(SANDBOX)
        runs += 1
    last = soak.probe(args.cells, runs)
    print_row(last)
    print(f"{args.cells} cells and {runs} runs in {time.monotonic() - start:.0f} s")

    soak.shutdown()
    containers, folders = leftovers(first["pid"])
    print(f"after the kernel's shutdown: {containers} containers, {folders} temp folders left")
    from jupyter_sandbox.sandbox import reap_orphans
    from jupyter_sandbox.sandbox._manage import reap_folders

    reap_orphans()
    reap_folders()
    containers, folders = leftovers(first["pid"])
    print(f"after the next load's reaping: {containers} containers, {folders} temp folders left")


if __name__ == "__main__":
    main()

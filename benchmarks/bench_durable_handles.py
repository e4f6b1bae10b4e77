"""What naming handles costs a durable run: a loop of calls to a tool that
returns an object (a handle, named by its call in the store) or an int (nothing to name), run
without a store, with one, and with one but the naming switched off (the same run before this
change). Medians of interleaved rounds, in microseconds per call, with the machine's load.

    .venv/bin/python benchmarks/bench_durable_handles.py [--rounds 9] [--calls 2000]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Iterator
from typing import Any

from jupyter_sandbox.orchestration import Tool, orchestrate
from jupyter_sandbox.orchestration.durable import _durable


class Frame:
    """An object Monty holds only as a handle."""


def obj() -> object:
    return Frame()


def num() -> int:
    return 1


def _unnamed(*_: Any) -> Iterator[Any]:
    return iter(())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--calls", type=int, default=2000)
    options = parser.parse_args()
    tools = [Tool(obj), Tool(num)]
    named = _durable.result_handles
    modes = ("no store", "store", "store, unnamed")
    times: dict[tuple[str, str], list[float]] = {}
    with tempfile.TemporaryDirectory() as folder:
        for round_ in range(options.rounds):
            for tool in ("num", "obj"):
                for mode in modes:
                    _durable.result_handles = _unnamed if mode == "store, unnamed" else named
                    store = None if mode == "no store" else f"{folder}/{round_}{tool}{mode}.db"
                    code = f"for i in range({options.calls}):\n    {tool}()\n"
                    start = time.perf_counter()
                    orchestrate(code, tools=tools, store=store, type_check=False)
                    per_call = (time.perf_counter() - start) / options.calls * 1e6
                    times.setdefault((tool, mode), []).append(per_call)
    _durable.result_handles = named
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"{'tool returns':14} {'run':16} {'median us/call':>15}")
    for (tool, mode), found in times.items():
        kind = "an object" if tool == "obj" else "an int"
        print(f"{kind:14} {mode:16} {statistics.median(found):15.1f}")


if __name__ == "__main__":
    main()

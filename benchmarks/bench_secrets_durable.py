"""What keeping secrets out of the durable store and the live trace costs once a sandbox tool
has returned one (`_scrub`): every stored record is searched for it, every
checkpoint's dump too, and each live render masks its call previews. Without a secret (the
baseline rows) none of this runs. Medians of interleaved rounds, with the machine's load.

    .venv/bin/python benchmarks/bench_secrets_durable.py [--calls 200] [--rounds 15]
"""

from __future__ import annotations

import argparse
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

from _timing import measure, print_table

from jupyter_sandbox import Store, orchestrate, tool
from jupyter_sandbox._shared import _scrub
from jupyter_sandbox.display._live import LIVE_CALLS, LiveTrace
from jupyter_sandbox.events import CallFinished, CallStarted, ToolCall

SECRET = "ghp_Qv93ZkLm7s3cr3tT0k3n"


def label(i: int) -> str:
    return f"row {i}: " + "x" * 40


def with_secret(known: bool, fn: Callable[[], object]) -> Callable[[], object]:
    """``fn`` run as in a process where a sandbox tool has (or has not) returned a secret."""

    def run() -> object:
        _scrub._returned.clear()
        if known:
            _scrub._returned[SECRET] = None
        try:
            return fn()
        finally:
            _scrub._returned.clear()

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200, help="tool calls per durable run")
    parser.add_argument("--rounds", type=int, default=15)
    options = parser.parse_args()
    code = f"rows = [label(i) for i in range({options.calls})]\nlen(rows)"
    tools = [tool(label)]
    with tempfile.TemporaryDirectory() as folder:
        store = Store(Path(folder) / "store.sqlite")

        def durable() -> object:
            return orchestrate(code, tools=tools, store=store).value

        rows = measure(
            [
                ("durable run, no secret known", with_secret(False, durable)),
                ("durable run, a secret known", with_secret(True, durable)),
            ],
            options.rounds,
        )
        print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        print_table(f"a durable run of {options.calls} calls, per call", rows, per=options.calls)

    trace = LiveTrace()
    for i in range(LIVE_CALLS):
        call = ToolCall(i, "label", (i,), {}, 0.0, 1, 1, origin=0.0)
        trace.on_event(CallStarted(call))
        call.result, call.end = label(i), 0.001
        trace.on_event(CallFinished(call))
    rows = measure(
        [
            ("live render, no secret known", with_secret(False, trace.record)),
            ("live render, a secret known", with_secret(True, trace.record)),
        ],
        options.rounds * 20,
    )
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print_table(f"one live trace render of {LIVE_CALLS} calls", rows)


if __name__ == "__main__":
    main()

"""What the live views cost per tool call: a 100k-call orchestration with and without a view.

    .venv/bin/python benchmarks/bench_display.py [--calls 100000] [--rounds 3]

Rows: the real engine with no view (``on_event`` ignored), with the live trace widget, and with
the text view; plus the view alone fed synthetic events (no engine), which isolates its cost.
Widgets here have no frontend (no comm traffic); in a kernel the throttle sends at most one
update per `UPDATE_INTERVAL`, so the comm cost does not grow with the number of calls.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

from jupyter_sandbox import orchestrate, tool
from jupyter_sandbox._events import CallFinished, CallStarted, Event, ToolCall, ignore
from jupyter_sandbox.display import OrchestrateView


@tool
def add(x: int, y: int) -> int:
    return x + y


def run_engine(n: int, on_event: Callable[[Event], None]) -> None:
    code = f"acc = 0\nfor i in range({n}):\n    acc = add(acc, i)\nacc"
    orchestrate(code, tools=[add], max_calls=n + 1, on_event=on_event)


def feed_view(n: int) -> None:
    view = OrchestrateView(widgets=True)
    for i in range(n):
        call = ToolCall(i, "add", (i, i), {}, start=i * 1e-5)
        view.on_event(CallStarted(call))
        call.end, call.result = call.start + 1e-6, 2 * i
        view.on_event(CallFinished(call))


def median_seconds(fn: Callable[[], object], rounds: int) -> float:
    samples = []
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    n = args.calls
    run_engine(100, ignore)  # warm the worker pool
    rows = {
        "engine, no view": lambda: run_engine(n, ignore),
        "engine + live trace widget": lambda: run_engine(n, OrchestrateView(widgets=True).on_event),
        "engine + text view": lambda: run_engine(n, OrchestrateView(widgets=False).on_event),
        "view alone (synthetic events)": lambda: feed_view(n),
    }
    print(f"{n} tool calls, median of {args.rounds} rounds")
    for label, fn in rows.items():
        seconds = median_seconds(fn, args.rounds)
        print(f"  {label:32} {seconds:7.3f} s  {seconds / n * 1e6:6.2f} us/call")


if __name__ == "__main__":
    main()

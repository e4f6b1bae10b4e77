"""What the live views cost per tool call: a 100k-call orchestration with and without a view.

    .venv/bin/python benchmarks/bench_display.py [--calls 100000] [--rounds 3]

Rows: the real engine with no view (``on_event`` ignored), with the live trace (the growing
record, rendered to its MIME bundle at most every `UPDATE_INTERVAL`), and with the text view;
plus the live view alone fed synthetic events (no engine), which isolates its cost. Outside a
kernel each live update would be printed as text: the bench discards it (`live_view`).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from _timing import measure, print_table

from jupyter_sandbox import Limits, orchestrate, tool
from jupyter_sandbox._shared._events import ignore
from jupyter_sandbox.display import OrchestrateView
from jupyter_sandbox.events import CallFinished, CallStarted, Event, ToolCall


@tool
def add(x: int, y: int) -> int:
    return x + y


def run_engine(n: int, on_event: Callable[[Event], None]) -> None:
    code = f"acc = 0\nfor i in range({n}):\n    acc = add(acc, i)\nacc"
    orchestrate(code, tools=[add], limits=Limits(max_calls=n + 1), on_event=on_event)


def live_view() -> OrchestrateView:
    """A live trace whose displays (printed as text: no kernel here) are discarded."""
    view = OrchestrateView(live=True)
    view._route.show = view._route.replace = lambda data, display_id=None: None
    return view


def feed_view(n: int) -> None:
    view = live_view()
    for i in range(n):
        call = ToolCall(i, "add", (i, i), {}, start=i * 1e-5)
        view.on_event(CallStarted(call))
        call.end, call.result = call.start + 1e-6, 2 * i
        view.on_event(CallFinished(call))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    n = args.calls
    run_engine(100, ignore)  # warm the worker pool
    rows = {
        "engine, no view": lambda: run_engine(n, ignore),
        "engine + live trace": lambda: run_engine(n, live_view().on_event),
        "engine + text view": lambda: run_engine(n, OrchestrateView(live=False).on_event),
        "view alone (synthetic events)": lambda: feed_view(n),
    }
    print_table(
        f"{n} tool calls, median of {args.rounds} interleaved rounds (baseline: no view)",
        measure(list(rows.items()), args.rounds),
        per=n,
    )


if __name__ == "__main__":
    main()

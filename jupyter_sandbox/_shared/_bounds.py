"""How a run's record stays small however much the run did.

Records are saved in the notebook. A 100,000-call cell made a 24 MB record and a 3,000-line print
was stored three times (the stream outputs, the record, its HTML). So a record keeps:

- of each stream, its last `STREAM_TAIL` characters and its size: the cell's stream outputs are
  the copy people read, the tail is for whoever reads a record alone (``err.record``);
- of a long trace, the first and last `KEEP_EDGE` calls and, between them, up to `KEEP_FAILED`
  calls that did not end ok (the ones worth reading), with a per-tool summary computed over
  every call, so counts, errors and times stay true for what was dropped.

Engines and display both use this module: a record saved before these bounds has no summary,
and the renderers compute it from its calls with the same `ToolStats`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TypeVar

from ..records import ToolRow

STREAM_TAIL = 2000
"""Characters of each stream a record keeps (the end, where a failure's last words are)."""

KEEP_EDGE = 100
"""Calls kept from each end of a long trace: how it started and how it ended."""

KEEP_FAILED = 100
"""Calls that did not end ok kept from between the two ends."""

SUMMARY_MIN_CALLS = 10
"""Traces with fewer calls show no per-tool summary: their table says it all."""

Call = TypeVar("Call")


def stream_tail(text: str) -> str:
    """What a record keeps of a stream (its ``name_chars`` is ``len(text)``): the tail starts
    at a line when a line starts within it, so it does not open with half a line."""
    tail = text
    if len(text) > STREAM_TAIL:
        tail = text[-STREAM_TAIL:]
        newline = tail.find("\n")
        if 0 <= newline < len(tail) - 1:
            tail = tail[newline + 1 :]
    return tail


def kept_calls(calls: Sequence[Call], ok: Callable[[Call], bool]) -> list[Call]:
    """The calls a record keeps, in call order: all of them up to `KEEP_EDGE` * 2 + 1."""
    if len(calls) <= 2 * KEEP_EDGE + 1:
        return list(calls)
    middle = calls[KEEP_EDGE:-KEEP_EDGE]
    not_ok = [call for call in middle if not ok(call)][:KEEP_FAILED]
    return [*calls[:KEEP_EDGE], *not_ok, *calls[-KEEP_EDGE:]]


class ToolStats:
    """Per-tool call count, errors and times, fed one call at a time (O(1) each, so a live view
    can keep it for a 100k-call run). `rows` sorts the durations in place: a live view asks for
    rows every 0.2 s, and a list that is sorted but for its newest tail sorts in about linear
    time."""

    def __init__(self) -> None:
        self._calls: dict[str, int] = {}
        self._errors: dict[str, int] = {}
        self._totals: dict[str, float] = {}
        self._durations: dict[str, list[float]] = {}

    def add(self, tool: str, duration: float | None, failed: bool) -> None:
        """One call; ``duration`` None while it runs (counted, but not timed)."""
        self._calls[tool] = self._calls.get(tool, 0) + 1
        self._errors[tool] = self._errors.get(tool, 0) + failed
        if duration is not None:
            self._totals[tool] = self._totals.get(tool, 0.0) + duration
            self._durations.setdefault(tool, []).append(duration)

    def rows(self) -> list[ToolRow]:
        """One row per tool, most total time first: where the run's time went."""
        rows: list[ToolRow] = []
        for tool, count in self._calls.items():
            durations = self._durations.get(tool, [])
            durations.sort()
            rows.append(
                {
                    "tool": tool,
                    "calls": count,
                    "errors": self._errors[tool],
                    "total": self._totals.get(tool, 0.0),
                    "p50": _percentile(durations, 0.50),
                    "p95": _percentile(durations, 0.95),
                }
            )
        return sorted(rows, key=lambda row: (-row["total"], row["tool"]))


def _percentile(ordered: list[float], q: float) -> float | None:
    """Nearest rank: a duration some call really took (None when no call has finished)."""
    if not ordered:
        return None
    return ordered[max(math.ceil(q * len(ordered)) - 1, 0)]

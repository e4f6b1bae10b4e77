"""A run's trace: its tool calls in the order the code made them, made into `ToolCall`
records when someone reads them.

A call nobody watches while the run goes (no live view, store, session, replay, gate or
container: see `Driver._tool_call`) is kept as the bare facts the driver read from Monty, two
tuples (`Plain`), and becomes a `ToolCall` when the trace is first read. Between two resumes
every object the driver touches is cache-cold, and a `ToolCall` with its ``children`` list is
two more objects the garbage collector walks again and again while the run goes; tuples of
plain values the collector stops tracking, so a long loop of calls spends several times less
in collections. A
call recorded as a `ToolCall` from the start (`add`) keeps its place: the plain calls made
before it are made into records first.
"""

from __future__ import annotations

import bisect
from typing import Any

from .._shared._events import ToolCall

Started = tuple[int, str, int, tuple[Any, ...], dict[str, Any], float]
"""A call as it starts: its ``call_id``, tool, byte offset in the code, arguments, and the
``perf_counter`` reading at its start (the arguments of `Trace.call`)."""
Plain = tuple[Started, float, Any]
"""A finished plain call: how it started, the ``perf_counter`` reading at its end, and the
value its tool returned. (Not the snapshot itself: a kept snapshot holds ~0.5 KB more.)"""


class Trace:
    """The calls of one run. ``origin`` is the ``perf_counter`` reading the run's times count
    from (set when the code starts); `keep` takes a finished `Plain` call."""

    __slots__ = ("_calls", "_code", "_line_starts", "_plain", "keep", "origin")

    def __init__(self, code: str) -> None:
        self._code = code
        self._line_starts: list[int] | None = None
        self._calls: list[ToolCall] = []
        self._plain: list[Plain] = []
        self.keep = self._plain.append
        """Keep a finished plain call (a bound method: the hot path makes no call of ours)."""
        self.origin = 0.0

    def calls(self) -> list[ToolCall]:
        """Every call as a `ToolCall`, in the order they were made (the list itself: the
        driver and a paused run's cleanup may change it)."""
        plain = self._plain
        if plain:
            # By count, not `clear`: a run still going (its driver ignoring an interrupt
            # for a while) may keep calls meanwhile; they stay for the next read.
            made = len(plain)
            for started, end, value in plain[:made]:
                call = self.call(*started)
                call.end, call.result = end - self.origin, value
                self._calls.append(call)
            del plain[:made]
        return self._calls

    def replace(self, calls: list[ToolCall]) -> None:
        """Make ``calls`` the whole trace."""
        self._plain.clear()
        self._calls = calls

    def add(self, call: ToolCall) -> None:
        """Append ``call``, after the plain calls made before it."""
        self.calls().append(call)

    def call(
        self,
        call_id: int,
        tool: str,
        offset: int,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        start: float,
    ) -> ToolCall:
        """A new record of a call made at byte ``offset`` of the code, started at
        ``perf_counter`` reading ``start`` (a `Started`)."""
        line, column = self.position(offset)
        origin = self.origin
        # positional: call_id, tool, args, kwargs, start, line, column (faster than keywords)
        return ToolCall(call_id, tool, args, kwargs, start - origin, line, column, origin=origin)

    def position(self, offset: int) -> tuple[int, int]:
        """The 1-based line and column of byte ``offset`` in the code (Monty reports bytes)."""
        starts = self._line_starts
        if starts is None:
            starts = self._line_starts = _line_starts(self._code)
        index = bisect.bisect_right(starts, offset) - 1
        return index + 1, offset - starts[index] + 1


def _line_starts(code: str) -> list[int]:
    """Byte offsets where each line of ``code`` starts."""
    starts = [0]
    for i, byte in enumerate(code.encode()):
        if byte == 0x0A:
            starts.append(i + 1)
    return starts

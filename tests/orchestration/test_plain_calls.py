"""Plain tool calls (a sync tool in a run nobody watches) are recorded as tuples and made into
`ToolCall`s when the trace is read (`orchestration/_trace.py`): the trace must be the one an
observed run records, in the order the calls were made, and Ctrl-C must still abandon a plain
call blocked on the host. Real Monty workers, no IPython."""

from __future__ import annotations

import os
import signal
import threading
from typing import Any

import pytest

from jupyter_sandbox import Interrupted, LimitExceeded, Limits, ToolError, orchestrate
from jupyter_sandbox.events import CallFinished, CallStarted
from jupyter_sandbox.orchestration import Tool

CODE = """\
a = add(1, 2)
b = add(a,
        y=3)
try:
    fail('no')
except ValueError:
    pass
c = await twice(b)
d = checked(c)
add(d, y=1)
"""


def add(x: int, y: int) -> int:
    return x + y


def fail(message: str) -> int:
    raise ValueError(message)


async def twice(x: int) -> int:
    return 2 * x


def tools() -> list[Any]:
    """Plain (`add`, `fail`) and observed (`twice` is async, `checked` is gated) tools."""
    return [add, fail, twice, Tool(lambda x: x + 1, name="checked", approve=True)]


def facts(result: Any) -> list[tuple[Any, ...]]:
    return [
        (c.call_id, c.tool, c.args, c.kwargs, c.line, c.column, c.result, c.error, c.replayed)
        for c in result.trace
    ]


def test_plain_and_observed_calls_stay_in_the_order_the_code_made_them():
    result = orchestrate(CODE, tools=tools(), approver=lambda call: True, type_check=False)
    assert result.value == 14
    assert [c.tool for c in result.trace] == ["add", "add", "fail", "twice", "checked", "add"]
    assert facts(result)[:3] == [
        (0, "add", (1, 2), {}, 1, 5, 3, None, False),
        (1, "add", (3,), {"y": 3}, 2, 5, 6, None, False),
        (2, "fail", ("no",), {}, 5, 5, None, "ValueError: no", False),
    ]
    assert "raise ValueError(message)" in (result.trace[2].host_traceback or "")
    ends = [(c.start, c.end) for c in result.trace]
    assert all(start is not None and end is not None and start <= end for start, end in ends)
    assert [start for start, _ in ends] == sorted(start for start, _ in ends)
    assert {c.origin for c in result.trace} == {result.trace[0].origin}
    assert result.trace is result.trace  # made once: the records are the same objects


def test_a_plain_run_records_what_a_watched_run_records():
    events: list[Any] = []
    options: dict[str, Any] = {"tools": tools(), "approver": lambda call: True}
    plain = orchestrate(CODE, type_check=False, **options)
    watched = orchestrate(CODE, type_check=False, on_event=events.append, **options)
    assert facts(plain) == facts(watched)
    started = [e.call for e in events if isinstance(e, CallStarted)]
    finished = [e.call for e in events if isinstance(e, CallFinished)]
    assert started == finished == watched.trace  # the views held the records of the trace
    assert plain.to_record()["calls"] == [
        {**call, "start": plain.trace[i].start, "end": plain.trace[i].end}
        for i, call in enumerate(watched.to_record()["calls"])
    ]


def test_a_failed_run_carries_its_plain_calls():
    with pytest.raises(ToolError) as info:
        orchestrate("x = add(1, 2)\ny = add(x, 3)\nfail(str(y))", tools=tools(), type_check=False)
    trace = info.value.result.trace
    assert [(c.tool, c.result, c.error) for c in trace] == [
        ("add", 3, None),
        ("add", 6, None),
        ("fail", None, "ValueError: 6"),
    ]


def test_the_call_limit_counts_plain_calls():
    with pytest.raises(LimitExceeded) as info:
        orchestrate("for i in range(10):\n    add(i, i)", tools=[add], limits=Limits(max_calls=5))
    assert info.value.limit == "calls"
    assert [c.args for c in info.value.result.trace] == [(i, i) for i in range(5)]


def test_ctrl_c_abandons_a_plain_call_blocked_on_the_host_after_earlier_calls():
    release, blocked = threading.Event(), threading.Event()

    def hang(x: int) -> int:
        blocked.set()
        release.wait(60)
        return x

    def interrupt() -> None:
        if blocked.wait(30):
            os.kill(os.getpid(), signal.SIGINT)

    timer = threading.Thread(target=interrupt)
    timer.start()
    try:
        with pytest.raises(Interrupted) as info:
            orchestrate("a = add(1, 2)\nb = add(a, 3)\nhang(b)", tools=[add, hang])
        assert not release.is_set()  # it returned while the tool was still blocked
    finally:
        release.set()
        timer.join()
    assert "the call to hang(), still running on the host, was abandoned" in str(info.value)
    trace = info.value.result.trace
    assert [(c.tool, c.args) for c in trace] == [("add", (1, 2)), ("add", (3, 3)), ("hang", (6,))]
    assert trace[2].error is not None and trace[2].error.startswith("Abandoned:")
    assert trace[2].end is not None and trace[2].line == 3
    assert orchestrate("add(2, 2)", tools=[add]).value == 4  # the next run works

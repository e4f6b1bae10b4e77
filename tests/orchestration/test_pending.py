"""How async calls cross to the tool loop (`_pending`): in batches while others are out, at
once when none is, and never left behind. Real Monty workers, the real tool loop."""

from __future__ import annotations

import asyncio
import gc
import threading
import time
import warnings

import pytest

from jupyter_sandbox import ToolError, orchestrate
from jupyter_sandbox.events import Output
from jupyter_sandbox.orchestration import _pending


def test_a_batched_call_starts_before_a_sync_tool_blocks_the_driver(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # `second` is made while `first` is out, so it waits in a batch (for as long as the
    # driver keeps going: BATCH_FOR is raised so no clock hands it over); the sync tool that
    # waits for it must not block the driver before the batch went to the loop.
    monkeypatch.setattr(_pending, "BATCH_FOR", 3600.0)
    started = threading.Event()

    async def first() -> int:
        await asyncio.sleep(0.2)
        return 1

    async def second() -> int:
        started.set()
        return 2

    def block() -> bool:
        return started.wait(10)

    code = "a = first()\nb = second()\nok = block()\n[ok, await a, await b]"
    result = orchestrate(code, tools=[first, second, block], type_check=False)
    assert result.value == [True, 1, 2]
    assert [c.status for c in result.trace] == ["ok", "ok", "ok"]


def test_a_run_that_fails_with_calls_not_yet_handed_over_closes_and_records_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_pending, "BATCH_FOR", 3600.0)
    ran: list[int] = []

    async def wait(i: int) -> int:
        ran.append(i)
        await asyncio.sleep(60)
        return i

    code = "a = wait(1)\nb = wait(2)\nc = wait(3)\nraise ValueError('stop')"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(Exception, match="stop") as info:
            orchestrate(code, tools=[wait], type_check=False)
        gc.collect()  # a coroutine dropped unclosed warns "never awaited" when collected
    assert not [w for w in caught if "never awaited" in str(w.message)]
    trace = info.value.result.trace  # type: ignore[attr-defined]
    assert [c.status for c in trace] == ["cancelled"] * 3
    assert ran == [1]  # the first went at once (nothing was out); the batch never started


def test_many_calls_gathered_are_each_answered_and_recorded_once() -> None:
    async def echo(i: int) -> int:
        await asyncio.sleep(0.01 * (i % 7))  # finish out of order, in several waves
        return i

    code = "import asyncio\nawait asyncio.gather(*[echo(i) for i in range(300)])"
    result = orchestrate(code, tools=[echo], type_check=False)
    assert result.value == list(range(300))
    assert sorted(c.args[0] for c in result.trace) == list(range(300))
    assert all(c.status == "ok" and c.result == c.args[0] for c in result.trace)


def test_an_async_tool_raising_keyboard_interrupt_fails_its_call_and_the_loop_lives() -> None:
    async def boom() -> None:
        raise KeyboardInterrupt

    async def fine() -> int:
        return 1

    with pytest.raises(ToolError, match="raised KeyboardInterrupt"):
        orchestrate("await boom()", tools=[boom], type_check=False)
    code = "try:\n    await boom()\nexcept Exception:\n    r = 'caught'\n[r, await fine()]"
    assert orchestrate(code, tools=[boom, fine], type_check=False).value == ["caught", 1]


def test_a_batched_call_starts_while_the_code_computes_with_no_driver_action(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # `second` waits in a batch (`first` is out) while Monty computes for a while without
    # stopping at any call: the loop's own timer must start it meanwhile, not the driver's
    # next action. The end of the computation is read from its print, which reaches the
    # host as it happens without the driver doing anything else.
    monkeypatch.setattr(_pending, "BATCH_FOR", 0.01)
    seen: dict[str, float] = {}

    async def first() -> int:
        await asyncio.sleep(0.1)
        return 1

    async def second() -> int:
        seen["second ran"] = time.perf_counter()
        return 2

    def on_event(event: object) -> None:
        if isinstance(event, Output) and "computed" in event.text:
            seen["computed"] = time.perf_counter()

    code = (
        "a = first()\nb = second()\nx = 0\nfor i in range(2_000_000):\n    x += i\n"
        "print('computed')\n[await a, await b]"
    )
    result = orchestrate(code, tools=[first, second], type_check=False, on_event=on_event)
    assert result.value == [1, 2]
    assert seen["second ran"] < seen["computed"]

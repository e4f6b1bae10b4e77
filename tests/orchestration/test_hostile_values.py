"""An adversarial review of `%%orchestrate` after its hardening: what still broke.

Each test attacks one promise the way untrusted orchestration code, a faulty tool or a hostile
value would, against real Monty workers and a real IPython shell. No Monty is mocked and no
test asserts a time; where a bound appears it only keeps a regression from hanging the suite.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import re
import resource
import threading
from collections.abc import Callable
from typing import Any, ClassVar

import pytest

from jupyter_sandbox import LimitExceeded, OrchestrationError, ToolError
from jupyter_sandbox.orchestration import (
    Journal,
    Limits,
    ToolCache,
    orchestrate,
    orchestrate_async,
    tool,
)
from jupyter_sandbox.orchestration._workers import WORKERS

SECRET = "s3cret-attr-91c4"
HANG_GUARD = 60.0
"""Seconds before a wait gives up: only there so a regression fails instead of hanging."""


def bounded(run: Callable[[], Any]) -> Any:
    """``run()`` on a daemon thread; its result or exception, or a failure if it hangs (the
    attacks below used to spin or wedge the tool loop forever)."""
    done: concurrent.futures.Future[Any] = concurrent.futures.Future()

    def target() -> None:
        try:
            done.set_result(run())
        except BaseException as exc:  # SystemExit too: the test reports it, not the thread
            done.set_exception(exc)

    threading.Thread(target=target, daemon=True).start()
    try:
        return done.result(timeout=HANG_GUARD)
    except concurrent.futures.TimeoutError:
        pytest.fail(f"still running after {HANG_GUARD:g} s")


class Opaque:
    """A host object with something to steal, and a method that must never run."""

    secret = SECRET
    touched: ClassVar[list[str]] = []

    def __init__(self) -> None:
        Opaque.touched.append("constructed")

    def method(self) -> str:
        Opaque.touched.append("method")
        return SECRET

    def __repr__(self) -> str:
        return f"<Opaque {SECRET}>"


class ExitOnStr(Exception):
    """A tool's exception whose `__str__` raises `SystemExit` (a CLI helper's error type)."""

    def __str__(self) -> str:
        raise SystemExit(3)


class ExitOnRepr:
    """A tool's object whose `__repr__` raises `SystemExit`."""

    def __repr__(self) -> str:
        raise SystemExit(4)


class LazyProxy:
    """A lazy proxy (like an unbound context-local): asking its `__class__` raises."""

    @property  # type: ignore[misc]
    def __class__(self) -> type:  # the attack
        raise RuntimeError("proxy not bound")


class FakeTuple:
    """Claims to be a named tuple through `__class__`, and iterates without end."""

    __class__ = tuple  # type: ignore[assignment]
    _fields = ("a",)

    def __iter__(self) -> Any:
        while True:
            yield 1

    def __len__(self) -> int:
        return 1


# -- a handle cannot be read, called or constructed, however it is spelled -------------------

HANDLE_READS = {
    "format attribute": "'{0.secret}'.format(get())",
    "format method": "'{0.method}'.format(get())",
    "getattr computed name": "getattr(get(), 'sec' + 'ret')",
    "method call": "get().method()",
    "getattr method call": "getattr(get(), 'me' + 'thod')()",
    "class attribute": "type(get()).secret",
    "class method on handle": "type(get()).method(get())",
    "class constructed": "type(get())()",
}


@pytest.mark.parametrize("name", HANDLE_READS)
def test_a_handle_cannot_be_read_called_or_constructed_however_spelled(name):
    Opaque.touched.clear()
    handle = Opaque.__new__(Opaque)

    def get() -> object:
        return handle

    with pytest.raises(OrchestrationError) as caught:
        orchestrate(HANDLE_READS[name], tools=[get], type_check=False)
    assert SECRET not in str(caught.value)
    assert Opaque.touched == []


def test_printing_a_handle_shows_no_host_repr():
    def get() -> object:
        return Opaque.__new__(Opaque)

    result = orchestrate("print(get(), repr(get()), f'{get()!r}')\nstr(get())", tools=[get])
    assert SECRET not in result.stdout and SECRET not in result.value


def test_a_handles_class_reaches_a_tool_as_its_name_and_class_only():
    """The accepted limit (`_values`' docstring): the code learns a handle's class name and
    can hand ``type(h)`` to a tool; nothing is constructed, called or read on the way."""
    Opaque.touched.clear()
    received: list[object] = []

    def get() -> object:
        return Opaque.__new__(Opaque)

    def take(x: object) -> bool:
        received.append(x)
        return True

    result = orchestrate("t = type(get())\ntake(t)\nstr(t) + ' ' + str(get())", tools=[get, take])
    assert result.value == "<class 'Opaque'> Opaque()"
    assert received == [Opaque] and Opaque.touched == []


# -- a tool's exception or object cannot break the run, whatever its dunders raise ------------


def test_a_tool_exception_whose_str_raises_system_exit_is_that_calls_tool_error():
    def boom() -> None:
        raise ExitOnStr()

    with pytest.raises(ToolError, match="ExitOnStr") as caught:
        orchestrate("boom()", tools=[boom])
    assert "\n" not in str(caught.value)
    caught_inside = orchestrate(
        "try:\n    boom()\nexcept Exception as e:\n    x = str(e)\nx", tools=[boom]
    )
    assert "ExitOnStr" in caught_inside.value


def test_an_async_tool_exception_whose_str_raises_system_exit_leaves_the_tool_loop_serving():
    async def boom() -> None:
        raise ExitOnStr()

    async def fine() -> int:
        await asyncio.sleep(0)
        return 7

    with pytest.raises(ToolError, match="ExitOnStr"):
        bounded(lambda: orchestrate("await boom()", tools=[boom]))
    assert bounded(lambda: orchestrate("await fine()", tools=[fine])).value == 7


def test_an_exception_argument_whose_repr_raises_system_exit_is_that_calls_tool_error():
    def boom() -> None:
        raise ValueError(ExitOnRepr())

    with pytest.raises(ToolError, match="ValueError"):
        orchestrate("boom()", tools=[boom])


def test_a_tool_object_whose_repr_raises_system_exit_leaves_the_magic_working(shell):
    tool(ExitOnRepr, name="exit_on_repr")  # the trace previews what the call returned
    outcome = shell.run_cell("%%orchestrate\nx = exit_on_repr()\n1")
    assert outcome.error_in_exec is None
    assert outcome.result == 1


@pytest.mark.parametrize("make", [LazyProxy, FakeTuple], ids=["raising-class", "lying-class"])
def test_a_value_whose_class_attribute_raises_or_lies_crosses_as_a_handle(make):
    value = make()

    def get() -> object:
        return value

    def check(x: object) -> bool:
        return x is value

    def run(**options: Any) -> Any:
        return bounded(lambda: orchestrate("check(get())", tools=[get, check], **options).value)

    assert run() is True
    assert bounded(lambda: orchestrate("get()", tools=[get]).value) is value  # the cell's value
    journal = Journal()  # resuming compares the journal's arguments with the new ones
    run(journal=journal)
    assert run(journal=journal, resume=True) is True
    assert run(cache=ToolCache()) is True


# -- limits: every way of going past them names the limit ------------------------------------


def test_one_native_step_past_the_timeout_is_the_time_limit():
    with pytest.raises(LimitExceeded, match=re.escape("Limits(timeout=...)")) as caught:
        orchestrate("x = 10**10**8\nx > 0", limits=Limits(timeout=1))
    assert caught.value.limit == "time"
    assert orchestrate("1 + 1").value == 2


@pytest.mark.parametrize(
    "cell",
    [
        "x = 10**4000\n[x] * 10**6",
        "from decimal import Decimal\nx = Decimal('1' * 4000)\n[x] * 10**4",
    ],
    ids=["big-int", "long-decimal"],
)
def test_a_result_of_shared_long_numbers_is_refused_by_max_result(cell):
    # Each number writes out to 4000 characters: the value is gigabytes once displayed.
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    with pytest.raises(LimitExceeded, match=re.escape("Limits(max_result=...)")) as caught:
        orchestrate(cell)
    assert caught.value.limit == "result"
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 - before < 300


def test_a_result_sharing_a_handle_with_a_long_repr_is_refused_by_max_result():
    """A handle counted 8 bytes whatever its repr: the code could share one handle with a
    long repr (a DataFrame, a bytearray) a million times and the display wrote it each time."""

    def blob() -> object:
        return bytearray(1000)  # a handle whose repr is 4 KB

    # 10,000 references: 40 MB once written out, past a 1 MB --max-result.
    with pytest.raises(LimitExceeded, match=re.escape("Limits(max_result=...)")):
        orchestrate("b = blob()\n[[b] * 1000] * 10", tools=[blob], limits=Limits(max_result=1))
    # The same handle a hundred times (400 KB) is within the limit, and comes back as itself.
    value = orchestrate("b = blob()\n[b] * 100", tools=[blob], limits=Limits(max_result=1)).value
    assert len(value) == 100 and all(b is value[0] for b in value)


def test_a_handle_past_max_result_is_refused_without_writing_its_repr():
    big = bytearray(8 * 2**20)  # its repr would be 32 MB

    def blob() -> object:
        return big

    with pytest.raises(LimitExceeded, match=re.escape("Limits(max_result=...)")):
        orchestrate("blob()", tools=[blob], limits=Limits(max_result=1))


@pytest.mark.parametrize("make", [ExitOnRepr, LazyProxy], ids=["repr-exits", "class-raises"])
def test_a_returned_handle_whose_repr_or_class_raises_is_the_cells_value(make):
    value = make()

    def get() -> object:
        return value

    assert bounded(lambda: orchestrate("[get()] * 3", tools=[get]).value) == [value] * 3


@pytest.mark.parametrize("levels", [WORKERS, 3 * WORKERS], ids=["a-pool-full", "three-pools"])
def test_orchestrate_nested_through_a_tools_own_thread_works_or_fails_at_once(levels):
    """Nesting is counted through a context variable, which a plain thread does not
    inherit: a tool that ran orchestrate() on a thread of its own (an executor,
    run_in_executor) nested on the cells' pool and deadlocked it once every worker was held.
    ``WORKERS`` levels: one run per worker, and one more that could only wait for one."""

    def nest(level: int) -> Any:
        code = "1" if level == levels else f"nest({level + 1})"
        done: concurrent.futures.Future[Any] = concurrent.futures.Future()

        def target() -> None:
            try:
                done.set_result(orchestrate(code, tools=[nest]).value)
            except BaseException as exc:
                done.set_exception(exc)

        threading.Thread(target=target, daemon=True).start()
        return done.result()

    async def scenario() -> Any:
        run = asyncio.ensure_future(orchestrate_async("nest(1)", tools=[nest]))
        try:
            # Generous for four runs of `1`; a deadlock would wait forever.
            return (await asyncio.wait_for(asyncio.shield(run), 10.0)).value
        except LimitExceeded as exc:
            return exc.limit
        except TimeoutError:
            run.cancel()  # frees the cell's worker: the waiting run takes it and all unwind
            with pytest.raises(asyncio.CancelledError):
                await run
            return "hung"

    outcome = asyncio.run(scenario())
    assert bounded(lambda: orchestrate("1 + 1").value) == 2  # the cancel freed the workers
    assert outcome in (1, "nesting")


def test_more_independent_runs_than_workers_all_finish():
    """Runs with no known parent spill to pools with a free worker (the fix above): runs
    started side by side, more than every spare pool holds, still all finish."""

    async def slow(x: int) -> int:
        await asyncio.sleep(0.2)
        return x

    async def scenario() -> list[Any]:
        runs = [
            orchestrate_async("await slow(x)", tools=[slow], inputs={"x": i}) for i in range(10)
        ]
        return [r.value for r in await asyncio.wait_for(asyncio.gather(*runs), HANG_GUARD)]

    assert asyncio.run(scenario()) == list(range(10))

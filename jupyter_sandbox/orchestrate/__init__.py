"""The orchestration engine: Python run in Monty that can call only registered tools.

No IPython here: the magic is a thin shell over `orchestrate`. Each call checks out a fresh
Monty session (no state leaks between cells), drives it on a worker thread and waits on the
calling thread, which therefore stays interruptible.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from .._checks import MAX_TIMEOUT, bounded
from .._errors import Interrupted
from .._events import EventCallback, ignore
from ._driver import MAX_NESTING, Driver
from ._limits import Limits, resolve_limits
from ._memo import Journal, ToolCache
from ._replay import Answers
from ._result import OrchestrationResult
from ._runtime import tool_loop
from ._sessions import sessions
from ._stubs import build_stubs
from ._tools import Tool, ToolRegistry, registry, resolve_tools, tool

__all__ = [
    "MAX_NESTING",
    "Journal",
    "Limits",
    "OrchestrationResult",
    "Tool",
    "ToolCache",
    "ToolRegistry",
    "build_stubs",
    "orchestrate",
    "orchestrate_async",
    "orchestrate_local",
    "registry",
    "tool",
]


_DRIVER_WAIT = 15.0
"""Seconds an interrupted run waits for its driver to cancel its pending async tool calls
(a sandbox tool stops and removes its container). A driver blocked in a sync tool is not
waited for: it is abandoned at once."""

Tools = Iterable[Callable[..., Any]] | Mapping[str, Callable[..., Any]] | None


def _driver(loop: asyncio.AbstractEventLoop, options: Mapping[str, Any]) -> Driver:
    """A `Driver` for one run of `orchestrate` or `orchestrate_async`, whose parameters are the
    same: ``options`` is their ``locals()`` taken first thing, so the two cannot drift apart."""
    o = dict(options)
    answers = None
    if o["cache"] is not None or (o["journal"] is not None and o["resume"]):
        journal = o["journal"]
        records = dict(enumerate(journal.calls)) if journal is not None and o["resume"] else {}
        answers = Answers(records, o["cache"])
    return Driver(
        o["code"],
        resolve_tools(o["tools"]),
        o["inputs"] or {},
        resolve_limits(
            o["limits"],
            timeout=o["timeout"],
            max_memory=o["max_memory"],
            max_calls=o["max_calls"],
            max_result=o["max_result"],
            max_output=o["max_output"],
        ),
        type_check=o["type_check"],
        on_event=o["on_event"] or ignore,
        loop=loop,
        journal=o["journal"],
        answers=answers,
        session=sessions.open(o["session"], scope=o["scope"], store=None)
        if o["session"] is not None
        else None,
    )


def _start(driver: Driver) -> concurrent.futures.Future[OrchestrationResult]:
    """Run the driver on its own thread; its outcome lands in ``driver.future`` (unless
    `Driver.stop` settled it first, abandoning the thread)."""
    future = driver.future

    def target() -> None:
        with contextlib.suppress(concurrent.futures.InvalidStateError):
            try:
                future.set_result(driver.run())
            except BaseException as exc:
                future.set_exception(exc)

    threading.Thread(target=target, name="jupyter-sandbox-driver", daemon=True).start()
    return future


def orchestrate(
    code: str,
    *,
    tools: Tools = None,
    inputs: Mapping[str, Any] | None = None,
    limits: Limits | None = None,
    timeout: float | None = None,
    max_memory: int | None = None,
    max_calls: int | None = None,
    max_result: int | None = None,
    max_output: int | None = None,
    type_check: bool = True,
    on_event: EventCallback | None = None,
    journal: Journal | None = None,
    resume: bool = False,
    cache: ToolCache | None = None,
    session: str | None = None,
    scope: str = "default",
) -> OrchestrationResult:
    """Run ``code`` in the Monty sandbox, where it can call only ``tools``.

    ``tools`` is a list of functions/`Tool` objects or a name->function mapping; None means
    every tool registered with ``@tool``. ``inputs`` are bound as globals. The value of the
    last expression is ``result.value``; prints go to ``result.stdout`` and, as they happen,
    to ``on_event`` as `Output` events, along with `CallStarted`/`CallFinished` for each call.
    ``limits`` bounds the run (`Limits()`, the defaults, when None); ``timeout``,
    ``max_memory``, ``max_calls``, ``max_result`` and ``max_output`` set one field each and
    win over the same field of ``limits``.
    Raises an `OrchestrationError` subclass on failure; Ctrl-C stops the run within a second,
    even while a sync tool runs: that call is recorded as abandoned and its thread left to
    finish on its own (Python cannot stop a thread), while its worker goes back to the pool.

    A tool may itself call ``orchestrate``, up to `MAX_NESTING` levels below the cell; a
    deeper call raises `LimitExceeded` at once. Any exception a tool raises, ``SystemExit``
    and ``KeyboardInterrupt`` included, is that call's failure: the code sees it as the
    nearest builtin exception Monty knows (a plain ``Exception`` for those two), and uncaught
    it ends the run as a `ToolError`.

    ``journal`` records this run's tool calls; with ``resume=True`` the calls its previous run
    completed are answered from it (same tool, arguments and order) instead of being made
    again. ``cache`` answers calls by tool and arguments across runs. Both mark such calls
    ``replayed`` in the trace.

    ``session`` names a session: the code starts with the variables, functions and classes
    the last completed run of that session (in ``scope``, a notebook) left, and the type
    check knows them; the run leaves its own for the next. Limits apply to this run alone.
    """
    driver = _driver(tool_loop(), locals())
    future = _start(driver)
    try:
        return future.result()
    except KeyboardInterrupt:
        # Only the kernel's SIGINT lands here: a tool raising KeyboardInterrupt does so on
        # the driver's thread or the tool loop, where it is that call's failure.
        if not driver.stop():
            # Let the driver cancel what it started (a sandbox tool's container is stopped
            # and removed on cancel).
            with contextlib.suppress(Exception):
                future.result(timeout=_DRIVER_WAIT)
        # The driver's own account when it has settled (it names an abandoned call); the
        # record says interrupted either way.
        settled = future.exception() if future.done() else None
        if isinstance(settled, Interrupted):
            raise settled from None
        raise driver._fail(Interrupted("interrupted: the interpreter was stopped")) from None


async def orchestrate_async(
    code: str,
    *,
    tools: Tools = None,
    inputs: Mapping[str, Any] | None = None,
    limits: Limits | None = None,
    timeout: float | None = None,
    max_memory: int | None = None,
    max_calls: int | None = None,
    max_result: int | None = None,
    max_output: int | None = None,
    type_check: bool = True,
    on_event: EventCallback | None = None,
    journal: Journal | None = None,
    resume: bool = False,
    cache: ToolCache | None = None,
    session: str | None = None,
    scope: str = "default",
) -> OrchestrationResult:
    """`orchestrate` for a running event loop: async tools run on this loop, so they may use
    clients bound to it; cancelling the awaiting task stops the sandbox."""
    driver = _driver(asyncio.get_running_loop(), locals())
    try:
        return await asyncio.wrap_future(_start(driver))
    except asyncio.CancelledError:
        driver.stop()
        raise


async def orchestrate_local(
    source: str,
    *,
    inputs: Mapping[str, Any],
    tasks: Tools = None,
    timeout_ms: int = 30_000,
) -> Any:
    """Flyte's ``flyte.sandbox.orchestrate_local``, same parameters: run ``source`` with
    ``tasks`` as its tools and return its value. ``timeout_ms`` is `Limits.timeout` in
    milliseconds; every other limit is its default (`orchestrate_async` takes them all)."""
    milliseconds = bounded(
        timeout_ms,
        "timeout_ms",
        low=0,
        strict_low=True,
        high=MAX_TIMEOUT * 1000,
        unit="ms",
        why_high="30 days",
    )
    result = await orchestrate_async(
        source, tools=tasks, inputs=inputs, timeout=milliseconds / 1000
    )
    return result.value

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
from ._result import OrchestrationResult
from ._runtime import tool_loop
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


def _driver(
    code: str,
    *,
    tools: Tools,
    inputs: Mapping[str, Any] | None,
    limits: Limits,
    type_check: bool,
    on_event: EventCallback | None,
    loop: asyncio.AbstractEventLoop,
    journal: Journal | None,
    resume: bool,
    cache: ToolCache | None,
) -> Driver:
    """A `Driver` for one run, the public defaults filled in (keywords only: two of these
    are bools a positional call would swap unnoticed)."""
    return Driver(
        code,
        resolve_tools(tools),
        inputs or {},
        limits,
        type_check=type_check,
        on_event=on_event or ignore,
        loop=loop,
        journal=journal,
        resume=resume,
        cache=cache,
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
    """
    driver = _driver(
        code,
        tools=tools,
        inputs=inputs,
        limits=resolve_limits(
            limits,
            timeout=timeout,
            max_memory=max_memory,
            max_calls=max_calls,
            max_result=max_result,
            max_output=max_output,
        ),
        type_check=type_check,
        on_event=on_event,
        loop=tool_loop(),
        journal=journal,
        resume=resume,
        cache=cache,
    )
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
) -> OrchestrationResult:
    """`orchestrate` for a running event loop: async tools run on this loop, so they may use
    clients bound to it; cancelling the awaiting task stops the sandbox."""
    driver = _driver(
        code,
        tools=tools,
        inputs=inputs,
        limits=resolve_limits(
            limits,
            timeout=timeout,
            max_memory=max_memory,
            max_calls=max_calls,
            max_result=max_result,
            max_output=max_output,
        ),
        type_check=type_check,
        on_event=on_event,
        loop=asyncio.get_running_loop(),
        journal=journal,
        resume=resume,
        cache=cache,
    )
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

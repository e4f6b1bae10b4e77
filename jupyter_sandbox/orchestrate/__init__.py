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

from .._errors import Interrupted
from .._events import EventCallback, ignore
from ._driver import MAX_NESTING, Driver
from ._limits import Limits
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
    timeout: float = 30.0,
    max_memory: int = 256,
    max_calls: int = 100_000,
    max_result: int = 16,
    max_output: int = 8,
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
    ``max_result`` and ``max_output`` bound, in MB, the value as written out and what the
    code prints (see `Limits`).
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
    limits = Limits(timeout, max_memory, max_calls, max_result, max_output)
    driver = _driver(
        code, tools, inputs, limits, type_check, on_event, tool_loop(), journal, resume, cache
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
        error = Interrupted("interrupted: the sandbox was stopped")
        error.result = driver.result
        raise error from None


async def orchestrate_async(
    code: str,
    *,
    tools: Tools = None,
    inputs: Mapping[str, Any] | None = None,
    timeout: float = 30.0,
    max_memory: int = 256,
    max_calls: int = 100_000,
    max_result: int = 16,
    max_output: int = 8,
    type_check: bool = True,
    on_event: EventCallback | None = None,
    journal: Journal | None = None,
    resume: bool = False,
    cache: ToolCache | None = None,
) -> OrchestrationResult:
    """`orchestrate` for a running event loop: async tools run on this loop, so they may use
    clients bound to it; cancelling the awaiting task stops the sandbox."""
    limits = Limits(timeout, max_memory, max_calls, max_result, max_output)
    loop = asyncio.get_running_loop()
    driver = _driver(
        code, tools, inputs, limits, type_check, on_event, loop, journal, resume, cache
    )
    try:
        return await asyncio.wrap_future(_start(driver))
    except asyncio.CancelledError:
        driver.stop()
        raise


async def orchestrate_local(
    code: str,
    inputs: Mapping[str, Any] | None = None,
    tasks: Tools = None,
    **options: Any,
) -> Any:
    """Flyte's ``flyte.sandbox.orchestrate_local`` signature: run and return the value."""
    result = await orchestrate_async(code, tools=tasks, inputs=inputs, **options)
    return result.value

"""Blocking work awaited from an event loop, on a thread of its own.

``asyncio.to_thread`` shares the loop's default executor: ``min(32, cpus + 4)`` threads, 6 on
a 2-core host, so a ``gather`` of 16 sandbox runs (each blocked on its container) would run 6
at a time whatever the tool's ``concurrency`` says. A container run holds its thread far longer
than a thread takes to start, so a thread per run costs nothing that shows; the callers' own
limits (a tool's ``concurrency``) bound how many there are.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


async def in_thread(fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """``await asyncio.to_thread(fn, ...)``, on a new thread instead of the shared pool."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()
    context = contextvars.copy_context()

    def settle(result: Any, error: BaseException | None) -> None:
        if future.done():  # the awaiting task was cancelled meanwhile
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)

    def work() -> None:
        result: Any = None
        error: BaseException | None = None
        try:
            result = context.run(fn, *args, **kwargs)
        except BaseException as exc:  # handed to the awaiting task
            error = exc
        with contextlib.suppress(RuntimeError):  # the loop closed: nobody waits any more
            loop.call_soon_threadsafe(settle, result, error)

    name = f"in_thread:{getattr(fn, '__name__', 'call')}"
    threading.Thread(target=work, name=name, daemon=True).start()
    return await future

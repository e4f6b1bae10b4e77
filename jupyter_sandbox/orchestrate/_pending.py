"""The async calls a run has in flight: what the code awaits as Monty futures.

An async tool's coroutine runs on an event loop (the tool loop, or the caller's own with
``orchestrate_async``) while the code goes on; Monty holds a future for it under the call's
``call_id`` and stops at a `FutureSnapshot` when every task waits. `Pending` keeps those
futures (with the `ToolCall` each belongs to), waits for the first of them to finish, and when
the run ends cancels what is left and waits for it to wind down: a sandbox tool stops and
removes its container on cancel, so no container outlives the run that started it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
from collections.abc import Coroutine
from typing import Any

from .._events import ToolCall
from ._failures import describe

CLEANUP_WAIT = 10.0
"""Seconds a stopping run waits for its cancelled async tool calls to wind down."""

Entry = tuple[concurrent.futures.Future[Any], ToolCall | None]
"""A pending future and its call (None for a sleep the code awaits)."""


class Pending:
    """One run's futures by Monty ``call_id``, and the tasks behind them."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._entries: dict[int, Entry] = {}
        self._tasks: list[asyncio.Task[Any]] = []

    def submit(self, coro: Coroutine[Any, Any, Any]) -> concurrent.futures.Future[Any]:
        """Run ``coro`` on the loop, keeping its task so `stop` can wait for it."""

        async def tracked() -> Any:
            task = asyncio.current_task()
            assert task is not None
            self._tasks.append(task)
            try:
                return await coro
            except (Exception, asyncio.CancelledError):
                raise
            except BaseException as exc:  # SystemExit, KeyboardInterrupt would stop the loop
                raise Raised(exc) from None

        return asyncio.run_coroutine_threadsafe(tracked(), self.loop)

    def add(
        self, call_id: int, future: concurrent.futures.Future[Any], call: ToolCall | None
    ) -> Any:
        """Hold ``future`` for ``call_id``; returns the answer that tells Monty to wait."""
        self._entries[call_id] = (future, call)
        return {"future": ...}

    def __contains__(self, call_id: int) -> bool:
        return call_id in self._entries

    def calls(self) -> dict[int, ToolCall]:
        """The tool calls pending now, by ``call_id`` (what a checkpoint must remember)."""
        return {i: call for i, (_, call) in self._entries.items() if call is not None}

    def wait(self, call_ids: list[int], killed: threading.Event) -> list[tuple[int, Entry]]:
        """Wait until at least one of ``call_ids`` is done (checking ``killed`` every 0.1 s:
        it returns an empty list once set); take all that are."""
        futures = {self._entries[i][0]: i for i in call_ids}
        while True:
            done, _ = concurrent.futures.wait(
                futures, timeout=0.1, return_when=concurrent.futures.FIRST_COMPLETED
            )
            if done:
                return [(futures[f], self._entries.pop(futures[f])) for f in done]
            if killed.is_set():
                return []

    def stop(self) -> None:
        """Cancel the calls still running and wait (up to `CLEANUP_WAIT`) for them to end."""
        tasks = [t for t in self._tasks if not t.done()]
        if not tasks:
            return
        with contextlib.suppress(RuntimeError):
            if asyncio.get_running_loop() is self.loop:  # `stop` from orchestrate_async
                for task in tasks:
                    task.cancel()  # waiting here would block the loop they run on
                return

        async def stop() -> None:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(stop(), self.loop).result(timeout=CLEANUP_WAIT)

    def left(self) -> list[Entry]:
        """Every entry not taken by `wait` (the run ended without awaiting them)."""
        return list(self._entries.values())


class Raised(Exception):
    """Carries a tool's `BaseException` (``SystemExit``, ``KeyboardInterrupt``...) out of its
    task: raised as is in a task, asyncio re-raises those two out of ``run_forever`` and the
    shared tool loop dies, hanging every later async tool."""

    def __init__(self, exc: BaseException) -> None:
        super().__init__(describe(exc))
        self.exc = exc

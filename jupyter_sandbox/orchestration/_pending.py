"""The async calls a run has in flight: what the code awaits as Monty futures.

An async tool's coroutine runs on an event loop (the tool loop, or the caller's own with
``orchestrate_async``) while the code goes on; Monty holds a future for it under the call's
``call_id`` and stops at a `FutureSnapshot` when every task waits. `Pending` keeps those
calls, starts their coroutines, hands the driver every one that has finished when it waits,
and when the run ends cancels what is left and waits for it to wind down: a sandbox tool stops
and removes its container on cancel, so no container outlives the run that started it.

Each crossing between the driver's thread and the loop's is a thread wake-up, which costs more
than the rest of a call on a busy machine, so they are batched both ways: while calls are out
on the loop, new coroutines wait in a batch that goes to the loop in one crossing, when the
driver is about to wait or block or at the latest `BATCH_FOR` later (the loop's own timer takes
it: code that makes calls and then computes a while still has them running); finished calls
are collected in one queue the driver drains at once, so it wakes once for everything that
finished meanwhile rather than once per call. A call made when none is out (an awaited call)
goes to the loop at once: it runs there while Monty answers the driver, often finishing before
the driver asks for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from collections.abc import Coroutine
from typing import Any

from .._shared._events import ToolCall

CLEANUP_WAIT = 10.0
"""Seconds a stopping run waits for its cancelled async tool calls to wind down."""
BATCH_FOR = 0.002
"""Seconds a coroutine may wait in a batch (the code making many calls before it awaits any:
``gather``) before the loop's timer takes it; an await or a blocking call sends it at once."""
_ANSWERED = {"future": ...}
"""What tells Monty a call's value comes later, as a future under its ``call_id``."""


class Entry:
    """A pending call (None for a sleep the code awaits), the task running it (None until
    the loop starts it, or for a call answered by hand) and, once ``done``, its outcome: the
    ``value`` it returned or the ``error`` it raised."""

    __slots__ = ("call", "done", "error", "task", "value")

    def __init__(self, call: ToolCall | None) -> None:
        self.call = call
        self.task: asyncio.Task[None] | None = None
        self.done = False
        self.value: Any = None
        self.error: BaseException | None = None

    def finished(self) -> bool:
        """Whether it ran to an outcome of its own (not cancelled, not never started)."""
        return self.done and not isinstance(self.error, asyncio.CancelledError)


class Pending:
    """One run's pending calls by Monty ``call_id``, and the tasks behind them."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.entries: dict[int, Entry] = {}
        """The calls Monty may await, by ``call_id``, until their outcome is taken (`wait`)."""
        self._tasks: list[asyncio.Task[None]] = []
        self._finished: queue.SimpleQueue[int] = queue.SimpleQueue()
        """``call_id``s whose outcome is in, put by the loop's thread (or `settled`)."""
        self._ready: set[int] = set()
        """Taken from ``_finished`` but not yet asked for by Monty."""
        # The batch, ``_armed`` and ``_stopped`` are shared by the driver's thread, the
        # loop's and whichever thread calls `stop`.
        self._lock = threading.Lock()
        self.waiting: list[tuple[Entry, int, Coroutine[Any, Any, Any]]] = []
        """The batch: calls started but not yet handed to the loop (`flush`). Read without
        the lock by the driver's thread, the only one that adds to it."""
        self._armed = False
        """Whether the loop's timer will take the batch (`_take`) within `BATCH_FOR`."""
        self._stopped = False
        self._out = 0
        """Calls made (or settled) whose outcome the driver has not yet taken (its own)."""

    def start(self, call_id: int, coro: Coroutine[Any, Any, Any], call: ToolCall | None) -> Any:
        """Hold ``call_id`` for ``coro``, which the loop runs (soon: see `BATCH_FOR`); returns
        the answer that tells Monty to wait for it."""
        entry = self.entries[call_id] = Entry(call)
        with self._lock:
            self.waiting.append((entry, call_id, coro))
            now = not self._out or not self._armed
        self._out += 1
        if now:
            self.flush()
        return _ANSWERED

    def settled(self, call_id: int, value: Any, call: ToolCall) -> Any:
        """Hold ``call_id`` already answered with ``value`` (a replayed call: the code may
        gather it, so it stays a future); returns the answer that tells Monty to wait."""
        entry = self.entries[call_id] = Entry(call)
        entry.done, entry.value = True, value
        self._out += 1
        self._finished.put(call_id)
        return _ANSWERED

    def flush(self) -> None:
        """Hand the batch to the loop now: the driver is about to wait, or to block."""
        if not self.waiting:  # read without the lock: only the driver's thread adds to it
            return
        with self._lock:
            batch, self.waiting = self.waiting, []
        if batch:
            self.loop.call_soon_threadsafe(self._begin, batch)

    def _begin(self, batch: list[tuple[Entry, int, Coroutine[Any, Any, Any]]]) -> None:
        """On the loop: a task for each coroutine (none once the run stopped), and the timer
        that takes the next batch, armed while calls keep coming."""
        for entry, call_id, coro in batch:
            if self._stopped:
                coro.close()
                continue
            entry.task = self.loop.create_task(self._run(entry, call_id, coro))
            self._tasks.append(entry.task)
        with self._lock:
            if self._armed or self._stopped:
                return
            self._armed = True
        self.loop.call_later(BATCH_FOR, self._take)

    def _take(self) -> None:
        """On the loop, `BATCH_FOR` after a batch began: begin what was batched since (the
        driver may be busy in Monty for long), or stop the timer when nothing was."""
        with self._lock:
            batch, self.waiting = self.waiting, []
            self._armed = False
        if batch:
            self._begin(batch)

    async def _run(self, entry: Entry, call_id: int, coro: Coroutine[Any, Any, Any]) -> None:
        """Run ``coro`` to its outcome, kept in ``entry``, and tell the driver, in the task's
        last step (not a done callback: one turn of the loop less per call). Nothing
        escapes the task: ``SystemExit`` or ``KeyboardInterrupt`` raised in one would come
        out of the loop's ``run_forever`` and kill the shared tool loop, hanging every later
        async tool."""
        try:
            entry.value = await coro
        except BaseException as exc:  # a tool may raise CancelledError itself
            entry.error = exc
        finally:
            entry.done = True
            self._finished.put(call_id)

    def calls(self) -> dict[int, ToolCall]:
        """The tool calls pending now, by ``call_id`` (what a checkpoint must remember)."""
        return {i: e.call for i, e in self.entries.items() if e.call is not None}

    def wait(self, call_ids: list[int], killed: threading.Event) -> list[tuple[int, Entry]]:
        """Wait until at least one of ``call_ids`` is done (checking ``killed`` every 0.1 s:
        it returns an empty list once set); take all that are."""
        self.flush()
        ready, finished = self._ready, self._finished
        wanted = set(call_ids)
        while True:
            while not finished.empty():  # what finished meanwhile: one wake-up for all of it
                ready.add(finished.get())
                self._out -= 1
            taken = ready & wanted
            if taken:
                ready -= taken
                return [(i, self.entries.pop(i)) for i in taken]
            if killed.is_set():
                return []
            with contextlib.suppress(queue.Empty):
                ready.add(finished.get(timeout=0.1))
                self._out -= 1

    def stop(self) -> None:
        """Cancel the calls still running (and drop those not started) and wait (up to
        `CLEANUP_WAIT`) for them to end."""
        with self._lock:
            self._stopped = True
            batch, self.waiting = self.waiting, []
        for _, _, coro in batch:
            coro.close()
        if not self._tasks and (not self.entries or all(e.done for e in self.entries.values())):
            return  # nothing started, nothing on its way to the loop
        with contextlib.suppress(RuntimeError):
            if asyncio.get_running_loop() is self.loop:  # `stop` from orchestrate_async
                for task in self._tasks:
                    task.cancel()  # waiting here would block the loop they run on
                return

        async def stop() -> None:
            # On the loop, after any batch handed over before: its tasks are in the list.
            tasks = [t for t in self._tasks if not t.done()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(stop(), self.loop).result(timeout=CLEANUP_WAIT)

    def left(self) -> list[Entry]:
        """Every entry not taken by `wait` (the run ended without awaiting them)."""
        return list(self.entries.values())

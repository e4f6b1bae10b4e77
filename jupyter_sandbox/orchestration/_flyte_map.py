"""``flyte_map``: Flyte's built-in for mapping a task over lists inside sandboxed code.

Flyte's sandbox gives orchestration code ``flyte_map("double", items)`` (the task by name, one
or more iterables zipped, ``concurrency``, ``group_name``, ``return_exceptions``), mirroring
``flyte.map``. Code ported from Flyte keeps it: the doors that keep Flyte's names
(`orchestrate_local`, `orchestrator_from_str`, `orchestrator`) add it as one more tool when the
code names it and no tool of that name was given (`_orchestrator.with_flyte_map`, which loads
this module only then), so every other run's tools, stubs and fast path are what they were.

The mapped calls are the named tool called as a function (`Tool.__call__`), so a gated tool is
asked for approval as a direct call inside a tool is (`_approval.direct`); they run
concurrently (async tools on the run's tool loop, sync ones on worker threads that carry the
run's context, so an orchestrator called so nests under it), at most ``concurrency`` at a
time (0: all), and the run's trace shows them as the one ``flyte_map`` call with its
arguments and value. To the code it is a plain function, as in Flyte: no ``await``.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from .._shared._checks import bounded
from ._driver import parent_loop
from ._tool import Tool
from ._workers import tool_loop

NAME = "flyte_map"
"""What code calls it by, as in Flyte."""


def flyte_map_over(tools: Mapping[str, Tool]) -> Tool:
    """The ``flyte_map`` tool of a run whose tools are ``tools``."""
    tasks = dict(tools)

    def flyte_map(
        task_name: str,
        *iterables: Any,
        concurrency: int = 0,
        group_name: str | None = None,
        return_exceptions: bool = True,
    ) -> list[Any]:
        """Run the tool named ``task_name`` once per item of ``iterables`` (zipped), at most
        ``concurrency`` at a time (0: all at once), and return the values in order; with
        ``return_exceptions`` a failed call's exception takes its place, else it raises.
        ``group_name`` is Flyte's label for the group and changes nothing here."""
        task = tasks.get(task_name) if isinstance(task_name, str) else None
        if task is None:
            known = ", ".join(sorted(tasks)) or "none"
            raise RuntimeError(f"flyte_map: unknown task {task_name!r}; the tasks are: {known}")
        limit = int(bounded(concurrency, "concurrency", low=0, high=2**31, integer=True))
        calls = list(zip(*iterables, strict=False))
        if not calls:
            return []
        width = min(limit or len(calls), len(calls), THREADS_CEILING)
        if task.is_async:  # on the run's tool loop, as the run's own async calls
            loop = parent_loop() or tool_loop()
            gathered = _gathered(task, calls, width, return_exceptions)
            return asyncio.run_coroutine_threadsafe(gathered, loop).result()
        with ThreadPoolExecutor(width, thread_name_prefix=NAME) as pool:
            # each call in a copy of this thread's context: the run it is nested in
            futures = [pool.submit(contextvars.copy_context().run, task, *a) for a in calls]
            return [_outcome(future, return_exceptions) for future in futures]

    return Tool(flyte_map, NAME)


THREADS_CEILING = 32
"""Sync calls of one ``flyte_map`` running at once, whatever its ``concurrency``."""


def _outcome(future: Future[Any], return_exceptions: bool) -> Any:
    error = future.exception()
    if error is None:
        return future.result()
    if return_exceptions and isinstance(error, Exception):
        return error
    raise error


async def _gathered(
    task: Tool, calls: list[tuple[Any, ...]], width: int, return_exceptions: bool
) -> list[Any]:
    gate = asyncio.Semaphore(width)

    async def one(args: tuple[Any, ...]) -> Any:
        async with gate:
            return await task(*args)

    return list(
        await asyncio.gather(*(one(args) for args in calls), return_exceptions=return_exceptions)
    )

"""Sync `orchestrate()` nested in async tools: each level's async calls get a loop that no
caller is blocking (`_workers.tool_loop`). On one shared tool loop the inner run's async call
waited for the loop its own outer tool was blocking, forever."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

from jupyter_sandbox import orchestrate


def _finishes(run: Callable[[], object]) -> list[object]:
    """``run()``'s value, from a thread joined with a guard against a deadlock (a hang must
    fail the test, not the suite)."""
    done: list[object] = []
    thread = threading.Thread(target=lambda: done.append(run()), daemon=True)
    thread.start()
    thread.join(120)  # a guard against the deadlock, not a timing claim
    return done


async def double(x: int) -> int:
    await asyncio.sleep(0.01)
    return x * 2


def test_a_sync_orchestrate_inside_an_async_tool_runs_its_own_async_tools() -> None:
    async def outer(x: int) -> int:
        return int(orchestrate("await double(x)", tools=[double], inputs={"x": x}).value)

    assert _finishes(lambda: orchestrate("await outer(21)", tools=[outer]).value) == [42]


def test_a_sync_tool_of_that_nested_run_nests_again() -> None:
    """async tool -> sync orchestrate -> sync tool -> sync orchestrate -> async tool: the
    innermost run takes its parent's loop, not the first one, which the outermost tool
    blocks."""

    def middle(x: int) -> int:
        return int(orchestrate("await double(x)", tools=[double], inputs={"x": x}).value)

    async def outer(x: int) -> int:
        return int(orchestrate("middle(x) + 1", tools=[middle], inputs={"x": x}).value)

    assert _finishes(lambda: orchestrate("await outer(20)", tools=[outer]).value) == [41]


def test_gathered_async_tools_each_nesting_a_sync_run() -> None:
    async def outer(x: int) -> int:
        return int(orchestrate("await double(x)", tools=[double], inputs={"x": x}).value)

    code = "import asyncio\nsum(await asyncio.gather(*[outer(i) for i in range(4)]))"
    assert _finishes(lambda: orchestrate(code, tools=[outer]).value) == [12]

"""Process-wide resources shared by every orchestration: the Monty worker pools and the
background event loops that run async tools, held by a `Runtime` object. The process has one
(`current`); a test may install a fresh one (the ``runtime`` fixture in tests/conftest.py).

Both start on first use (importing jupyter_sandbox costs nothing) and stop at interpreter exit.
Sync `Monty` is used, not `AsyncMonty`: the async pool crashed the host at exit in a few percent
of runs here, and driving snapshots ourselves is faster anyway.
"""

from __future__ import annotations

import asyncio
import atexit
import os
import threading

import pydantic_monty

from .._shared._instances import Default
from ._confine import Confinement, choose, stop_inheritance

WORKERS = max(2, os.cpu_count() or 2)
"""Workers each pool may run at once."""
SPARE_LEVELS = 4
"""Pools a run with no known parent may draw from (`Runtime.hold_level`): 0 (cells) and the
three below it that nested runs use."""

_confinement: Confinement | None = None
_confinement_lock = threading.Lock()


def confinement() -> Confinement:
    """How the workers are confined at the OS level on the host (chosen once per process,
    before the first worker starts; from then on they inherit no descriptor but their
    pipes)."""
    global _confinement
    with _confinement_lock:
        if _confinement is None:
            stop_inheritance()
            _confinement = choose()
        return _confinement


class Runtime:
    """The worker pools and tool loops runs share. The process has one, `current()`; a test
    may put a fresh one in its place (`install`) and `close` it after."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.pools: dict[int, pydantic_monty.Monty] = {}
        """The Monty worker pool of each nesting level, started when first needed."""
        self._held: dict[int, set[int]] = {}
        """The ids of the runs drawing on each level's pool now."""
        self._loops: list[asyncio.AbstractEventLoop] = []
        """The tool loops, one per level of sync runs nested in async tools (`tool_loop`)."""
        self._loop_threads: dict[int, int] = {}
        """The thread id of each tool loop's thread, to its index in ``_loops``."""

    def pool(self, level: int = 0) -> pydantic_monty.Monty:
        """The shared worker pool of runs nested ``level`` deep in tools (0: cells; one warm
        worker, up to one per core when cells run at once). Nested runs draw from pools of
        their own, started when first needed with no warm worker: a run waiting on a nested
        run never holds the worker that nested run waits for, so nesting cannot deadlock."""
        with self._lock:
            found = self.pools.get(level)
            if found is None:
                found = pydantic_monty.Monty(
                    binary_path=confinement().binary,
                    min_processes=1 if level == 0 else 0,
                    max_processes=WORKERS,
                )
                found.__enter__()
                atexit.register(found.__exit__, None, None, None)
                self.pools[level] = found
            return found

    def tool_loop(
        self, parent: asyncio.AbstractEventLoop | None = None
    ) -> asyncio.AbstractEventLoop:
        """A daemon thread's event loop for a sync run's async tools (a notebook cell blocks
        the kernel's loop while it runs). ``parent``: the loop of the run whose tool makes
        this run.

        A sync `orchestrate()` inside an async tool blocks the loop that tool runs on until
        the nested run ends: the nested run's own async calls, sent to that loop, waited
        forever. So a run made on a tool loop's thread takes the next loop (one per level,
        started when first needed), and a run made by a sync tool takes its parent's loop,
        which a loop above may be blocking: neither waits on a loop its own caller holds."""
        with self._lock:
            level = self._loop_threads.get(threading.get_ident())
            if level is None and parent is not None and parent in self._loops:
                return parent
            level = 0 if level is None else level + 1
            while len(self._loops) <= level:
                loop = asyncio.new_event_loop()
                threading.Thread(
                    target=self._serve,
                    args=(loop, len(self._loops)),
                    name=f"jupyter-sandbox-tools-{len(self._loops)}",
                    daemon=True,
                ).start()
                self._loops.append(loop)
            return self._loops[level]

    def _serve(self, loop: asyncio.AbstractEventLoop, index: int) -> None:
        """Run tool loop number ``index`` on this thread, known as its thread to
        `tool_loop`."""
        self._loop_threads[threading.get_ident()] = index
        loop.run_forever()

    def hold_level(self, run: object, parent_level: int | None) -> int:
        """The pool level ``run`` draws its worker from, counted until `release_level`.

        A run nested in a tool whose context holds its parent (the tool runs on the parent's
        thread, or in an asyncio task) takes the level below the parent's: a run never waits
        for a worker held by a run waiting on it. A run with no known parent takes the first
        of `SPARE_LEVELS` pools that has a worker to spare, else waits at level 0. Such a run
        may be independent (a thread of the notebook's) or nested through a thread or
        executor a tool started itself, which a context variable does not follow: it took
        the cells' pool, and once every worker there was held by a run waiting on such a
        tool, the workers were deadlocked until Ctrl-C. Taking a pool with a free worker
        never waits on its parent; only past `SPARE_LEVELS` x `WORKERS` runs at once does one
        wait at level 0 again."""
        with self._lock:
            if parent_level is not None:
                level = parent_level + 1
            else:
                level = next(
                    (n for n in range(SPARE_LEVELS) if len(self._held.get(n, ())) < WORKERS), 0
                )
            self._held.setdefault(level, set()).add(id(run))
            return level

    def release_level(self, run: object, level: int) -> None:
        """``run`` no longer draws on the pool of ``level`` (once; again is harmless)."""
        with self._lock:
            self._held.get(level, set()).discard(id(run))

    def close(self) -> None:
        """Stop the pools' workers and the tool loops (a test's own runtime, once its runs
        are over; the process's runtime stops at exit)."""
        with self._lock:
            pools, self.pools = list(self.pools.values()), {}
            loops, self._loops = self._loops, []
        for found in pools:
            found.__exit__(None, None, None)
        for loop in loops:
            loop.call_soon_threadsafe(loop.stop)


_default: Default[Runtime] = Default(Runtime)
current = _default.get
"""The process's runtime: what every run draws its worker and tool loop from."""
install = _default.install
"""Make a runtime the process's (a test's fresh one); returns the one it replaces."""


# What the engine's modules call, on the current runtime.
def pool(level: int = 0) -> pydantic_monty.Monty:
    """`Runtime.pool` of the current runtime."""
    return current().pool(level)


def tool_loop(parent: asyncio.AbstractEventLoop | None = None) -> asyncio.AbstractEventLoop:
    """`Runtime.tool_loop` of the current runtime."""
    return current().tool_loop(parent)

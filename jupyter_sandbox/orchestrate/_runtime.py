"""Process-wide resources shared by every orchestration: the Monty worker pool and the
background event loop that runs async tools.

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

from ._confine import Confinement, choose, stop_inheritance

_lock = threading.Lock()
_pools: dict[int, pydantic_monty.Monty] = {}
WORKERS = max(2, os.cpu_count() or 2)
"""Workers each pool may run at once."""
_loop: asyncio.AbstractEventLoop | None = None
_confinement: Confinement | None = None


def confinement() -> Confinement:
    """How the workers are confined at the OS level on the host (chosen once, before the
    first worker starts; from then on they inherit no descriptor but their pipes)."""
    global _confinement
    if _confinement is None:
        stop_inheritance()
        _confinement = choose()
    return _confinement


def pool(level: int = 0) -> pydantic_monty.Monty:
    """The shared worker pool of runs nested ``level`` deep in tools (0: cells; one warm
    worker, up to one per core when cells run at once). Nested runs draw from pools of their
    own, started when first needed with no warm worker: a run waiting on a nested run never
    holds the worker that nested run waits for, so nesting cannot deadlock the pool."""
    with _lock:
        found = _pools.get(level)
        if found is None:
            found = pydantic_monty.Monty(
                binary_path=confinement().binary,
                min_processes=1 if level == 0 else 0,
                max_processes=WORKERS,
            )
            found.__enter__()
            atexit.register(found.__exit__, None, None, None)
            _pools[level] = found
        return found


def tool_loop() -> asyncio.AbstractEventLoop:
    """A daemon thread's event loop for async tools when the caller's own loop is busy
    (a notebook cell blocks the kernel's loop while it runs)."""
    global _loop
    with _lock:
        if _loop is None:
            loop = asyncio.new_event_loop()
            threading.Thread(
                target=loop.run_forever, name="jupyter-sandbox-tools", daemon=True
            ).start()
            _loop = loop
        return _loop

"""The paused runs of a store, with the call each waits on: what ``%orchestrate_pending``
lists, so a person can decide without opening the notebook that started the run.

A paused run's checkpoint is the Monty snapshot stopped at its gated call; that call is not
among the run's call records (it has not been made). Loading the snapshot into a worker
announces it again, with its tool and arguments: we read those and hand the worker back
without resuming anything (~2 ms a run). The snapshot was verified by the store first.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pydantic_monty as pm

from ._runtime import pool
from ._store import Store


@dataclass(frozen=True)
class PausedRun:
    run_id: str
    scope: str
    cell: str
    since: float
    """When the run paused (epoch seconds)."""
    tool: str | None
    """The gated call's tool; None when the snapshot announced no call (it cannot be read)."""
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] | None = None


def paused_runs(store: Store) -> list[PausedRun]:
    """The store's paused runs, oldest first, each with the call it waits on."""
    found = []
    for info in sorted(store.runs(status="paused"), key=lambda info: info.updated):
        run = store.run(info.run_id)
        tool, args, kwargs = None, (), None
        if run.checkpoint is not None:
            with pool().checkout() as session:
                snap = session.load_snapshot(run.checkpoint.dump)
                if isinstance(snap, pm.FunctionSnapshot):
                    tool, args, kwargs = str(snap.function_name), snap.args, snap.kwargs
        found.append(
            PausedRun(info.run_id, info.scope, info.cell, info.updated, tool, args, kwargs)
        )
    return found

"""The paused runs of a store, with the call each waits on: what ``%orchestrate_pending``
lists, so a person can decide without opening the notebook that started the run.

A paused run's checkpoint is the Monty snapshot stopped at its gated call; that call is not
among the run's call records (it has not been made), but the checkpoint keeps it beside the
dump (`Checkpoint.call`): listing reads the store only, never a Monty worker (which would cost
a worker checkout per run, and could wait on a pool a tool's nested run is using).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .._errors import StoreError
from .._grammar import is_run_id
from ._store import RunStatus, Store


@dataclass(frozen=True)
class PausedRun:
    run_id: str
    scope: str
    cell: str
    since: float
    """When the run paused (epoch seconds)."""
    tool: str | None
    """The gated call's tool; None when the store does not say (a checkpoint written by a
    version whose store schema kept no call: approving or rejecting it still works)."""
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] | None = None
    call_id: int | None = None
    """The call's number in the run's trace (its ``#``)."""
    refused: str | None = None
    """Why the store refuses the run's checkpoint (modified outside jupyter-sandbox, or saved
    by another Monty version): the run is listed with it, not hidden, and not hiding the rest."""


def run_status(store: Store, run_id: object) -> RunStatus | None:
    """Where stored run ``run_id`` stands now (None: not a run id, or not in this store): what
    the JupyterLab extension asks to tell a paused record answered elsewhere (issue 20 item
    3). Reads the run list only, nothing unsealed."""
    if not is_run_id(run_id):
        return None
    return next((info.status for info in store.runs() if info.run_id == run_id), None)


def paused_runs(store: Store) -> list[PausedRun]:
    """The store's paused runs, oldest first, each with the call it waits on."""
    found = []
    for info in sorted(store.runs(status="paused"), key=lambda info: info.updated):
        try:
            saved = store.checkpoint_of(info.run_id)
        except StoreError as exc:
            found.append(
                PausedRun(info.run_id, info.scope, info.cell, info.updated, None, refused=str(exc))
            )
            continue
        call = saved.call if saved is not None else None
        if call is None:
            found.append(PausedRun(info.run_id, info.scope, info.cell, info.updated, None))
            continue
        found.append(
            PausedRun(
                info.run_id,
                info.scope,
                info.cell,
                info.updated,
                call["tool"],
                tuple(call["args"]),
                dict(call["kwargs"]),
                call["call_id"],
            )
        )
    return found

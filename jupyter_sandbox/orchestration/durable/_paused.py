"""The paused runs of a store, with the call each waits on: what ``%orchestrate_pending``
lists, so a person can decide without opening the notebook that started the run.

A paused run's checkpoint is the Monty snapshot stopped at its gated call; that call is not
among the run's call records (it has not been made), but the checkpoint keeps it beside the
dump (`Checkpoint.call`): listing reads the store only, never a Monty worker (which would cost
a worker checkout per run, and could wait on a pool a tool's nested run is using).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pydantic_monty as pm

from ..._shared._errors import StoreError
from ..._shared._grammar import is_run_id
from ..._shared._scrub import known
from .._approval import APPROVAL_CHARS, digest, handles
from .._mcp_serve import MCP_CELL
from .._workers import pool
from ._durable import held
from ._rebind import Origin, Rebinder, label, stored_origins
from ._store import HandleMarker, RunStatus, Store


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
    digest: str | None = None
    """The call's digest when it paused (`_approval`); None from an older version."""
    chars: int = 0
    """How long its arguments' reprs are together: over `APPROVAL_CHARS` its record could not
    show it whole."""
    origins: Mapping[str, Origin] = field(default_factory=dict)
    """Where the run's handles came from, by uuid (`_rebind`)."""


@dataclass(frozen=True)
class CallNow:
    """A paused call as approving it now would make it: its arguments with the handles bound
    (in this process to the objects the run was given; after a restart to the notebook
    variables named in ``bindings``), and its digest (None when it cannot be known here: an
    argument the store did not keep, or a variable that is missing)."""

    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    bindings: list[tuple[str, Any]]
    """(variable, its value now) for each handle bound by name."""
    digest: str | None
    problem: str | None = None
    """Why the call cannot be made now (a missing variable, an unkept argument)."""

    def needs_digest(self, run: PausedRun) -> str | None:
        """Why approving ``run`` needs its digest (``--expect``), else None: a call too big for
        its record to show whole, one an MCP client's run paused (no panel in the notebook
        showed it), one that is not what its record showed any more (an object
        it gets was changed in place), or one that binds notebook variables (the record showed
        the objects it was given; what the variables hold now may be something else)."""
        if run.chars > APPROVAL_CHARS:
            return f"its arguments are {run.chars:,} characters, more than its record shows"
        if run.cell.startswith(MCP_CELL):
            return "an MCP client's run_code paused it (%mcp_serve): no panel here showed it"
        if self.bindings:
            names = ", ".join(f"`{name}`" for name, _ in self.bindings)
            return f"it binds notebook variable {names} as it is now, not the object it paused with"
        if self.digest is not None and run.digest is not None and self.digest != run.digest:
            return (
                f"it is not the call it paused with (digest {run.digest}): an object it gets "
                "has changed since"
            )
        return None


_UNKEPT = (
    "an argument ({}) is over the store's size for values or not data: only the run's "
    "record shows it (cut past its size); the digest is the one it paused with"
)


def _markers(values: list[Any]) -> list[HandleMarker]:
    """The `HandleMarker`s among ``values`` (what the store kept instead of a value)."""
    return [
        item for value in values for item in handles(value) if issubclass(type(item), HandleMarker)
    ]


def call_now(run: PausedRun, given: Mapping[str, Any]) -> CallNow:
    """``run``'s pending call as approving it now makes it, ``given`` being the notebook
    variables the run needs again (`unkept_inputs`)."""
    rebinder = Rebinder(run.run_id, run.origins, given, frozenset(), held(run.run_id))
    args, kwargs = run.args, dict(run.kwargs or {})
    unkept = [m["handle"] for m in _markers([*args, *kwargs.values()]) if "id" not in m]
    if unkept:
        return CallNow(args, kwargs, [], run.digest, _UNKEPT.format(", ".join(unkept)))
    try:
        args, kwargs = rebinder.rebind((args, kwargs))
    except StoreError as exc:
        return CallNow(args, kwargs, [], run.digest, str(exc))
    bindings = [(label(run.origins[uuid]), value) for uuid, value in rebinder.bound.values()]
    return CallNow(args, kwargs, bindings, digest(str(run.tool), args, kwargs, known()))


def run_status(store: Store, run_id: object) -> RunStatus | None:
    """Where stored run ``run_id`` stands now (None: not a run id, or not in this store): what
    the JupyterLab extension asks to tell a paused record answered elsewhere.
    Reads the run list only, nothing unsealed."""
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
        named = any("id" in m for m in _markers([*call["args"], *call["kwargs"].values()]))
        # where its handles came from is in the call records: read only when it has one
        origins = _origins(store, info.run_id) if named else {}
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
                digest=call.get("digest"),
                chars=call.get("chars", 0),
                origins=origins,
            )
        )
    return found


def unseen(
    store: Store,
    run_id: str,
    given: Mapping[str, Any],
    cut: Callable[[PausedRun, CallNow], str | None] | None = None,
) -> tuple[str, str] | None:
    """Why paused run ``run_id``'s call may not be approved without its digest (`needs_digest`:
    the person cannot have seen it whole as it will be made; ``cut``: why the caller's own
    view did not show it whole), and the digest to approve it with (``resume_run(...,
    expect=digest)``; the magic says its own words); None when it may."""
    for run in paused_runs(store):
        if run.run_id == run_id and run.tool is not None:
            now = call_now(run, given)
            why = now.needs_digest(run) or (None if cut is None else cut(run, now))
            if why is not None:
                return (
                    f"run {run_id}: call #{run.call_id} {run.tool}() is approved only with its "
                    f"digest: {why}",
                    str(now.digest or run.digest),
                )
    return None


def _origins(store: Store, run_id: str) -> dict[str, Origin]:
    """Where run ``run_id``'s handles came from (its call records); none when they cannot be
    read (its approval then says why it cannot go on)."""
    try:
        return stored_origins(store.run(run_id).calls)
    except StoreError:
        return {}


def _unkept(value: Any) -> bool:
    """Whether ``value`` holds data the store did not keep (a marker with no handle's uuid)."""
    return any("id" not in marker for marker in _markers([value]))


def read_whole(store: Store, run: PausedRun) -> PausedRun:
    """``run`` with each argument the store did not keep (data over its size for a value)
    read from the run's snapshot, which holds it: what ``%orchestrate_pending --full`` shows,
    so a call too big for its record is still viewable whole. Costs a Monty worker, so only
    for such a run; the others are returned as they are."""
    kwargs = dict(run.kwargs or {})
    if not any(map(_unkept, [*run.args, *kwargs.values()])):
        return run
    saved = store.checkpoint_of(run.run_id)
    if saved is None:
        return run
    with pool().checkout() as session:
        snap = session.load_snapshot(saved.dump)
    if not isinstance(snap, pm.FunctionSnapshot):
        return run
    args = tuple(
        new if _unkept(old) else old for old, new in zip(run.args, snap.args, strict=False)
    )
    whole = {k: snap.kwargs.get(k, v) if _unkept(v) else v for k, v in kwargs.items()}
    return dataclasses.replace(run, args=args, kwargs=whole)

"""Durable runs: what a run with a store persists, when, and how it is taken up again.

A run given a store (``orchestrate(..., store=...)``) is *durable*: it survives the kernel.

- **Records.** Every call's record (tool, arguments, status, result or error) is written when
  the call finishes; the run's inputs are written at its start (as the record numbered
  `INPUTS`, -1), so a fork or a resume without a snapshot can run the code again.
- **Checkpoints** (`CHECKPOINT_EVERY`). Monty's snapshot of the paused program (0.3-2 ms to
  dump, a few KB) is written before every async tool call (sandbox tools are async: the
  calls worth not repeating), before every gated call (a pause must be resumable), and
  before any other call once the last one is more than a second old. Only the latest is kept.
  A snapshot is taken where the code stops at a call, so it holds the arguments of that call
  and the ``call_id`` s of the async calls still in flight (`pending`).
- **Resume** (`Restore`): load the latest snapshot into a fresh worker. Monty announces the
  call the snapshot stopped at again, and the code before it does not run again. *The
  in-flight rule*: a call (the announced one, or one that was pending) whose record says it
  completed is answered from its record; one without a completed record is made again, with
  the arguments the snapshot holds. Calls after the snapshot that completed before the kernel
  died are answered from their records too, in order, while the code repeats them (the
  journal's replay, `_replay.Answers`).
- **Handles** (opaque host objects, `_values`) do not survive a restart: a dump carries no
  host object. The store keeps plain data only (`keepable`): an object, or data over
  `KEEP_LIMIT`, is kept as a `HandleMarker` naming its type, so a durable cell never pickles
  a DataFrame it was handed or a tool returned. A resumed run that hands a tool a handle it
  held before the restart fails with `StoreError` naming the handle's type; a call whose
  stored result was one counts as not completed (made again if needed); a stored input that
  was one must be given again (``inputs=``), else `StoreError` names it.
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pydantic_monty as pm

from .._errors import StoreError
from .._events import ToolCall
from ._memo import Recorded
from ._store import HandleMarker, RunStatus, Store, StoredRun
from ._values import MAX_DEPTH, data_size, is_plain

CHECKPOINT_EVERY = 1.0
"""Seconds after which a sync call checkpoints too (async and gated calls always do)."""
INPUTS = -1
"""The record number a run's inputs are kept under."""
KEEP_LIMIT = 2**20
"""Bytes (written out) past which a value is not kept in the store but named (`keepable`)."""

_stores: dict[str, Store] = {}
_stores_lock = threading.Lock()


def open_store(store: Store | str | os.PathLike[str]) -> Store:
    """A `Store`, or the one at a path (opened once per process and path)."""
    if isinstance(store, Store):
        return store
    path = os.path.abspath(os.path.expanduser(os.fspath(store)))
    with _stores_lock:
        found = _stores.get(path)
        if found is None:
            found = _stores[path] = Store(path)
        return found


class Durable:
    """A run's link to its store: writes its records and checkpoints, and its end."""

    def __init__(self, store: Store, run_id: str) -> None:
        self.store = store
        self.run_id = run_id
        self._saved = float("-inf")
        """When the last checkpoint was written (monotonic)."""

    def due(self) -> bool:
        """Whether a sync call must checkpoint before it runs (the last is over a second old)."""
        return time.monotonic() - self._saved > CHECKPOINT_EVERY

    def checkpoint(
        self, snap: pm.FunctionSnapshot, index: int, pending: Mapping[int, tuple[int, ToolCall]]
    ) -> None:
        """Write the snapshot stopped at call ``index``; ``pending`` maps the call_id of each
        async call in flight to its number and call."""
        self.store.checkpoint(
            self.run_id,
            dump=snap.dump(),
            call_index=index,
            pending=[
                {
                    "call_id": call_id,
                    "index": number,
                    "tool": call.tool,
                    "args": tuple(keepable(a) for a in call.args),
                    "kwargs": {k: keepable(v) for k, v in call.kwargs.items()},
                }
                for call_id, (number, call) in pending.items()
            ],
        )
        self._saved = time.monotonic()

    def record(self, index: int, call: ToolCall) -> None:
        record = Recorded.of(call).to_dict()
        record["args"] = tuple(keepable(a) for a in call.args)
        record["kwargs"] = {k: keepable(v) for k, v in call.kwargs.items()}
        record["result"] = keepable(call.result)
        self.store.record_call(self.run_id, index, record)

    def finish(self, status: RunStatus) -> None:
        self.store.finish(self.run_id, status)


@dataclass
class Restore:
    """What a resumed run starts from: the snapshot, and the calls it answers."""

    dump: bytes
    index: int
    """The number of the call the snapshot stopped at (Monty announces it again)."""
    pending: list[dict[str, Any]]
    """The async calls in flight at the snapshot (call_id, index, tool, args, kwargs)."""
    decision: tuple[bool, str | None] | None = None
    """A person's answer to the gated call at ``index``: (approved, reason)."""
    calls: dict[int, Recorded] = field(default_factory=dict)
    classes: frozenset[str] = frozenset()
    """Classes the code defines: their instances reach tools as Monty's stand-ins in any run,
    so such a stand-in is no lost host object."""


def stored_calls(run: StoredRun) -> dict[int, Recorded]:
    """A stored run's call records (its inputs' record apart). A call whose result the store
    could not keep (an object) counts as not completed: it is made again if it is needed."""
    calls = {}
    for index, record in run.calls.items():
        if index != INPUTS:
            found = Recorded.from_dict(record)
            if found.status == "ok" and handle_in(found.result) is not None:
                found = Recorded.from_dict({**record, "status": "unstored"})
            calls[index] = found
    return calls


def stored_inputs(run: StoredRun, given: Mapping[str, Any] | None) -> dict[str, Any]:
    """The inputs a stored run was given, ``given`` overriding them by name. One the store
    could not keep (an object) must be given again: `StoreError` names it."""
    record = run.calls.get(INPUTS)
    inputs = dict(record["inputs"]) if record else {}
    inputs.update(given or {})
    for name, value in inputs.items():
        kind = handle_in(value)
        if kind is not None:
            raise StoreError(
                f"run {run.run_id}'s input {name!r} was an object ({kind}) the store cannot "
                f"keep: pass it again, inputs={{{name!r}: ...}}"
            )
    return inputs


def keepable(value: Any) -> Any:
    """``value`` if the store should keep it (plain data up to `KEEP_LIMIT`), else a
    `HandleMarker` naming its type."""
    if is_plain(value) and data_size(value, KEEP_LIMIT) <= KEEP_LIMIT:
        return value
    kind = type(value)
    return HandleMarker(f"{kind.__module__}.{kind.__qualname__}")


def defined_classes(code: str) -> frozenset[str]:
    return frozenset(re.findall(r"^[ \t]*class[ \t]+(\w+)", code, re.MULTILINE))


def handle_in(value: Any, classes: frozenset[str] = frozenset(), depth: int = 0) -> str | None:
    """The type name of the first value in ``value`` that did not survive the store or a
    restart (a `HandleMarker`, or the stand-in Monty gives for a host object after a
    restore, unless its class is one of ``classes``, the code's own), else None."""
    if isinstance(value, HandleMarker):
        return value["handle"]
    if isinstance(value, pm.MontyClassProxy):
        return None if value.name in classes else str(value.name)
    if depth < MAX_DEPTH and type(value) in (list, tuple, set, frozenset, dict):
        items = value.values() if type(value) is dict else value
        for item in items:
            found = handle_in(item, classes, depth + 1)
            if found is not None:
                return found
    return None

"""Durable runs: what a run with a store persists, when, and how it is taken up again.

A run given a store (``orchestrate(..., store=...)``) is *durable*: it survives the kernel.

- **Records.** A finished call's record (tool, arguments, status, result or error) is kept in
  memory and written later, in one transaction with others: with the next checkpoint (before
  it, in the same transaction, so a checkpoint is never in the store without the records of
  the calls that finished before it), else by a timer at most `CHECKPOINT_EVERY` (1 s) after
  the previous write, and when the run ends or pauses. Turning a call into its stored form
  (keeping plain data, pickling, sealing) happens then too, not per call. The run's inputs
  are written at its start (as the record numbered `INPUTS`, -1), so a fork or a resume
  without a snapshot can run the code again.
- **Checkpoints** (`CHECKPOINT_EVERY`). Monty's snapshot of the paused program (0.3-2 ms to
  dump, a few KB) is written before every sandbox tool call (slow: the calls worth not
  repeating) and before every gated call (a pause must be resumable); before any other call,
  sync or async, only when the last one is more than a second old (a ``gather`` of 1000
  async tools writes one per second of the run at most, not 1000). Only the latest is
  kept. A snapshot is taken where the code stops at a call, so it holds the arguments of
  that call and the ``call_id`` s of the async calls still in flight (`pending`).
- **What a kill loses.** A process killed mid-run (``kill -9`` of the kernel) loses the
  records not written yet: those of the calls that finished in the last second or so (the
  timer's interval, plus its delay on a loaded machine). On resume those calls count as not
  completed and are made again; every call whose record was written is answered from it,
  and the code before the latest checkpoint does not run again. So a durable run repeats at
  most about a second's worth of finished calls, and never one that finished before a later
  checkpoint was written (every sandbox and gated call writes one). The timer has a thread
  of its own: a long sync tool does not hold the records before it back.
- **Resume** (`Restore`): load the latest snapshot into a fresh worker. Monty announces the
  call the snapshot stopped at again, and the code before it does not run again. *The
  in-flight rule*: a call (the announced one, or one that was pending) whose record says it
  completed is answered from its record; one without a completed record is made again, with
  the arguments the snapshot holds. Calls after the snapshot whose records were written before
  the kernel died are answered from them too, in order, while the code repeats them (the
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

import contextlib
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
"""Seconds after which any call checkpoints (sandbox and gated calls always do), and after
which buffered records are written on their own."""
INPUTS = -1
"""The record number a run's inputs are kept under."""
KEEP_LIMIT = 2**20
"""Bytes (written out) past which a value is not kept in the store but named (`keepable`)."""

_SMALL = frozenset({type(None), bool, float})
_SHORT = 4096
"""Characters of a text `keepable` keeps without measuring it (far under `KEEP_LIMIT`)."""

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
    """A run's link to its store: buffers its records, writes them with its checkpoints (or
    on their own once a second), and its end. `record` and `flush` may be called from any
    thread (a stopping run ends its calls from the thread that stops it; a timer flushes)."""

    def __init__(self, store: Store, run_id: str) -> None:
        self.store = store
        self.run_id = run_id
        self._saved = float("-inf")
        """When the last checkpoint was written (monotonic)."""
        self._written = time.monotonic()
        """When the buffered records were last written (monotonic)."""
        self._unwritten: dict[int, ToolCall] = {}
        """Finished calls whose records are not in the store yet, by number."""
        self._buffer = threading.Lock()
        """Guards ``_unwritten`` and ``_timer``."""
        self._writing = threading.Lock()
        """Held from taking the buffer to its commit: a timer's write of older records never
        commits after a checkpoint taken later (the in-flight rule reads records first)."""
        self._timer: threading.Timer | None = None

    def due(self) -> bool:
        """Whether a call that need not checkpoint must (the last is over a second old)."""
        return time.monotonic() - self._saved > CHECKPOINT_EVERY

    def checkpoint(
        self, snap: pm.FunctionSnapshot, index: int, pending: Mapping[int, tuple[int, ToolCall]]
    ) -> None:
        """Write the snapshot stopped at call ``index``, with the records buffered so far;
        ``pending`` maps the call_id of each async call in flight to its number and call."""
        dump = snap.dump()
        entries = [
            {
                "call_id": call_id,
                "index": number,
                "tool": call.tool,
                "args": tuple(keepable(a) for a in call.args),
                "kwargs": {k: keepable(v) for k, v in call.kwargs.items()},
            }
            for call_id, (number, call) in pending.items()
        ]
        with self._writing:
            calls = self._take()
            self.store.checkpoint(
                self.run_id, dump=dump, call_index=index, pending=entries, calls=calls
            )
        self._saved = time.monotonic()

    def record(self, index: int, call: ToolCall) -> None:
        """Buffer finished call ``index``: it is written with the next checkpoint, else by a
        timer at most `CHECKPOINT_EVERY` after the last write, else when the run ends."""
        with self._buffer:
            self._unwritten[index] = call
            if self._timer is not None:
                return
            wait = max(0.0, CHECKPOINT_EVERY - (time.monotonic() - self._written))
            timer = self._timer = threading.Timer(wait, self._on_timer)
            timer.daemon = True
        timer.start()  # a timer `finish` cancelled first does not run

    def flush(self) -> None:
        """Write the buffered records now (in one transaction)."""
        with self._writing:
            calls = self._take()
            if calls:
                self.store.record_calls(self.run_id, calls)

    def finish(self, status: RunStatus) -> None:
        """Write what is buffered, then the run's status (a paused run's drained calls too)."""
        with self._buffer:
            timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()
        self.flush()
        self.store.finish(self.run_id, status)

    def _on_timer(self) -> None:
        with self._buffer:
            self._timer = None
        with contextlib.suppress(StoreError):  # the run's next write or its end says so
            self.flush()

    def _take(self) -> dict[int, dict[str, Any]]:
        """The buffered records as the store keeps them (made now, not per call), emptying
        the buffer. Call it holding ``_writing``."""
        with self._buffer:
            taken, self._unwritten = self._unwritten, {}
            self._written = time.monotonic()
        return {index: _stored_record(call) for index, call in taken.items()}


def _stored_record(call: ToolCall) -> dict[str, Any]:
    record = Recorded.dict_of(call)
    record["args"] = tuple([keepable(a) for a in call.args])
    record["kwargs"] = {k: keepable(v) for k, v in call.kwargs.items()}
    record["result"] = keepable(call.result)
    return record


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
    kind = type(value)
    if (  # the usual argument, kept without a walk: a float, a word-sized int, a short text
        kind in _SMALL
        or (kind is int and value.bit_length() <= 64)
        or (kind is str and len(value) <= _SHORT)
    ):
        return value
    if is_plain(value) and data_size(value, KEEP_LIMIT) <= KEEP_LIMIT:
        return value
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

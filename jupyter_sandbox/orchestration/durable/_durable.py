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
- **Handles** (opaque host objects, `_values`) are not in a dump: it keeps only their uuids.
  The store keeps plain data only (`keepable`): an object, or data over `KEEP_LIMIT_BYTES`, is kept
  as a `HandleMarker` naming its type, so a durable cell never pickles a DataFrame it was
  handed or a tool returned. Each handle sent into Monty is named instead (`_rebind`: the
  input it came from, or the call that returned it, kept with the inputs' and that call's
  records), and a restored run binds an input's handle again from the input of that name it
  is given (the notebook variable); a handle a tool returned before the restart cannot be
  had again, and `StoreError` names its call. In a run without a snapshot, a call whose
  stored result was one counts as not completed (made again if needed), and a stored input
  that was one must be given again (``inputs=``), else `StoreError` names it.
- **Secrets** a sandbox tool returned (`_scrub`) are not kept either: a value holding one is a
  `HandleMarker` (a call's result is made again on resume, an input must be given again), a
  call's error is masked, and a checkpoint whose dump holds one is not written unless its call
  is gated (`_scrub` says why).
"""

from __future__ import annotations

import contextlib
import functools
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pydantic_monty as pm

from ..._shared._errors import StoreError
from ..._shared._events import ToolCall
from ..._shared._instances import Default
from ..._shared._scrub import SECRET, Scrub, holds, in_dump, known, masked, note
from ...records import Binding
from .._approval import handles
from .._hooks import Answer, Feature
from .._keep import TINY, Summary, quick_size, summary
from .._memo import Recorded, same
from .._sandbox_tool import SandboxTool, secret_values
from .._values import DEPTH_CEILING, data_size, is_plain
from ._rebind import (
    Origin,
    Rebinder,
    input_handles,
    label,
    missing_input,
    result_handles,
    type_of,
    wrong_input,
)
from ._store import HandleMarker, RunOwner, RunStatus, Store, StoredRun

if TYPE_CHECKING:
    from .._driver import Driver
    from .._tool import Tool

CHECKPOINT_EVERY = 1.0
"""Seconds after which any call checkpoints (sandbox and gated calls always do), and after
which buffered records are written on their own."""
INPUTS = -1
"""The record number a run's inputs are kept under."""
KEEP_LIMIT_BYTES = 2**20
"""Bytes (written out) past which a value is not kept in the store but named (`keepable`)."""

_SMALL = frozenset({type(None), bool, float})
_SHORT = 4096
"""Characters of a text `keepable` keeps without measuring it (far under `KEEP_LIMIT_BYTES`)."""


class Process:
    """What the durable subsystem keeps for the life of the process: the stores it opened (one
    per path), the objects of the runs that paused here and the sessions' states. The process
    has one, `current`; a test may install a fresh one (`install`), as a kernel restart
    would give."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.stores: dict[str, Store] = {}
        """The stores opened so far, by absolute path (`open_store`)."""
        self.held: dict[str, dict[str, Any]] = {}
        """The objects each run paused in this process sent into Monty, by run id, then uuid:
        the objects its approved call gets while this kernel lives (`held`)."""
        self.sessions: dict[tuple[str, str], Any] = {}
        """The kernel's ``--session`` states by (scope, name) (`_sessions.Sessions`)."""

    def open_store(self, store: Store | str | os.PathLike[str]) -> Store:
        """A `Store`, or the one at a path (opened once per path)."""
        if isinstance(store, Store):
            return store
        path = os.path.abspath(os.path.expanduser(os.fspath(store)))
        with self._lock:
            found = self.stores.get(path)
            if found is None:
                found = self.stores[path] = Store(path)
            return found

    def objects(self, run_id: str) -> dict[str, Any]:
        """The objects run ``run_id`` sent into Monty before it paused here, by uuid."""
        with self._lock:
            return dict(self.held.get(run_id, {}))

    def keep(self, run_id: str, objects: dict[str, Any] | None) -> None:
        """Hold a paused run's ``objects`` for its approval; None: the run is over."""
        with self._lock:
            if objects is None:
                self.held.pop(run_id, None)
            else:
                self.held[run_id] = objects

    def forget(self) -> None:
        """Forget every paused run's objects, as a kernel restart does."""
        with self._lock:
            self.held.clear()


_default: Default[Process] = Default(Process)
current = _default.get
"""The process's durable state."""
install = _default.install
"""Make a durable state the process's (a test's fresh one); returns the one it replaces."""


def held(run_id: str) -> dict[str, Any]:
    """The objects run ``run_id`` sent into Monty before it paused in this process, by uuid.
    A paused run's handles are bound to these, the objects its record showed, not to the
    notebook variables of the same name (a later cell may have set ``targets`` to something
    else); only after a restart, when these are gone, does a handle bind by name (`_rebind`)."""
    return current().objects(run_id)


def open_store(store: Store | str | os.PathLike[str]) -> Store:
    """A `Store`, or the one at a path (opened once per process and path)."""
    return current().open_store(store)


class Durable:
    """A run's link to its store: buffers its records, writes them with its checkpoints (or
    on their own once a second), and its end. `record` and `flush` may be called from any
    thread (a stopping run ends its calls from the thread that stops it; a timer flushes)."""

    def __init__(
        self, store: Store, run_id: str, was: tuple[RunStatus, RunOwner | None] | None = None
    ) -> None:
        self.store = store
        self.run_id = run_id
        self.was = was
        """The run's status and owner when this process took it up (`_resume`); None: a new
        run."""
        self._saved = float("-inf")
        """When the last checkpoint was written (monotonic)."""
        self._written = time.monotonic()
        """When the buffered records were last written (monotonic)."""
        self._unwritten: dict[int, ToolCall] = {}
        """Finished calls whose records are not in the store yet, by number."""
        self._origins: dict[int, dict[str, Origin]] = {}
        """Where the handles in those calls' results came from (`_rebind`), by number."""
        self._inputs: dict[str, Any] | None = None
        """The inputs' record again, with where their handles came from, until written."""
        self._handles: dict[int, tuple[str, Any]] = {}
        """The uuid of each object sent into Monty as a handle, by ``id`` (with the object,
        which it keeps alive): a checkpoint names an async call's handle arguments by it."""
        self._buffer = threading.Lock()
        """Guards ``_unwritten`` and ``_timer``."""
        self._writing = threading.Lock()
        """Held from taking the buffer to its commit: a timer's write of older records never
        commits after a checkpoint taken later (the in-flight rule reads records first)."""
        self._timer: threading.Timer | None = None
        self.scrub: Scrub | None = None
        """The run's secrets (set by its `Driver`): what the store must not keep (`_scrub`)."""
        self.objects: dict[str, Any] = held(run_id)
        """The objects the run sent into Monty in this process before (it paused here), by
        uuid, kept again if it pauses again."""
        self.origins: dict[str, Origin] = {}
        """Where each handle this run sent in came from, by uuid (`_rebind`)."""
        self.room: int | None = None
        """Bytes the run may still write to the store (`Store.make_room`, asked after each
        write; None until the first): past it, values are kept as summaries."""
        self.warn: Callable[[str], None] | None = None
        """Says one line to the person (set by its `Driver`): the run filled its room."""
        self._warned = False

    def due(self) -> bool:
        """Whether a call that need not checkpoint must (the last is over a second old)."""
        return time.monotonic() - self._saved > CHECKPOINT_EVERY

    def checkpoint(
        self,
        snap: pm.FunctionSnapshot,
        index: int,
        pending: Mapping[int, tuple[int, ToolCall]],
        *,
        required: bool = False,
        approval: Mapping[str, Any] | None = None,
    ) -> None:
        """Write the snapshot stopped at call ``index``, with the records buffered so far and
        that call itself (a paused run's gated call is listed from it, without Monty);
        ``pending`` maps the call_id of each async call in flight to its number and call;
        ``approval`` (a gated call's ``digest`` and ``chars``: `_approval`) is kept with it.
        A snapshot holding a secret is not written unless ``required`` (a gated call)."""
        dump = snap.dump()
        secrets = self._secrets()
        if not required and (
            in_dump(dump, secrets)
            or holds([(call.args, call.kwargs) for _, call in pending.values()], secrets)
        ):
            self._saved = time.monotonic()  # the next calls need not try again at once
            return
        if not required and len(dump) > self._room():
            self._saved = time.monotonic()  # the store's room is full: no snapshot (`_full`)
            self._full()
            return
        entries = [
            _entry(call_id, number, call.tool, call.args, call.kwargs, self._kept)
            for call_id, (number, call) in pending.items()
        ]
        waiting = _entry(
            snap.call_id, index, snap.function_name, snap.args, snap.kwargs, self._kept
        )
        waiting.update(approval or {})
        with self._writing:
            calls = self._take()
            self.store.checkpoint(
                self.run_id,
                dump=dump,
                call_index=index,
                pending=entries,
                calls=calls,
                call=waiting,
            )
            self._measure()
        self._saved = time.monotonic()

    def sent_inputs(self, inputs: Mapping[str, Any], sent: Mapping[str, Any]) -> None:
        """Name the handles among the run's inputs (``sent``: as Monty got them), so that a
        restored run can bind them again; written with the next write (none if no handle)."""
        origins = self._named(input_handles(sent))
        if origins:
            with self._buffer:
                self._inputs = {**inputs_record(inputs), "handles": origins}

    def record(self, index: int, call: ToolCall, sent: Any = None) -> None:
        """Buffer finished call ``index`` (``sent``: its result as Monty got it, naming the
        handles in it): it is written with the next checkpoint, else by a timer at most
        `CHECKPOINT_EVERY` after the last write, else when the run ends."""
        origins = (
            self._named(result_handles(call.call_id, call.tool, sent))
            if sent is not None and sent is not call.result  # converted: it holds a handle
            else None
        )
        with self._buffer:
            self._unwritten[index] = call
            if origins:
                self._origins[index] = origins
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
                self._measure()

    def finish(self, status: RunStatus) -> None:
        """Write what is buffered, then the run's status (a paused run's drained calls too).
        A paused run's objects are held for its approval in this process (`held`)."""
        with self._buffer:
            timer, self._timer = self._timer, None
            objects = {**self.objects, **dict(self._handles.values())}
        current().keep(self.run_id, objects if status == "paused" else None)
        if timer is not None:
            timer.cancel()
        self.flush()
        self.store.finish(self.run_id, status)

    def give_back(self, error: BaseException) -> None:
        """The run never started (its driver could not be made, or Ctrl-C landed first):
        set it back to the status and owner it was taken up from, a new run to
        ``interrupted`` or ``error``, rather than leave it "running" with nothing to end it
        (a live owner's running run is refused by every resume). A store that cannot be
        written now leaves it running: ``error`` is what the caller must see."""
        kept: RunStatus = "interrupted" if isinstance(error, KeyboardInterrupt) else "error"
        with contextlib.suppress(StoreError):
            if self.was is None:
                self.store.finish(self.run_id, kept)
            else:
                self.store.unclaim(self.run_id, *self.was)

    def _named(self, found: Iterator[tuple[pm.ClassInstance, Origin]]) -> dict[str, Origin]:
        """The origins of handles just sent, by uuid; each handle's object is remembered."""
        origins = {}
        with self._buffer:
            for handle, origin in found:
                uuid = str(handle.id)
                origins[uuid] = origin
                self._handles[id(handle.value)] = (uuid, handle.value)
            self.origins.update(origins)
        return origins

    def bindings(self, values: list[Any], restore: Restore | None) -> list[Binding]:
        """The notebook variables the handles among ``values`` (a paused call's arguments)
        are bound to when the run is approved after a kernel restart: ``variable`` (the
        input's name, with the path inside it) and ``type``. A restored run's objects bound
        again are held too, so an approval in this process gets them, not the variable."""
        known = dict(self._handles)
        if restore is not None:
            known.update(restore.bound())
            self.objects.update(dict(known.values()))
        origins = {**(restore.origins if restore is not None else {}), **self.origins}
        found: dict[str, Binding] = {}
        for value in values:
            for item in handles(value):
                uuid, obj = known.get(id(item), (None, None))
                origin = origins.get(uuid) if uuid is not None and obj is item else None
                if origin is not None and "input" in origin:
                    found[label(origin)] = {"variable": label(origin), "type": origin["type"]}
        return list(found.values())

    def _kept(self, value: Any) -> Any:
        """An argument of a call in flight as a checkpoint keeps it: `keepable`, and a handle
        this run sent in is a `HandleMarker` carrying its uuid (a restored run binds it)."""
        found = self._handles.get(id(value))
        if found is None or found[1] is not value:
            return keepable(value, self._secrets())
        marker = HandleMarker(type_of(value))
        marker["id"] = found[0]
        return marker

    def _room(self) -> int:
        """The bytes the run may still write, asked of the store before its first write (a
        first snapshot larger than the run's room is not written either)."""
        if self.room is None:
            self.room = self.store.make_room(self.run_id)
        return self.room

    def _measure(self) -> None:
        """After a write: make room in the store and learn how much is left for this run
        (call it holding ``_writing``)."""
        self.room = self.store.make_room(self.run_id)
        if self.room <= 0:
            self._full()

    def _full(self) -> None:
        """Say once that the run's later values are kept as summaries."""
        if self._warned or self.warn is None:
            return
        self._warned = True
        caps = self.store.caps
        self.warn(
            f"run {self.run_id} has filled its room in the store ({caps.store_run} MB a run, "
            f"{caps.store_cell} MB a cell, {caps.store_total} MB in all, paused runs "
            "included): its later values are kept as summaries and its later calls cannot be "
            "replayed (raise them with Keep(store_run=..., store_cell=..., store_total=...))"
        )

    def _secrets(self) -> tuple[str, ...]:
        return () if self.scrub is None else self.scrub.secrets

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
            origins, self._origins = self._origins, {}
            inputs, self._inputs = self._inputs, None
            self._written = time.monotonic()
        room = _Room(self._room())
        secrets = self._secrets()
        records = {index: _stored_record(call, secrets, room) for index, call in taken.items()}
        if room.summarized:
            self._full()
        for index, found in origins.items():
            records[index]["handles"] = found
        if inputs is not None:
            records[INPUTS] = inputs
        return records


def _entry(
    call_id: int,
    index: int,
    tool: str,
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
    kept: Callable[[Any], Any],
) -> dict[str, Any]:
    """A call as a checkpoint keeps it (`Store.checkpoint`'s ``pending`` and ``call``), each
    argument as ``kept`` keeps it."""
    return {
        "call_id": call_id,
        "index": index,
        "tool": tool,
        "args": tuple(kept(a) for a in args),
        "kwargs": {k: kept(v) for k, v in kwargs.items()},
    }


class _Room:
    """What one batch of records may still keep whole of the run's room in the store."""

    __slots__ = ("left", "summarized")

    def __init__(self, room: int) -> None:
        self.left = room
        self.summarized = False

    def kept(self, value: Any, secrets: tuple[str, ...]) -> Any:
        """`keepable`, within what is left (a short text or a number always fits)."""
        kept = keepable(value, secrets, max(TINY, min(KEEP_LIMIT_BYTES, self.left)))
        if kept is value:
            self.left -= quick_size(value, KEEP_LIMIT_BYTES) or 0
        elif type(kept) is Summary:
            self.summarized = True
        return kept


def _stored_record(call: ToolCall, secrets: tuple[str, ...], room: _Room) -> dict[str, Any]:
    record = Recorded.dict_of(call)
    record["args"] = tuple([room.kept(a, secrets) for a in call.args])
    record["kwargs"] = {k: room.kept(v, secrets) for k, v in call.kwargs.items()}
    record["result"] = room.kept(call.result, secrets)
    record["error"] = masked(call.error, secrets)
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
    run_id: str = ""
    origins: Mapping[str, Origin] = field(default_factory=dict)
    """Where each handle the run sent into Monty came from, by uuid (`_rebind`)."""
    given: Mapping[str, Any] = field(default_factory=dict)
    """The inputs given to the resumed run (the notebook's variables) its handles bind to."""
    objects: Mapping[str, Any] = field(default_factory=dict)
    """The objects the run sent in before it paused in this process (`held`), by uuid: bound
    before any input of the same name."""
    expect: str | None = None
    """The digest the person approved (`_approval`): the approved call is made only if it is
    the call that digest seals, else the run waits again."""

    def __post_init__(self) -> None:
        self._rebinder.check()  # a missing input: refused before the run is taken up

    @functools.cached_property
    def _rebinder(self) -> Rebinder:
        return Rebinder(self.run_id, self.origins, self.given, self.classes, self.objects)

    def rebind(self, value: Any) -> Any:
        """``value`` (a call's arguments) with the handles the run held before the restore
        bound again; `StoreError` names one that cannot be."""
        return self._rebinder.rebind(value)

    def bound(self) -> dict[int, tuple[str, Any]]:
        """The objects bound again so far, with the uuid each was bound for, by ``id``."""
        return self._rebinder.bound


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


def inputs_record(inputs: Mapping[str, Any]) -> dict[str, Any]:
    """A run's inputs as the store keeps them (record `INPUTS`); one holding a secret a sandbox
    tool returned in this process is not kept (`_scrub`)."""
    secrets = known()
    return {"inputs": {k: keepable(v, secrets) for k, v in inputs.items()}}


def stored_inputs(run: StoredRun, given: Mapping[str, Any] | None) -> dict[str, Any]:
    """The inputs a stored run was given, each one named in ``given`` replaced by it (other
    names in ``given`` are ignored). One the store could not keep (an object) must be given
    again, of the same type: `StoreError` says which."""
    record = run.calls.get(INPUTS)
    kept: dict[str, Any] = dict(record["inputs"]) if record else {}
    given = given or {}
    for name, value in kept.items():
        kind = handle_in(value)
        if kind is None:
            continue
        if name not in given:
            raise StoreError(missing_input(run.run_id, name, kind))
        if type_of(given[name]) != kind:
            raise StoreError(wrong_input(run.run_id, name, kind, f"a {type_of(given[name])}"))
    return {name: given.get(name, value) for name, value in kept.items()}


def changed_inputs(run: StoredRun, given: Mapping[str, Any]) -> list[str]:
    """The names of the inputs ``given`` now that differ from those failed run ``run`` had
    (given, dropped, or another value), sorted; none for a run that did not fail (a paused
    run, or one a killed kernel left running, continues from its snapshot as it is). Data
    too big to keep is compared by the digest of its `Summary`; an object or a secret is not
    compared: it cannot be, and a handle is bound again by its name anyway (`_rebind`)."""
    if run.status not in ("error", "interrupted"):
        return []
    record = run.calls.get(INPUTS)
    kept: dict[str, Any] = dict(record["inputs"]) if record else {}
    secrets = known()

    def changed(name: str) -> bool:
        if name not in kept or name not in given:
            return True
        old, now = kept[name], given[name]
        if type(old) is Summary:
            return not is_plain(now) or summary(now)["digest"] != old["digest"]
        return handle_in(old) is None and not same(old, keepable(now, secrets))

    return sorted(filter(changed, kept.keys() | given.keys()))


def inputs_changed(run_id: str, names: list[str]) -> str:
    """The one line a resume with other inputs says (`changed_inputs`)."""
    return (
        f"resume: input {', '.join(names)} changed since run {run_id} failed: its code runs "
        "from the top with these inputs, calls answered from its records while they match\n"
    )


def unkept_inputs(run: StoredRun, namespace: Mapping[str, Any]) -> dict[str, Any]:
    """The variables of ``namespace`` (a notebook's) that stored run ``run`` needs given again:
    those named like its inputs the store did not keep (objects, the handles' sources). Its
    other inputs stay the stored ones, whatever the notebook holds now."""
    record = run.calls.get(INPUTS)
    kept = record["inputs"] if record else {}
    return {
        name: namespace[name]
        for name, value in kept.items()
        if name in namespace and handle_in(value) is not None
    }


def keepable(value: Any, secrets: tuple[str, ...] = (), limit: int = KEEP_LIMIT_BYTES) -> Any:
    """``value`` if the store should keep it (plain data up to ``limit`` bytes, holding none
    of ``secrets``), else a `HandleMarker` naming its type (or `SECRET`): for plain data, its
    `Summary` (type, size, digest). A marker already (the trace kept a summary) stays one."""
    if issubclass(type(value), HandleMarker):  # not isinstance: a proxy's __class__ may raise
        return value
    if secrets and holds(value, secrets):
        return HandleMarker(SECRET)
    kind = type(value)
    if (  # the usual argument, kept without a walk: a float, a word-sized int, a short text
        kind in _SMALL
        or (kind is int and value.bit_length() <= 64)
        or (kind is str and len(value) <= min(_SHORT, limit))
    ):
        return value
    if is_plain(value):
        size = data_size(value, limit)
        return value if size <= limit else summary(value)
    return HandleMarker(f"{kind.__module__}.{kind.__qualname__}")


def handle_in(value: Any, depth: int = 0) -> str | None:
    """The type name of the first `HandleMarker` in ``value`` (a value the store did not
    keep), else None."""
    if isinstance(value, HandleMarker):
        return value["handle"]
    if depth < DEPTH_CEILING and type(value) in (list, tuple, set, frozenset, dict):
        items = value.values() if type(value) is dict else value
        for item in items:
            found = handle_in(item, depth + 1)
            if found is not None:
                return found
    return None


class DurableFeature(Feature):
    """A durable run, a feature of its run (`_hooks`): its calls' records and checkpoints go
    to the store through ``durable`` (a restored run: `Restored`).

    A sandbox call is slow and a gated one waits for a person: worth a checkpoint each (the
    gate asks for its own, `_approval.Gate`). Any other call checkpoints at most once a
    second (`Durable.due`); a call checkpoints at most once."""

    restore: Restore | None = None

    def __init__(self, durable: Durable) -> None:
        self.durable = durable
        self._at = -1
        """The number of the call last checkpointed at."""

    def attach(self, run: Driver) -> None:
        self.durable.scrub = run.scrub  # its store keeps no value holding one
        self.durable.warn = run.say

    def sent_inputs(self, inputs: Mapping[str, Any], sent: Mapping[str, Any]) -> None:
        self.durable.sent_inputs(inputs, sent)  # names the handles among them (`_rebind`)

    def call_started(
        self, run: Driver, snap: pm.FunctionSnapshot, call: ToolCall, number: int, tool: Tool
    ) -> Answer | None:
        if self._at != number and (isinstance(tool, SandboxTool) or self.durable.due()):
            self.checkpoint(run, snap, number, required=False, approval=None)
        return None

    def checkpoint(
        self,
        run: Driver,
        snap: pm.FunctionSnapshot,
        number: int,
        *,
        required: bool,
        approval: dict[str, Any] | None,
    ) -> None:
        self._at = number
        in_flight = {i: (run.numbers[id(c)], c) for i, c in run.pending.calls().items()}
        self.durable.checkpoint(snap, number, in_flight, required=required, approval=approval)

    def call_finished(self, call: ToolCall, number: int, sent: Any) -> None:
        self.durable.record(number, call, sent)  # ``sent`` names the handles in it

    def paused(self, run: Driver, call: ToolCall) -> None:
        # what an approval after a restart binds (`_rebind`)
        values = [*call.args, *call.kwargs.values()]
        run.result.bindings = self.durable.bindings(values, self.restore)
        tool = run.tools.get(call.tool)
        if tool is not None:  # what the approver reads beside the arguments
            run.result.described[call.tool] = tool.described()

    def end(self, run: Driver) -> None:
        self.durable.finish(run.result.status)


class Restored(DurableFeature):
    """A durable run taken up from its snapshot (``restore``): it starts there instead of the
    code's first line, and the handles it held before are bound again (`_rebind`)."""

    def __init__(self, durable: Durable, restore: Restore) -> None:
        super().__init__(durable)
        self.restore = self.snapshot = restore

    def attach(self, run: Driver) -> None:
        super().attach(run)
        note(secret_values(run.tools.values()), run.scrub)  # it may hold what they returned

    def begin(self, run: Driver, worker: pm.MontySession, stubs: str | None) -> pm.SyncSnapshot:
        return _restored(run, worker, self.snapshot)

    def rebind(self, value: Any) -> Any:
        return self.snapshot.rebind(value)  # the handles it held before the restore

    def complete(self, run: Driver, worker: pm.MontySession, value: Any) -> Any:
        return self.snapshot.rebind(value)  # a handle it returns, bound again


def _restored(run: Driver, worker: pm.MontySession, restore: Restore) -> pm.SyncSnapshot:
    """Load the snapshot a resumed run starts from (the code before it does not run
    again): the calls before it enter the trace from their records, and each async call
    that was in flight gets a future, answered from its record if it completed, else made
    again with the arguments the snapshot kept (the in-flight rule, see the module)."""
    trace = run.trace
    trace.origin = time.perf_counter()
    snap = worker.load_snapshot(restore.dump, print_callback=run.on_print)
    in_flight = {entry["index"]: entry for entry in restore.pending}
    for index in range(restore.index):
        old, entry = restore.calls.get(index), in_flight.get(index)
        source = entry if entry is not None else old.to_dict() if old is not None else None
        if source is None:
            continue
        call = ToolCall(
            call_id=source["call_id"],
            tool=source["tool"],
            args=tuple(source["args"]),
            kwargs=dict(source["kwargs"]),
            start=0.0,
            origin=trace.origin,
        )
        run.numbers[id(call)] = index
        trace.add(call)
        if old is not None and old.status == "ok":
            call.replayed, call.result, call.children = True, old.result, list(old.children)
        if entry is None:  # it had ended before the snapshot
            call.end, call.error = 0.0, None if old is None else old.error
            continue
        if call.replayed:
            run.pending.settled(entry["call_id"], call.result, call)
        else:  # made again: the handles it was passed, bound again (`_rebind`)
            args, kwargs = restore.rebind((call.args, call.kwargs))
            coro = run.tools[call.tool].invoke(call, args, kwargs)
            run.pending.start(entry["call_id"], coro, call)
    run.calls_made = restore.index
    return snap

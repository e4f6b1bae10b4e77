"""Taking a stored run up again: `begin` a durable run, `take_up` one, `fork` one.

`begin` makes a run with a store durable (see `_durable`); `take_up` readies a stored run to
be continued (`resume_run`), in this process or any other that can open the store, and `fork`
a new run of a stored run's code with one call's result replaced (`fork_run`). Each hands
back what the run's features need (`Taken`); the plan (`.._plan`) makes the run's driver
from it, as it makes every run's: this package holds no door.

A run is continued by one process at a time: the store records which process runs it
(`RunOwner`). A run left ``running`` is taken up only once that process is gone (a kernel
killed with ``kill -9``); while it lives, resuming it is refused, since both would make its
calls. Taking a run up is one conditional write (`Store.claim`): of two processes racing for
it, one wins.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..._shared._errors import SandboxConfigError, StoreError
from .._driver import Driver
from .._limits import Limits
from .._memo import Recorded
from .._replay import Answers
from .._tool import Tool
from ._durable import (
    INPUTS,
    Durable,
    Restore,
    changed_inputs,
    held,
    inputs_changed,
    inputs_record,
    stored_calls,
    stored_inputs,
)
from ._rebind import defined_classes, stored_origins
from ._sessions import SessionLink, sessions, with_limits
from ._store import Store, StoredRun, this_process


def begin(
    store: Store,
    *,
    code: str,
    tools: Mapping[str, Tool],
    inputs: Mapping[str, Any],
    scope: str,
    cell: str | None,
    resume: bool,
    run_id: str | None,
    limits: Limits,
    session: str | None = None,
    told: Callable[[str], None] | None = None,
) -> tuple[Durable, Restore | None, dict[int, Recorded] | None]:
    """A durable run of ``code``: its link to the store, the snapshot it resumes from, and
    the stored calls that answer its own.

    With ``resume``, the run taken up is ``run_id``, else the last run of ``cell`` (by
    default the code's hash) in ``scope``, unless it ended ok. The same code with a snapshot
    continues that run from its snapshot, under ``limits`` (not the limits it was dumped
    with); other code (the cell was edited) is a new run whose
    calls are answered from the old run's records while it repeats them. A run that failed
    (or was interrupted) is continued from its snapshot only if it is given the inputs it had:
    its snapshot holds the old ones, so a person who mended an input (a bad ``k``, a loop
    bound that hit ``--timeout``) would get the same failure again, forever. Given other
    inputs it is a new run of the code from the top, its calls answered from the old run's
    records while they match (`changed_inputs`; ``told`` gets the one line that says so). A
    run paused at a gate, or left running by a killed kernel, is continued from its snapshot
    whatever the inputs (its code already ran past them). A run still running in a live
    process is refused (`StoreError`). ``session``: the session a new run continues (a paused
    one updates it when it is approved and completes)."""
    cell = cell or hashlib.sha256(code.encode()).hexdigest()[:16]
    if resume:
        stored = store.run(run_id) if run_id else store.last_run(scope, cell)
        if stored is not None and stored.status != "ok":
            _refuse_if_running(stored)
            calls = stored_calls(stored)
            changed = changed_inputs(stored, inputs)
            if changed and told is not None:
                told(inputs_changed(stored.run_id, changed))
            if stored.code == code and stored.checkpoint is not None and not changed:
                restore = _restore(stored, calls, None, limits, inputs)
                return _taken_up(store, stored, None), restore, calls
            return _fresh(store, scope, cell, code, tools, inputs, session=session), None, calls
    return _fresh(store, scope, cell, code, tools, inputs, session=session), None, None


def _fresh(
    store: Store,
    scope: str,
    cell: str,
    code: str,
    tools: Mapping[str, Tool],
    inputs: Mapping[str, Any],
    forked_from: tuple[str, int] | None = None,
    session: str | None = None,
) -> Durable:
    """A new run in the store, its inputs recorded (record `INPUTS`)."""
    run_id = store.new_run(
        scope=scope,
        cell=cell,
        code=code,
        tools=sorted(tools),
        forked_from=forked_from,
        session=session,
    )
    store.record_call(run_id, INPUTS, inputs_record(inputs))
    return Durable(store, run_id)


def _refuse_if_running(stored: StoredRun) -> None:
    """`StoreError` if ``stored`` is running in a process that is alive (this one included:
    a run in another thread): continuing it here would make its calls twice."""
    owner = stored.owner
    if stored.status == "running" and owner is not None and owner.alive():
        mine = owner == this_process()
        where = f"this process ({owner.process.pid})" if mine else f"process {owner.process.pid}"
        if owner.host != this_process().host:
            where += f" on {owner.host}"
        raise StoreError(f"run {stored.run_id} is running in {where}: interrupt it there or wait")


def _taken_up(store: Store, stored: StoredRun, tools: Mapping[str, Tool] | None) -> Durable:
    """The stored run continued under its own id: claimed (status running again and owned by
    this process, if it is still what ``stored`` says: a paused run is continued once,
    whoever approves it twice, and a dead kernel's run is taken over once). Each tool it had
    that its code names must be among ``tools``."""
    if tools is not None:
        named = set(re.findall(r"\w+", stored.code))
        missing = sorted(set(stored.tools) & named - set(tools))
        if missing:
            raise StoreError(
                f"run {stored.run_id} used tools that are not registered now: "
                f"{', '.join(missing)}; register them (@tool) or pass tools=[...]"
            )
    if not store.claim(stored.run_id, stored.status, stored.owner):
        raise StoreError(
            f"run {stored.run_id} was taken up by another process meanwhile (it was "
            f"{stored.status}): see its state with Store.runs()"
        )
    return Durable(store, stored.run_id, was=(stored.status, stored.owner))


def driven(durable: Durable | None, make: Callable[[], Driver]) -> Driver:
    """``make()``: the driver of a run begun or taken up in the store as ``durable``. Until
    the driver exists nothing would end that run, so if making it fails (a run nested too
    deep, a Ctrl-C landing there) the run is given back (`Durable.give_back`)."""
    try:
        return make()
    except BaseException as exc:
        if durable is not None:
            durable.give_back(exc)
        raise


def _restore(
    stored: StoredRun,
    calls: dict[int, Recorded],
    decision: tuple[bool, str | None] | None,
    limits: Limits,
    given: Mapping[str, Any] | None,
    expect: str | None = None,
) -> Restore | None:
    """What the run resumes from: its latest snapshot, with ``limits`` put into it (a dump
    restores the limits of the run that made it); the objects it sent into Monty before it
    paused in this process (`held`), else ``given`` (by name), bind again the handles it
    holds (`_rebind`); ``expect``: the digest of the call approved (`_approval`)."""
    saved = stored.checkpoint
    if saved is None:
        return None
    return Restore(
        dump=with_limits(saved.dump, limits),
        index=saved.call_index,
        pending=saved.pending,
        decision=decision,
        calls=calls,
        classes=defined_classes(stored.code),
        run_id=stored.run_id,
        origins=stored_origins(stored.calls),
        given=given or {},
        objects=held(stored.run_id),
        expect=expect,
    )


@dataclass(frozen=True, slots=True)
class Taken:
    """A stored run made ready to run again (`take_up`, `fork`): the code and inputs it runs
    with, its link to the store, the snapshot it resumes from, the calls its records answer,
    its session, and what its result carries (``run_id``, ``forked_from``, ``session``)."""

    code: str
    inputs: Mapping[str, Any]
    durable: Durable
    restore: Restore | None
    answers: Answers
    link: SessionLink | None
    run_id: str
    forked_from: tuple[str, int] | None
    session: str | None


def take_up(
    store: Store,
    run_id: str,
    *,
    approve: bool | None,
    reason: str | None,
    expect: str | None,
    tools: Mapping[str, Tool],
    inputs: Mapping[str, Any] | None,
    limits: Limits,
) -> Taken:
    """Stored run ``run_id`` claimed by this process to be continued (see `resume_run` for
    what each argument does); refused with a one-line `StoreError` or `SandboxConfigError`
    before anything is claimed."""
    stored = store.run(run_id)
    if stored.status == "ok":
        raise StoreError(
            f"run {run_id} ended ok: nothing to resume; fork_run({run_id!r}, N, value=...) "
            "runs it again with call N's result replaced"
        )
    _refuse_if_running(stored)
    paused = stored.status == "paused"
    if paused and approve is None:
        raise SandboxConfigError(
            f"run {run_id} is paused for approval: pass approve=True or approve=False",
            parameter="approve",
        )
    if not paused and approve is not None:
        raise SandboxConfigError(
            f"run {run_id} is {stored.status}, not paused: approve= answers a paused run's "
            "gated call; leave it out",
            parameter="approve",
        )
    calls = stored_calls(stored)
    decision = None if approve is None else (approve, reason)
    restore = _restore(stored, calls, decision, limits, inputs, expect)
    link = None  # its dump is read (and may be refused) before the run is taken up
    if stored.session is not None:
        link = sessions.open(stored.session, scope=stored.scope, store=store)
    given = {} if restore is not None else stored_inputs(stored, inputs)
    durable = _taken_up(store, stored, tools)  # last: what fails before leaves it as it was
    return Taken(
        code=stored.code,
        inputs=given,
        durable=durable,
        restore=restore,
        answers=Answers(calls),
        link=link,
        run_id=stored.run_id,
        forked_from=stored.forked_from,
        session=stored.session,
    )


def fork(
    store: Store,
    run_id: str,
    call_index: int,
    value: Any,
    *,
    tools: Mapping[str, Tool],
    inputs: Mapping[str, Any] | None,
) -> Taken:
    """A new run of stored run ``run_id``'s code, its call numbered ``call_index`` answered
    with ``value`` and the calls before it from their records (see `fork_run`)."""
    stored = store.run(run_id)
    calls = stored_calls(stored)
    index = _numbered(stored.run_id, calls, call_index)
    given = stored_inputs(stored, inputs)
    forked_from = (run_id, call_index)
    durable = _fresh(store, stored.scope, stored.cell, stored.code, tools, given, forked_from)
    return Taken(
        code=stored.code,
        inputs=given,
        durable=durable,
        restore=None,
        answers=Answers({i: c for i, c in calls.items() if i < index}, fixed={index: value}),
        link=None,
        run_id=durable.run_id,
        forked_from=forked_from,
        session=None,
    )


_LISTED = 12
"""Call numbers a fork's error lists before it abbreviates."""


def _numbered(run_id: str, calls: Mapping[int, Recorded], number: object) -> int:
    """The order (0-based, what the store keys records by) of the call whose trace number
    (``#``, its call id) is ``number``; `SandboxConfigError` listing the valid ones if none."""
    found = {call.call_id: index for index, call in calls.items()}
    if isinstance(number, int) and not isinstance(number, bool) and number in found:
        return found[number]
    numbers = [f"#{n}" for n in sorted(found)]
    if len(numbers) > _LISTED:
        numbers = [*numbers[: _LISTED - 2], "...", numbers[-1]]
    made = f"calls {', '.join(numbers)}" if numbers else "no tool call"
    raise SandboxConfigError(
        f"call_index: run {run_id} has no call #{number}; it made {made} (the trace's # column)",
        parameter="call_index",
    )

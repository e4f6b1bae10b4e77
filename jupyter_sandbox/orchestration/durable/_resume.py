"""Taking a stored run up again: `begin` a durable run, `resume_run`, `fork_run`.

`begin` makes a run with a store durable (see `_durable`); `resume_run` continues a stored
run, in this process or any other that can open the store, and `fork_run` runs a stored run's
code again with one call's result replaced. Each builds its run's features (`.._plug`) and
runs its driver with the runner every run uses (`.._runs.wait`).

A run is continued by one process at a time: the store records which process runs it
(`RunOwner`). A run left ``running`` is taken up only once that process is gone (a kernel
killed with ``kill -9``); while it lives, resuming it is refused, since both would make its
calls. Taking a run up is one conditional write (`Store.claim`): of two processes racing for
it, one wins.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Callable, Mapping
from typing import Any

from ..._errors import SandboxConfigError, StoreError
from ..._events import EventCallback, ToolCall, ignore
from .. import _plug
from .._approval import govern, hand_down
from .._driver import Driver, parent_loop
from .._limits import Limits, resolve_limits
from .._memo import Recorded
from .._otel import Traced, Untraced, traced
from .._registry import Tools, resolve_tools
from .._replay import Answers
from .._result import OrchestrationResult, answered
from .._runs import wait
from .._runtime import tool_loop
from .._tool import Tool
from ._durable import (
    INPUTS,
    Durable,
    Restore,
    changed_inputs,
    held,
    inputs_changed,
    inputs_record,
    open_store,
    stored_calls,
    stored_inputs,
)
from ._rebind import defined_classes, stored_origins
from ._sessions import SessionLink, sessions, with_limits
from ._store import Store, StoredRun, default_store_path, this_process


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


def _stored_driver(
    stored: StoredRun,
    tools: Mapping[str, Tool],
    inputs: Mapping[str, Any],
    limits: Limits,
    durable: Durable,
    on_event: EventCallback | None,
    approver: Callable[[ToolCall], bool] | None,
    *,
    type_check: bool,
    answers: Answers,
    session: SessionLink | None = None,
    restore: Restore | None = None,
) -> Driver:
    """The driver of ``stored``'s code, continued or forked as ``durable`` (`driven`); its
    gates' policy is handed down to the runs nested in its tools (`_approval`)."""
    policy = govern(tools, approver, durable=True)
    features = _plug.plug(
        tools,
        answers=answers,
        session=session,
        durable=durable,
        restore=restore,
        policy=policy,
    )
    driver = driven(
        durable,
        lambda: Driver(
            stored.code,
            tools,
            inputs,
            limits,
            type_check=type_check,
            on_event=on_event or ignore,
            loop=tool_loop(parent_loop()),
            features=features,
        ),
    )
    return hand_down(driver, policy)


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


def resume_run(
    run_id: str,
    approve: bool | None = None,
    reason: str | None = None,
    *,
    store: Store | str | os.PathLike[str] | None = None,
    tools: Tools = None,
    inputs: Mapping[str, Any] | None = None,
    on_event: EventCallback | None = None,
    limits: Limits | None = None,
    approver: Callable[[ToolCall], bool] | None = None,
    expect: str | None = None,
) -> OrchestrationResult:
    """Continue stored run ``run_id``, in this process or any other that can open the store.

    A paused run needs ``approve``: True makes the gated call it stopped at, False makes the
    code see ``PermissionError(reason)`` there (the code may catch it). ``expect``: the
    digest of the call being approved, as its record or ``%orchestrate_pending`` showed it;
    if the call about to be made is another (a handle bound after a restart to a variable
    that changed), it is not made: the result is the run paused again with the call as it is
    now, and ``refused`` says why. In the process the run paused in, its handle arguments
    are the objects it was given, not the notebook variables of those names now. A run that stopped
    otherwise (its kernel was killed, it failed or was interrupted) is continued without one.
    The run starts from its latest snapshot in a fresh worker: code before it does not run
    again; calls with a completed record are answered from it, the others are made again
    (see `_durable`); without a snapshot the code runs from the start with its calls
    answered from their records. The result is the run's (same ``run_id``): it may pause
    again at a later gated call, which ``approver`` may answer inline instead. A run of a
    session (``session=`` / ``--session``) leaves its state in that session when it completes,
    as the cell would have (replacing what cells of the session ran meanwhile).

    ``store`` defaults to `default_store_path()`; ``tools`` to the registered tools (a
    tool the run used that is missing raises `StoreError` naming it); ``inputs`` give again,
    by name, the objects the store could not keep (a DataFrame the run was handed): with a
    snapshot, each handle the code passes a tool is bound again to the input of its name,
    which must have the same type; a handle a tool returned before the restart cannot be
    (`StoreError` names its call). Raises `StoreError` for an unknown run, a run that
    ended ok (`fork_run` runs it again), a run still running in a live process, or a saved
    blob that fails its checks.
    """
    opened = open_store(default_store_path() if store is None else store)
    stored = opened.run(run_id)
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
    resolved = resolve_tools(tools)
    calls = stored_calls(stored)
    decision = None if approve is None else (approve, reason)
    resolved_limits = resolve_limits(limits)
    restore = _restore(stored, calls, decision, resolved_limits, inputs, expect)
    session = None  # its dump is read (and may be refused) before the run is taken up
    if stored.session is not None:
        session = sessions.open(stored.session, scope=stored.scope, store=opened)
    given = {} if restore is not None else stored_inputs(stored, inputs)
    durable = _taken_up(opened, stored, resolved)  # last: what fails before leaves it as it was
    run = traced(on_event, approver, **{"run.resume": True, "run.approved": approve})
    driver = _stored_driver(
        stored,
        resolved,
        given,
        resolved_limits,
        durable,
        run.on_event,
        run.approver,
        type_check=False,  # the code is the run's: it was checked when the run began
        answers=Answers(calls),
        session=session,
        restore=restore,
    )
    driver.result.run_id = stored.run_id
    driver.result.forked_from = stored.forked_from
    driver.result.session = stored.session
    if approve is not None:
        driver.result.answer = answered(approve, reason)
    return _traced_wait(run, driver)


def fork_run(
    run_id: str,
    call_index: int,
    value: Any = None,
    *,
    store: Store | str | os.PathLike[str] | None = None,
    tools: Tools = None,
    inputs: Mapping[str, Any] | None = None,
    on_event: EventCallback | None = None,
    limits: Limits | None = None,
    approver: Callable[[ToolCall], bool] | None = None,
) -> OrchestrationResult:
    """Run stored run ``run_id``'s code again as a new durable run, with the call numbered
    ``call_index`` in its trace (the ``#`` column: Monty's call id, which sleeps and OS calls
    also take numbers from) answered with ``value``: what-if debugging without making the
    expensive calls again.

    The calls before it are answered from the stored records while the code
    repeats them (one that had failed is made again, as ``--resume`` does); the calls after
    it are made live. The run's stored inputs are used; ``inputs`` replaces them by name (an
    object the store could not keep must be given again: `StoreError` names it). The result
    (and its record) carries ``forked_from = (run_id, call_index)`` and its own ``run_id``.
    """
    opened = open_store(default_store_path() if store is None else store)
    stored = opened.run(run_id)
    calls = stored_calls(stored)
    index = _numbered(stored.run_id, calls, call_index)
    resolved = resolve_tools(tools)
    given = stored_inputs(stored, inputs)
    forked_from = (run_id, call_index)
    resolved_limits = resolve_limits(limits)
    durable = _fresh(opened, stored.scope, stored.cell, stored.code, resolved, given, forked_from)
    run = traced(on_event, approver, **{"run.forked_from": run_id, "run.fork_call": call_index})
    driver = _stored_driver(
        stored,
        resolved,
        given,
        resolved_limits,
        durable,
        run.on_event,
        run.approver,
        type_check=True,
        answers=Answers({i: c for i, c in calls.items() if i < index}, fixed={index: value}),
    )
    driver.result.run_id = durable.run_id
    driver.result.forked_from = forked_from
    return _traced_wait(run, driver)


def _traced_wait(run: Traced | Untraced, driver: Driver) -> OrchestrationResult:
    """`wait` for a stored run's driver inside its span (`_otel.traced`)."""
    with run:
        run.scrubbing(driver.scrub)
        return run.done(wait(driver))


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

"""The doors of the orchestration engine: `orchestrate`, `orchestrate_async`,
`orchestrate_local`, `resume_run`, `fork_run`.

Each is a few lines: it builds one `RunSpec` from its parameters (by name, so a reader can
follow ``store`` from here to the loop), gives it to `_plan.plan` for a ready `Driver` and
runs that with the runner every run uses (`_run_thread`), inside the run's span when tracing is
on (`_otel`). No door assembles a driver itself; the durable subsystem holds none of them.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Never

from .._shared._events import EventCallback, ToolCall
from .._shared._text import unindented
from ._driver import Driver, parent_loop
from ._keep import Keep
from ._limits import Limits, seconds_from_ms
from ._memo import Journal, ToolCache
from ._orchestrator import with_flyte_map
from ._otel import traced_spec
from ._plan import plan
from ._registry import Tools, resolve_tools
from ._result import OrchestrationResult
from ._run_thread import start, wait
from ._spec import DEFAULT_LIMITS, Fork, RunSpec, TakeUp, refuse_flat
from ._workers import tool_loop

if TYPE_CHECKING:  # named only: the durable subsystem loads when a run has a store
    from .durable import Store


def orchestrate(
    code: str,
    *,
    tools: Tools = None,
    inputs: Mapping[str, Any] | None = None,
    limits: Limits | None = None,
    type_check: bool = True,
    on_event: EventCallback | None = None,
    journal: Journal | None = None,
    resume: bool = False,
    cache: ToolCache | None = None,
    session: str | None = None,
    scope: str = "default",
    store: Store | str | os.PathLike[str] | None = None,
    run_id: str | None = None,
    approver: Callable[[ToolCall], bool] | None = None,
    cell: str | None = None,
    keep: Keep | None = None,
    **removed: Never,
) -> OrchestrationResult:
    """Run ``code`` in the Monty sandbox, where it can call only ``tools``.

    ``tools`` is a list of functions/`Tool` objects or a name->function mapping; None means
    every tool registered with ``@tool``. ``inputs`` are bound as globals. The value of the
    last expression is ``result.value``; prints go to ``result.stdout`` and, as they happen,
    to ``on_event`` as `Output` events, along with `CallStarted`/`CallFinished` for each call.
    ``limits`` bounds the run (`Limits()`, the defaults, when None): every limit is a field
    of `Limits`, one spelling (``limits=Limits(timeout=5)``).
    Raises an `OrchestrationError` subclass on failure; Ctrl-C stops the run within a second,
    even while a sync tool runs: that call is recorded as abandoned and its thread left to
    finish on its own (Python cannot stop a thread), while its worker goes back to the pool.

    A tool may itself call ``orchestrate``, up to `NESTING_CEILING` levels below the cell; a
    deeper call raises `LimitExceeded` at once. Any exception a tool raises, ``SystemExit``
    and ``KeyboardInterrupt`` included, is that call's failure: the code sees it as the
    nearest builtin exception Monty knows (a plain ``Exception`` for those two), and uncaught
    it ends the run as a `ToolError`.

    ``journal`` records this run's tool calls; with ``resume=True`` the calls its previous run
    completed are answered from it (same tool, arguments and order) instead of being made
    again. ``cache`` answers calls by tool and arguments across runs. Both mark such calls
    ``replayed`` in the trace.

    ``session`` names a session: the code starts with the variables, functions and classes
    the last completed run of that session (in ``scope``, a notebook) left, and the type
    check knows them; the run leaves its own for the next. Limits apply to this run alone.

    ``store`` (a `Store` or its path) makes the run durable (see `_durable`): its calls'
    records (in batches, at most a second late) and Monty snapshots (before each sandbox or
    gated call, else at most once a second) are written as it goes, under a run id
    (``result.run_id``) kept by ``scope`` (the notebook) and ``cell`` (default: a hash of the
    code). With ``resume=True`` it continues run ``run_id``, or the last run of this cell
    unless that ended ok: the same code from its latest snapshot (code before it does not run
    again, calls whose records were written are not made again), edited code answered from
    its records while it repeats them. Without a store the run and its cost are what they
    always were.

    A tool with ``approve=`` gates its calls: ``approver(call) -> bool`` answers inline (a
    rejected call raises ``PermissionError`` in the code, which may catch it); with no
    approver a durable run pauses, returning a result with ``status == "paused"``, its
    ``run_id`` and the ``pending`` call, for `resume_run` to continue in any process; with
    neither, a gated call fails the run (`OrchestrationError`) saying to pass one.

    ``keep`` bounds the bytes of tool values the run keeps (its trace, journal and, with a
    store, what it writes there): `Keep()`, the defaults, when None; see `_keep`.
    """
    refuse_flat("orchestrate", removed)
    spec = RunSpec(
        code=code,
        tools=resolve_tools(tools),
        inputs=inputs or {},
        limits=DEFAULT_LIMITS if limits is None else limits,
        keep=keep,
        type_check=type_check,
        on_event=on_event,
        approver=approver,
        journal=journal,
        cache=cache,
        store=store,
        session=session,
        scope=scope,
        cell=cell,
        run_id=run_id,
        resume=resume,
    )
    return run_spec(spec)


async def orchestrate_async(
    code: str,
    *,
    tools: Tools = None,
    inputs: Mapping[str, Any] | None = None,
    limits: Limits | None = None,
    type_check: bool = True,
    on_event: EventCallback | None = None,
    journal: Journal | None = None,
    resume: bool = False,
    cache: ToolCache | None = None,
    session: str | None = None,
    scope: str = "default",
    store: Store | str | os.PathLike[str] | None = None,
    run_id: str | None = None,
    approver: Callable[[ToolCall], bool] | None = None,
    cell: str | None = None,
    keep: Keep | None = None,
    **removed: Never,
) -> OrchestrationResult:
    """`orchestrate` for a running event loop: async tools run on this loop, so they may use
    clients bound to it; cancelling the awaiting task stops the sandbox."""
    refuse_flat("orchestrate_async", removed)
    spec = RunSpec(
        code=code,
        tools=resolve_tools(tools),
        inputs=inputs or {},
        limits=DEFAULT_LIMITS if limits is None else limits,
        keep=keep,
        type_check=type_check,
        on_event=on_event,
        approver=approver,
        journal=journal,
        cache=cache,
        store=store,
        session=session,
        scope=scope,
        cell=cell,
        run_id=run_id,
        resume=resume,
    )
    return await run_spec_async(spec)


async def orchestrate_local(
    source: str,
    *,
    inputs: Mapping[str, Any],
    tasks: Tools = None,
    timeout_ms: int = 30_000,
) -> Any:
    """Flyte's ``flyte.sandbox.orchestrate_local``, same parameters: run ``source`` with
    ``tasks`` as its tools and return its value. ``source`` indented as a whole (a
    triple-quoted string inside a function) is unindented, as Flyte does. ``timeout_ms`` is
    `Limits.timeout` in milliseconds; every other limit is its default (`orchestrate_async`
    takes them all). Flyte's built-in ``flyte_map`` is there when the code names it
    (`with_flyte_map`)."""
    code = unindented(source) if isinstance(source, str) else source
    spec = RunSpec(
        code=code,
        tools=with_flyte_map(resolve_tools(tasks), code),
        inputs=inputs,
        limits=Limits(timeout=seconds_from_ms(timeout_ms)),
    )
    return (await run_spec_async(spec)).value


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
    spec = RunSpec(
        code="",  # the stored run's own (`_plan`)
        tools=resolve_tools(tools),
        inputs=inputs or {},
        limits=DEFAULT_LIMITS if limits is None else limits,
        type_check=False,  # the code is the run's: it was checked when the run began
        on_event=on_event,
        approver=approver,
        store=_default_store(store),
        resume=TakeUp(run_id, approve, reason, expect),
    )
    return run_spec(spec)


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
    spec = RunSpec(
        code="",  # the stored run's own (`_plan`)
        tools=resolve_tools(tools),
        inputs=inputs or {},
        limits=DEFAULT_LIMITS if limits is None else limits,
        on_event=on_event,
        approver=approver,
        store=_default_store(store),
        resume=Fork(run_id, call_index, value),
    )
    return run_spec(spec)


def _default_store(store: Store | str | os.PathLike[str] | None) -> Store | str | os.PathLike[str]:
    if store is not None:
        return store
    from .durable import default_store_path

    return default_store_path()


def run_spec(spec: RunSpec) -> OrchestrationResult:
    """Run ``spec`` on this thread's tool loop and wait for it (Ctrl-C stops it), inside its
    span when tracing is on: what every synchronous door ends with."""
    with traced_spec(spec) as run:
        driver = plan(run.spec(spec), tool_loop(parent_loop()))
        run.scrubbing(driver.scrub)
        return run.done(wait(driver))


async def run_spec_async(spec: RunSpec) -> OrchestrationResult:
    """`run_spec` on the running event loop: cancelling the awaiting task stops the run."""
    with traced_spec(spec) as run:
        driver = plan(run.spec(spec), asyncio.get_running_loop())
        run.scrubbing(driver.scrub)
        return run.done(await _awaited(driver))


async def _awaited(driver: Driver) -> OrchestrationResult:
    try:
        return await asyncio.wrap_future(start(driver))
    except asyncio.CancelledError:
        driver.stop()
        raise

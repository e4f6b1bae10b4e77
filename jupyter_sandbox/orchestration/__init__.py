"""The orchestration engine: Python run in Monty that can call only registered tools.

No IPython here: the magic is a thin shell over `orchestrate`. Each call checks out a fresh
Monty session (no state leaks between cells), drives it on a worker thread and waits on the
calling thread, which therefore stays interruptible.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from .._events import EventCallback, Output, ToolCall, ignore
from .._public import lazy, publish_top_level

# The front door for the other packages (not public API: not in __all__).
from ._approval import full_repr as full_repr
from ._approval import govern, hand_down
from ._confine import ACCOUNT_FILES as ACCOUNT_FILES
from ._confine import ids_taken as ids_taken
from ._confine import launcher_works as launcher_works
from ._driver import NESTING_CEILING, Driver, parent_loop
from ._keep import MB as MB
from ._keep import Keep
from ._limits import Limits, resolve_limits, seconds_from_ms
from ._mcp import MCPTool, MCPTools, tools_from_mcp
from ._mcp_serve import Serving as Serving
from ._mcp_serve import mcp_cell as mcp_cell
from ._mcp_serve import mcp_outcomes as mcp_outcomes
from ._mcp_serve import serve_mcp as serve_mcp
from ._memo import Journal, ToolCache
from ._memo import Journals as Journals
from ._options import RunOptions
from ._orchestrator import Orchestrator, orchestrator, orchestrator_from_str, with_flyte_map
from ._orchestrator import presenter as presenter
from ._otel import traced_options
from ._plug import plug
from ._registry import Tool, ToolRegistry, registry, resolve_tools, tool
from ._registry import Tools as Tools  # codemode reads it here
from ._replay import Answers
from ._result import OrchestrationResult
from ._result import answered as answered
from ._result import result_of as result_of
from ._runs import start, wait
from ._runtime import confinement as confinement
from ._runtime import tool_loop
from ._sandbox_tool import bind_inputs as bind_inputs
from ._stubs import build_stubs
from ._stubs import stubs as stubs
from ._values import is_plain as is_plain

_DURABLE = (
    "KEY_BYTES",
    "CallNow",
    "PausedRun",
    "Store",
    "call_now",
    "check_private_file",
    "check_private_folder",
    "default_store_path",
    "fork_run",
    "open_store",
    "paused_runs",
    "read_whole",
    "resume_run",
    "run_status",
    "sessions",
    "unkept_inputs",
    "unseen",
)
"""The durable subsystem's names handed on here, imported on first use (`__getattr__`): a
run without a store, and ``%load_ext``, load neither it nor SQLite."""

if TYPE_CHECKING:  # what __getattr__ imports on first use (_DURABLE)
    from .durable import KEY_BYTES as KEY_BYTES
    from .durable import CallNow as CallNow
    from .durable import PausedRun as PausedRun
    from .durable import Store as Store
    from .durable import call_now as call_now
    from .durable import check_private_file as check_private_file
    from .durable import check_private_folder as check_private_folder
    from .durable import default_store_path as default_store_path
    from .durable import fork_run as fork_run
    from .durable import open_store as open_store
    from .durable import paused_runs as paused_runs
    from .durable import read_whole as read_whole
    from .durable import resume_run as resume_run
    from .durable import run_status as run_status
    from .durable import sessions as sessions
    from .durable import unkept_inputs as unkept_inputs
    from .durable import unseen as unseen

__all__ = [
    "NESTING_CEILING",
    "Journal",
    "Keep",
    "Limits",
    "MCPTool",
    "MCPTools",
    "OrchestrationResult",
    "Orchestrator",
    "Store",
    "Tool",
    "ToolCache",
    "ToolRegistry",
    "build_stubs",
    "default_store_path",
    "fork_run",
    "orchestrate",
    "orchestrate_async",
    "orchestrate_local",
    "orchestrator",
    "orchestrator_from_str",
    "registry",
    "resume_run",
    "tool",
    "tools_from_mcp",
]


def _driver(loop: asyncio.AbstractEventLoop, o: RunOptions) -> Driver:
    """A `Driver` for one run of `orchestrate` or `orchestrate_async` (whose parameters are
    the same: see `RunOptions`), its async tools on ``loop``."""
    code, tools, inputs = o.code, resolve_tools(o.tools), o.inputs or {}
    journal, resume = o.journal, o.resume
    if o.store is not None or o.session is not None:  # only then: the durable subsystem
        from .durable import begin, driven, open_store, sessions
    store = None if o.store is None else open_store(o.store)
    keep = o.keep or Keep()
    if store is not None and o.keep is not None:
        store.caps = o.keep  # what the store keeps is the store's (`Store.make_room`)
    limits = resolve_limits(
        o.limits,
        timeout=o.timeout,
        max_memory=o.max_memory,
        max_calls=o.max_calls,
        max_result=o.max_result,
        max_output=o.max_output,
    )
    # A session's dump is read (and may be refused) before `begin` takes a stored run up.
    session = None if o.session is None else sessions.open(o.session, scope=o.scope, store=store)
    durable = restore = records = None
    if store is not None:
        durable, restore, records = begin(
            store,
            code=code,
            tools=tools,
            inputs=inputs,
            scope=o.scope,
            cell=o.cell,
            resume=resume,
            run_id=o.run_id,
            limits=limits,  # a resumed snapshot runs under these, not its own
            session=o.session,
            told=lambda line: (o.on_event or ignore)(Output("stderr", line)),
        )
    if journal is not None and resume and restore is None and (records is None or journal.failed):
        # this kernel's own journal keeps the values themselves (the store only plain data)
        records = dict(enumerate(journal.calls))
    answers = None
    if o.cache is not None or records:
        answers = Answers(records, o.cache)
    policy = govern(tools, o.approver, durable=durable is not None)
    features = plug(
        tools,
        journal=journal,
        answers=answers,
        session=session,
        durable=durable,
        restore=restore,
        policy=policy,
    )

    def make() -> Driver:
        return Driver(
            code,
            tools,
            inputs,
            limits,
            type_check=o.type_check and restore is None,  # a snapshot's code was checked
            on_event=o.on_event or ignore,
            loop=loop,
            features=features,
            keep=keep,
        )

    driver = hand_down(make() if durable is None else driven(durable, make), policy)
    driver.result.run_id = None if durable is None else durable.run_id
    driver.result.session = o.session
    return driver


def orchestrate(
    code: str,
    *,
    tools: Tools = None,
    inputs: Mapping[str, Any] | None = None,
    limits: Limits | None = None,
    timeout: float | None = None,
    max_memory: int | None = None,
    max_calls: int | None = None,
    max_result: int | None = None,
    max_output: int | None = None,
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
) -> OrchestrationResult:
    """Run ``code`` in the Monty sandbox, where it can call only ``tools``.

    ``tools`` is a list of functions/`Tool` objects or a name->function mapping; None means
    every tool registered with ``@tool``. ``inputs`` are bound as globals. The value of the
    last expression is ``result.value``; prints go to ``result.stdout`` and, as they happen,
    to ``on_event`` as `Output` events, along with `CallStarted`/`CallFinished` for each call.
    ``limits`` bounds the run (`Limits()`, the defaults, when None); ``timeout``,
    ``max_memory``, ``max_calls``, ``max_result`` and ``max_output`` set one field each and
    win over the same field of ``limits``.
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
    options = RunOptions(**locals())
    with traced_options(options) as run:  # its span, when tracing is on (`_otel`)
        driver = _driver(tool_loop(parent_loop()), run.options(options))
        run.scrubbing(driver.scrub)
        return run.done(wait(driver))


async def orchestrate_async(
    code: str,
    *,
    tools: Tools = None,
    inputs: Mapping[str, Any] | None = None,
    limits: Limits | None = None,
    timeout: float | None = None,
    max_memory: int | None = None,
    max_calls: int | None = None,
    max_result: int | None = None,
    max_output: int | None = None,
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
) -> OrchestrationResult:
    """`orchestrate` for a running event loop: async tools run on this loop, so they may use
    clients bound to it; cancelling the awaiting task stops the sandbox."""
    options = RunOptions(**locals())
    with traced_options(options) as run:  # its span, when tracing is on (`_otel`)
        driver = _driver(asyncio.get_running_loop(), run.options(options))
        run.scrubbing(driver.scrub)
        try:
            return run.done(await asyncio.wrap_future(start(driver)))
        except asyncio.CancelledError:
            driver.stop()
            raise


async def orchestrate_local(
    source: str,
    *,
    inputs: Mapping[str, Any],
    tasks: Tools = None,
    timeout_ms: int = 30_000,
) -> Any:
    """Flyte's ``flyte.sandbox.orchestrate_local``, same parameters: run ``source`` with
    ``tasks`` as its tools and return its value. ``timeout_ms`` is `Limits.timeout` in
    milliseconds; every other limit is its default (`orchestrate_async` takes them all).
    Flyte's built-in ``flyte_map`` is there when the code names it (`with_flyte_map`)."""
    tools = with_flyte_map(resolve_tools(tasks), source)
    result = await orchestrate_async(
        source, tools=tools, inputs=inputs, timeout=seconds_from_ms(timeout_ms)
    )
    return result.value


__getattr__, __dir__ = lazy(__name__, globals(), {"durable": _DURABLE})
publish_top_level(__name__, globals())

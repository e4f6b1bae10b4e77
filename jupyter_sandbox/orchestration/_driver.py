"""The driver loop: runs one cell in a fresh Monty session and answers every suspension.

Monty pauses at each call it cannot make itself. We answer:

- a registered tool: call it (sync tools here, async tools on an event loop as futures);
- any other function: ``NameError`` listing the tools;
- an OS call (files, env, imports of os-backed modules): Monty's own refusal, except sleeps,
  which we perform ourselves against a budget;
- an attribute or method of an opaque handle: refused (handles cannot be read).

Driving snapshots by hand (``feed_start``/``resume``) costs ~40 us per call, several times less
than ``resume_auto``. The loop runs on its own thread so the caller's thread stays free to be
interrupted: `Driver.kill` kills the worker process, which ends the feed at once.

The loop knows Monty, tools, limits, events and interrupts, nothing else: the journal and
replay, the cache, the durable store, sessions and approval gates are `Feature`s the driver
is given (`_hooks`), asked at fixed points of the run. A plain run has none.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import os
import re
import threading
import time
import traceback
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pydantic_monty as pm

from .._shared._errors import (
    Interrupted,
    LimitExceeded,
    OrchestrationError,
    StoreError,
)
from .._shared._events import CallFinished, CallStarted, EventCallback, Output, ToolCall, ignore
from .._shared._scrub import Scrub, scrubbing
from .._shared._text import unindented
from . import _typecheck
from ._confine import kill_worker
from ._failures import describe, for_sandbox, translate
from ._hooks import Feature, Paused
from ._keep import DEFAULT_KEEP, MB, Keep, Keeper, crossing_bytes
from ._limits import Limits
from ._pending import Entry, Pending
from ._result import OrchestrationResult
from ._stubs import build_stubs
from ._tool import Tool
from ._trace import Started
from ._values import DEPTH_CEILING, SCALARS, data_size, to_sandbox, too_deep
from ._workers import current

_NAME = re.compile(r"[^\W\d]\w*")
NESTING_CEILING = 3
"""How many levels of `orchestrate` may run inside tools below a cell's own run. Each level
draws its workers from a pool of its own, so a run never waits for a worker held by a run
waiting on it; a deeper call fails at once with `LimitExceeded` (``limit="nesting"``)."""
_running: contextvars.ContextVar[Driver | None] = contextvars.ContextVar(
    "jupyter_sandbox_running", default=None
)
"""The run whose tool is executing: a sync tool runs on the run's thread, an async tool in a
task that inherits the context of that thread."""
_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
"""Frames under it are ours: a tool's host traceback starts where ours end (a sandbox tool's
error has none but its own line)."""
_SCRIPT = "cell.py"
_CHECKED = "jupyter_sandbox_type_checked"
"""The call that stops the type check's own feed before the code runs (see `_checked_apart`)."""
_CHECKED_STUB = f"\n\ndef {_CHECKED}() -> int: ...\n"


def running() -> Driver | None:
    """The run whose tool is executing here, if any (the runs above it are its ``parent``s)."""
    return _running.get()


def parent_loop() -> asyncio.AbstractEventLoop | None:
    """The tool loop of the run whose tool is executing here, if any (`_workers.tool_loop`)."""
    parent = _running.get()
    return None if parent is None else parent.loop


class Driver:
    """One run of one cell. Create, `run` on a thread of its own; `kill` or `stop` it from
    any thread. ``features`` watch and answer its calls (`_hooks`), asked in their order."""

    def __init__(
        self,
        code: str,
        tools: Mapping[str, Tool],
        inputs: Mapping[str, Any],
        limits: Limits,
        *,
        type_check: bool,
        on_event: EventCallback,
        loop: asyncio.AbstractEventLoop,
        features: Sequence[Feature] = (),
        keep: Keep | None = None,
    ) -> None:
        self.code = code = unindented(code)  # every door's code: a string indented as a whole
        self.tools = dict(tools)
        self.inputs = dict(inputs)
        self.limits = limits
        # The check exists to stop a wrong tool call before any tool runs. A cell that names
        # no tool cannot call one, so it skips the check (~5 ms of the checker's start-up).
        # Monty reads identifiers NFKC-normalised (fullwidth `add` is `add`): so do we.
        self.type_check = type_check and not {
            unicodedata.normalize("NFKC", name) for name in self.tools
        }.isdisjoint(_NAME.findall(unicodedata.normalize("NFKC", code)))
        self.emit = on_event
        self._emitting = on_event is not ignore  # skip building events nobody reads
        self.loop = loop
        self.result = OrchestrationResult(code=code)
        self._features = tuple(features)
        # The features asked at each call, by point: only those that do something there.
        if self._features:
            self._rebinding = _overriding(self._features, "rebind")
            self._starting = _overriding(self._features, "call_started")
            self._answering = _overriding(self._features, "call_answered")
            self._finishing = _overriding(self._features, "call_finished")
        else:  # a plain run: nothing to ask anywhere
            self._rebinding = self._starting = self._answering = self._finishing = ()
        self.numbers: dict[int, int] = {}
        """The numbers of the calls the features saw, by ``id(call)``: the order the code
        made them in (what a store keys records by; Monty's ``call_id`` is the worker's)."""
        self._stdout: list[str] = []
        self._output_left = limits.max_output * 2**20
        self.keeper = Keeper(keep or DEFAULT_KEEP)
        """What the trace keeps of the calls' values (`_keep`): bounded per run."""
        self._transfer_left = limits.max_transfer * MB
        """Bytes of arguments the calls may still copy out of Monty (``max_transfer``)."""
        self._over_limit: LimitExceeded | None = None
        """Set by the print callback when the cell printed too much (and its worker killed)."""
        self.calls_made = 0
        self._slept = 0.0
        self.trace = self.result._trace  # the calls, kept cheap until read (`_trace`)
        self.pending = Pending(loop)
        self._last_tool_error: tuple[BaseException, ToolCall] | None = None
        self._killed = threading.Event()
        self._worker_pid: int | None = None
        self._tool_refs: dict[str, Any] = {}
        self.future: concurrent.futures.Future[OrchestrationResult] = concurrent.futures.Future()
        """The run's outcome: `run`'s, or `Interrupted` at once when `stop` abandons it."""
        # What `stop` needs to abandon the run from another thread, guarded by _lock: the
        # session to hand back and the runs nested in its tools.
        self._lock = threading.Lock()
        self._host: dict[int, ToolCall | Started | None] = {}
        """While the thread is blocked on the host, under key 0: the call it runs (a sync
        tool; `Started` for a plain call), or None while it waits for a worker. Whichever
        of the thread and `stop` pops it first decides whether the run was abandoned: one
        ``dict.pop`` under the GIL, no lock round trips on the hot path (`_block`)."""
        self._closed = False
        self._session: pm.MontySession | None = None
        self._children: set[Driver] = set()
        self.parent = _running.get()
        self.depth: int = 0 if self.parent is None else self.parent.depth + 1
        if self.depth > NESTING_CEILING:
            raise LimitExceeded(
                f"orchestrate() nested more than {NESTING_CEILING} levels deep (a tool running "
                "sandboxed code whose tools run sandboxed code...): flatten the tools",
                limit="nesting",
            )
        self.level = self.depth
        """The level of the worker pool the run draws on (`Runtime.hold_level`)."""
        self.runtime = current()
        """Where its worker comes from (`_workers`): the process's, or a test's own."""
        self.scrub: Scrub = Scrub(None if self.parent is None else self.parent.scrub)
        """The secrets its sandbox tools returned, masked in what it shows (`_scrub`)."""
        self._plain: dict[str, Callable[..., Any]] = (
            {}
            if self._emitting or self._features
            else {name: tool.func for name, tool in self.tools.items() if _is_plain(tool)}
        )
        """The functions of the tools whose calls take `_tool_call`'s plain path: nothing
        watches the run's calls as they happen, and the tool is sync, never gated, and has
        no `invoke` of its own (a sandbox tool nests its container runs in the call)."""
        for feature in self._features:
            feature.attach(self)

    # -- public --------------------------------------------------------------------------

    def run(self) -> OrchestrationResult:
        """Execute the cell; on failure raise an `OrchestrationError` carrying ``.result``.

        Call it on a thread of its own: the tools it calls see this run as the one they are
        nested in (`orchestrate` inside a tool counts its depth from it)."""
        self.trace.origin = time.perf_counter()
        _running.set(self)
        scrubbing.set(self.scrub)
        self.level = self.runtime.hold_level(
            self, None if self.parent is None else self.parent.level
        )
        if self.parent is not None:
            with self.parent._lock:
                self.parent._children.add(self)
        try:
            value = self._run_session()
            if self._over_limit is not None:  # the feed ended before the kill took effect
                raise self._over_limit
            self.result.value = self._checked(value)
            return self.result
        except Paused as paused:  # the gated call waits, out of the trace, in ``pending``
            self._drain()
            call = paused.call
            self.result.trace = [c for c in self.result.trace if c is not call]
            self.result.pending = [call]
            for feature in self._features:
                feature.paused(self, call)
            return self.result
        except StoreError as exc:  # a restored run needs what did not survive the restart
            self.result.error = f"StoreError: {exc}"
            raise
        except pm.MontyError as exc:
            if self._over_limit is not None:
                raise self._fail(self._over_limit) from None
            raise self._fail(
                translate(
                    exc,
                    code=self.code,
                    limits=self.limits,
                    interrupted=self._killed.is_set(),
                    last_tool_error=self._last_tool_error,
                )
            ) from None
        except OrchestrationError as exc:
            raise self._fail(exc) from None
        except RecursionError:  # Monty's conversion of a deeply nested value recurses
            raise self._fail(
                OrchestrationError(
                    "a value crossing into Monty is nested too deeply for it "
                    f"to convert; keep results and tool arguments under {DEPTH_CEILING} levels"
                )
            ) from None
        finally:
            self._close()

    def kill(self) -> None:
        """Stop the run now (Ctrl-C): kill its worker (the pool replaces it), and the workers
        of the runs nested in its tools."""
        with self._lock:
            self._killed.set()
            children = list(self._children)
        if self._worker_pid is not None:
            kill_worker(self._worker_pid)  # returns once the pool can see the worker is gone
        for child in children:
            child.stop()

    def stop(self) -> bool:
        """`kill`, then abandon the run if its thread is blocked on the host: a sync tool that
        may never return, or a wait for a worker. Abandoning records the call as abandoned
        (with its end time), hands the worker back to the pool, settles `future` with
        `Interrupted` and leaves the thread to finish the tool on its own; whatever it does
        then is ignored. Returns whether the run was abandoned; if not, the thread is in Monty
        or waiting on async tools and ends by itself within a moment of the kill."""
        self.kill()
        held = self._host.pop(0, _FREE)
        if held is _FREE:
            return False
        if isinstance(held, tuple):  # a plain call (`Started`): it enters the trace now
            held = self.trace.call(*held)
            self.trace.add(held)
        call = held if isinstance(held, ToolCall) else None  # None: waiting for a worker
        if call is not None:
            call.end = time.perf_counter() - self.trace.origin
            call.cancelled = True  # the run stopped before it finished: not the tool's failure
            call.error = "Abandoned: the run was interrupted while this call ran on the host"
            self.emit(CallFinished(call))
        running = f"the call to {call.tool}()" if call is not None else "the wait for a worker"
        error = self._fail(
            Interrupted(
                f"interrupted: the interpreter was stopped and {running}, still running on the"
                " host, was abandoned (its thread finishes on its own)"
            )
        )
        self._close()
        with contextlib.suppress(concurrent.futures.InvalidStateError):
            self.future.set_exception(error)
        return True

    def _close(self) -> None:
        """Wind the run down once, from whichever thread gets here first: stop its async
        calls, write the journal, seal the result, hand the worker back."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            session = self._session
        self.pending.stop()
        if self.pending.entries:  # async calls or sleeps the run did not take the outcome of
            self._end_pending()
        for feature in self._features:
            feature.end(self)
        self.result.duration = time.perf_counter() - self.trace.origin
        tail = self.scrub.flush()  # the start of a secret held back at the end, if any
        if tail:
            self._stdout.append(tail)
            self.emit(Output("stdout", tail))
        self.result.stdout = "".join(self._stdout)
        self.result.secrets = self.scrub.secrets
        try:
            if session is not None:  # its worker may be dead (killed): the pool starts another
                session.__exit__(None, None, None)
        finally:
            if self.parent is not None:
                with self.parent._lock:
                    self.parent._children.discard(self)
            self.runtime.release_level(self, self.level)

    def _block(self, call: ToolCall | Started | None) -> None:
        """Mark the thread as blocked on the host, so `stop` may abandon it; async calls
        waiting to start go to the loop first. A run killed before does not block. (`stop`
        kills, then pops: if the thread saw no kill after putting ``call``, `stop` finds
        it.)"""
        self.pending.flush()
        self._host[0] = call
        if self._killed.is_set():
            self._unblock()
            raise Interrupted("interrupted")

    def _unblock(self) -> None:
        """End `_block`; once the run was abandoned meanwhile (`stop` took the call), drop
        what the thread did (`_Abandoned`)."""
        if self._host.pop(0, _FREE) is _FREE:
            raise _Abandoned  # the run is over: drop the body's outcome

    # -- the loop ------------------------------------------------------------------------

    def _run_session(self) -> Any:
        limits = self.limits
        stubs = build_stubs(self.tools, self.inputs) + _CHECKED_STUB if self.type_check else None
        session = self.runtime.pool(self.level).checkout(
            script_name=_SCRIPT,
            limits={
                "max_feed_duration_secs": limits.timeout,
                "max_memory": limits.max_memory * 2**20,
                # Our own count enforces max_calls; this backstop also bounds name lookups,
                # OS calls and sleeps, which count as suspensions too.
                "max_suspensions": 2 * limits.max_calls + 1000,
                "max_recursion_depth": limits.max_stack_depth,
            },
            type_check=self.type_check,
            type_check_stubs=stubs,
            type_check_format="json",  # `type_check_error` draws it as a traceback
            os_policy={"sleep_system_max": float("inf")},
        )
        self._block(None)  # checking a worker out waits while the pool is busy
        try:
            session.__enter__()
            with self._lock:
                self._session = session  # `_close` hands it back
                late = self._closed
            if late:  # abandoned while waiting: `_close` has run, so hand it back here
                session.__exit__(None, None, None)
        finally:
            self._unblock()
        self._worker_pid = session.worker_pid
        if self._killed.is_set():
            raise Interrupted("interrupted")
        snap = None
        for feature in self._features:  # a restored run starts from its snapshot
            snap = feature.begin(self, session, stubs)
            if snap is not None:
                break
        if snap is None:
            inputs = {name: to_sandbox(value) for name, value in self.inputs.items()}
            for feature in self._features:
                feature.sent_inputs(self.inputs, inputs)
            # skipped when these stubs, declarations and code passed before (`_typecheck`)
            checked = stubs is not None and _typecheck.checked(
                stubs,
                self.code,
                [part for feature in self._features for part in feature.declarations()],
                lambda: self._checked_apart(session),
            )
            # The trace's times count from here: building stubs, waiting for a worker and the
            # type check are not the code's.
            self.trace.origin = time.perf_counter()
            snap = session.feed_start(
                self.code, inputs=inputs, print_callback=self.on_print, skip_type_check=checked
            )
        while True:
            if isinstance(snap, pm.FunctionSnapshot):
                if snap.is_os_function:
                    snap = self._os_call(snap)
                elif snap.object_id is not None:
                    snap = snap.resume({"exception": AttributeError(
                        f"{snap.function_name}: opaque handles cannot be read or called; "
                        "pass them to a tool"
                    )})  # fmt: skip
                else:
                    snap = self._tool_call(snap)
            elif isinstance(snap, pm.MontyComplete):
                output = snap.output
                for feature in self._features:
                    output = feature.complete(self, session, output)
                return output
            elif isinstance(snap, pm.FutureSnapshot):
                snap = snap.resume(self._settle(snap.pending_call_ids))
            else:
                snap = self._name_lookup(snap)

    def _checked_apart(self, session: pm.MontySession) -> bool:
        """`check_apart` for this run's code; False also when it stopped for another error (a
        syntax error: the code's own feed reports it), unless the run was killed meanwhile."""
        try:
            return check_apart(session, self.code, self.on_print)
        except pm.MontyError:
            if self._killed.is_set():
                raise
            return False

    def _tool_call(self, snap: pm.FunctionSnapshot) -> pm.SyncSnapshot:
        """Answer a call to a tool (`_observed_call` unless the call is plain, see `_plain`).

        A plain call is this body alone, the hot path of a loop of calls: its record is kept
        as a tuple the trace makes into a `ToolCall` when it is read (`_trace`). What the
        helpers do for every call is inline here for the usual case (a few scalars in and
        out; no async call waiting to start): each Python call saved is ~2% of a call."""
        name = snap.function_name
        func = self._plain.get(name)
        if func is None:
            return self._observed_call(snap, name)
        self.calls_made += 1
        if self.calls_made > self.limits.max_calls:
            raise self._too_many_calls()
        args, kwargs = snap.args, snap.kwargs
        size = crossing_bytes(args, kwargs, self._transfer_left + 1)
        self._transfer_left -= size
        if self._transfer_left < 0:
            raise self._too_much_transfer()
        started = (snap.call_id, name, snap.position.start, args, kwargs, time.perf_counter())
        if self.pending.waiting:  # async calls go to the loop before the thread blocks
            self.pending.flush()
        host = self._host
        host[0] = started  # `_block`, inline
        if self._killed.is_set():
            self._unblock()
            raise Interrupted("interrupted")
        try:
            value = func(*args, **kwargs)
        except BaseException as exc:  # SystemExit from argparse too: it is this call's failure
            self._unblock()
            call = self.trace.call(*started)
            self.trace.add(call)
            return snap.resume(self._failed(call, exc))
        end = time.perf_counter()
        if host.pop(0, _FREE) is _FREE:  # `_unblock`, inline
            raise _Abandoned
        self.trace.keep(self.keeper.plain(started, end, value, size))
        if type(value) not in SCALARS:
            value = to_sandbox(value)
        return snap.resume({"return_value": value})

    def say(self, line: str) -> None:
        """One line to the person on the cell's stderr (from any thread: views lock)."""
        self.emit(Output("stderr", line + "\n"))

    def _crossed(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> int:
        """Count the bytes of a call's arguments that crossed to the host (returned);
        `LimitExceeded` past ``max_transfer``."""
        size = crossing_bytes(args, kwargs, self._transfer_left + 1)
        self._transfer_left -= size
        if self._transfer_left < 0:
            raise self._too_much_transfer()
        return size

    def _too_much_transfer(self) -> LimitExceeded:
        return LimitExceeded(
            f"transfer limit exceeded: the code's tool calls copied more than "
            f"{self.limits.max_transfer} MB of arguments to the host (raise it with "
            "Limits(max_transfer=...))",
            limit="transfer",
            parameter="max_transfer",
        )

    def _kept(self, call: ToolCall) -> None:
        """Make ``call``'s arguments what the trace keeps of them (`_keep`), once it ended."""
        keeper = self.keeper
        call.args, call.kwargs = keeper.args(call.args), keeper.kwargs(call.kwargs)

    def _count_call(self) -> None:
        """Count a call to a tool; `LimitExceeded` past ``max_calls``."""
        self.calls_made += 1
        if self.calls_made > self.limits.max_calls:
            raise self._too_many_calls()

    def _too_many_calls(self) -> LimitExceeded:
        return LimitExceeded(
            f"tool-call limit exceeded: more than {self.limits.max_calls} calls "
            "(raise it with Limits(max_calls=...))",
            limit="calls",
            parameter="max_calls",
        )

    def _observed_call(self, snap: pm.FunctionSnapshot, name: str) -> pm.SyncSnapshot:
        """A call someone may watch or answer: a live view, a feature (`_hooks`), an async
        or sandbox tool; or not a tool at all."""
        tool = self.tools.get(name)
        if tool is None:
            return snap.resume({"exception": NameError(self._unknown(name))})
        self._count_call()
        args, kwargs = snap.args, snap.kwargs
        self._crossed(args, kwargs)
        for feature in self._rebinding:  # handles sent in before a restore or by earlier cells
            args, kwargs = feature.rebind((args, kwargs))
        call = self.trace.call(
            snap.call_id, name, snap.position.start, args, kwargs, time.perf_counter()
        )
        self.trace.add(call)
        if self._emitting:
            self.emit(CallStarted(call))
            # The view's work for the event (its first render in a fresh kernel) is not the
            # tool's: the call starts after it.
            call.start = time.perf_counter() - self.trace.origin
        number = self.calls_made - 1
        self.numbers[id(call)] = number
        for feature in self._starting:
            answer = feature.call_started(self, snap, call, number, tool)
            if answer is None:
                continue
            if answer.error is not None:
                return snap.resume(self._failed(call, answer.error))
            if tool.is_async:  # the code may gather it: it must stay awaitable
                return snap.resume(self.pending.settled(call.call_id, answer.value, call))
            return snap.resume(self._succeeded(call, answer.value))
        if tool.is_async:
            coro = tool.invoke(call, args, kwargs)
            return snap.resume(self.pending.start(call.call_id, coro, call))
        self._block(call)
        try:
            value = tool.invoke(call, args, kwargs)
        except BaseException as exc:  # SystemExit from argparse too: it is this call's failure
            self._unblock()
            return snap.resume(self._failed(call, exc))
        self._unblock()
        return snap.resume(self._succeeded(call, value))

    def checkpoint(
        self,
        snap: pm.FunctionSnapshot,
        number: int,
        *,
        required: bool = False,
        approval: dict[str, Any] | None = None,
    ) -> None:
        """Ask the features for a snapshot of the run stopped at call ``number`` (a gated
        call's, ``required``, with what the person approves: `_approval.sealed`)."""
        for feature in self._features:
            feature.checkpoint(self, snap, number, required=required, approval=approval)

    def _drain(self) -> None:
        """Wait for the async calls in flight to finish (a pausing run: their records are
        written, so the resumed run is answered with them instead of making them again)."""
        while calls := self.pending.calls():
            done = self.pending.wait(list(calls), self._killed)
            if not done:
                raise Interrupted("interrupted while waiting for tools")
            for _, entry in done:
                self._finish(entry)

    def _end_pending(self) -> None:
        """Give every call the run stopped waiting for its end in the trace (and so in the
        journal): the outcome of one that finished unnoticed (a resumed run is answered with
        it), else ``cancelled``."""
        for entry in self.pending.left():
            call = entry.call
            if call is None or call.end is not None:
                continue
            if entry.finished():
                self._finish(entry)
                continue
            call.cancelled = True
            call.error = "Cancelled: the run stopped before this call finished"
            call.end = time.perf_counter() - self.trace.origin
            self.emit(CallFinished(call))

    def _settle(self, call_ids: list[int]) -> dict[int, Any]:
        """Wait until at least one pending future is done; answer all that are."""
        # A future the run never started is a sleep awaited before a restore (`_durable`):
        # its time is up. (Set operations: no Python call on the path of every await.)
        slept = set(call_ids).difference(self.pending.entries)
        if slept:
            return {i: {"return_value": None} for i in slept}
        done = self.pending.wait(call_ids, self._killed)
        if not done:
            raise Interrupted("interrupted while waiting for tools")
        return {call_id: self._finish(entry) for call_id, entry in done}

    def _finish(self, entry: Entry) -> Any:
        """The answer for a finished pending call, its record made."""
        call, exc = entry.call, entry.error
        if exc is not None:
            return self._failed(call, exc) if call else {"exception": for_sandbox(exc)}
        return self._succeeded(call, entry.value) if call else {"return_value": None}

    def _succeeded(self, call: ToolCall, value: Any) -> Any:
        call.end = time.perf_counter() - self.trace.origin
        for feature in self._answering:  # before `_kept`: the cache keys by the arguments made
            feature.call_answered(call, value)
        self._kept(call)
        call.result = self.keeper.kept(value)
        sent = to_sandbox(value)
        for feature in self._finishing:  # inline: the hot path of a watched run
            feature.call_finished(call, self.numbers[id(call)], sent)
        if self._emitting:
            self.emit(CallFinished(call))
        return {"return_value": sent}

    def _failed(self, call: ToolCall, exc: BaseException) -> Any:
        call.end = time.perf_counter() - self.trace.origin
        self._kept(call)
        call.error = self.keeper.text(describe(exc))
        # Skip our own frames (driver, Tool.invoke, a sandbox run): the traceback starts in
        # the tool.
        tb = exc.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_filename.startswith(_PACKAGE):
            tb = tb.tb_next
        try:  # it calls the exception's `__str__`, which may raise even SystemExit
            call.host_traceback = self.keeper.text(
                "".join(traceback.format_exception(type(exc), exc, tb))
            )
        except BaseException:  # the run's thread: no Ctrl-C arrives here
            call.host_traceback = call.error + "\n"
        self._last_tool_error = (exc, call)
        for feature in self._finishing:  # ``sent`` None: it failed
            feature.call_finished(call, self.numbers[id(call)], None)
        self.emit(CallFinished(call))
        return {"exception": for_sandbox(exc)}

    def _os_call(self, snap: pm.FunctionSnapshot) -> pm.SyncSnapshot:
        name = snap.function_name
        if name in ("system.sleep", "system.async_sleep"):
            seconds = float(snap.args[0]) if snap.args else 0.0
            self._slept += max(seconds, 0.0)
            if self._slept > self.limits.timeout:
                raise LimitExceeded(
                    f"time limit exceeded: the code asked to sleep {self._slept:g} s in total, "
                    f"more than its {self.limits.timeout:g} s (raise it with "
                    "Limits(timeout=...))",
                    limit="time",
                    parameter="timeout",
                )
            if name == "system.sleep":
                self.pending.flush()
                if self._killed.wait(seconds):
                    raise Interrupted("interrupted")
                return snap.resume({"return_value": None})
            return snap.resume(self.pending.start(snap.call_id, asyncio.sleep(seconds), None))
        return snap.resume_not_handled()

    def _name_lookup(self, snap: pm.NameLookupSnapshot) -> pm.SyncSnapshot:
        name = snap.variable_name
        if snap.object_id is None and name in self.tools:
            # `f = add` then `f(1, 2)`: hand over a host function named like the tool, so the
            # later call arrives as a call to the tool.
            ref = self._tool_refs.get(name)
            if ref is None:
                ref = self._tool_refs[name] = _named_function(name)
            return snap.resume(value=ref)
        return snap.resume()

    # -- helpers -------------------------------------------------------------------------

    def on_print(self, stream: str, text: str) -> None:
        """Keep and stream what the cell prints, up to ``max_output``; past it, kill the
        worker (raising here would not stop the feed) and fail the run naming the option."""
        if self._over_limit is not None:
            return
        if len(text) > self._output_left:
            text = text[: self._output_left]
            self._over_limit = LimitExceeded(
                f"output limit exceeded: the code printed more than {self.limits.max_output} "
                "MB (raise it with Limits(max_output=...))",
                limit="output",
                parameter="max_output",
            )
            if self._worker_pid is not None:
                kill_worker(self._worker_pid)
        self._output_left -= len(text)
        text = self.scrub.stream(text)
        if text:
            self._stdout.append(text)
            self.emit(Output("stderr" if stream == "stderr" else "stdout", text))

    def _checked(self, value: Any) -> Any:
        """The cell's value, if whoever receives it can write it out: one of our errors for a
        value larger than ``max_result`` once shared references are written out, or nested
        too deeply to print (either would flood or crash the notebook's display)."""
        kind = type(value)
        if kind in _FLAT or (kind is int and value.bit_length() <= 64):
            return value  # a few bytes, nesting nothing: the usual value of a call
        limit = self.limits.max_result * 2**20
        if data_size(value, limit) > limit:
            raise LimitExceeded(
                f"result limit exceeded: the code's value writes out to more than "
                f"{self.limits.max_result} MB (a shared reference counts each time it "
                "appears); return less, or raise it with Limits(max_result=...)",
                limit="result",
                parameter="max_result",
            )
        if too_deep(value):
            raise OrchestrationError(
                f"the code's value nests more than {DEPTH_CEILING} levels deep (or holds itself): "
                "return something flatter"
            )
        return value

    def _unknown(self, name: str) -> str:
        available = ", ".join(sorted(self.tools)) or "none registered (use @tool)"
        return f"name {name!r} is not defined; the tools this cell can call are: {available}"

    def _fail(self, error: OrchestrationError) -> OrchestrationError:
        self.scrub.error(error)
        self.result.error = f"{type(error).__name__}: {error}"
        self.result.interrupted = isinstance(error, Interrupted)
        self.result.sandbox_traceback = error.sandbox_traceback or None
        error.result = self.result
        return error


class _Abandoned(Exception):
    """Ends the thread of a run `Driver.stop` abandoned, once its sync tool returns."""


_FLAT = frozenset({type(None), bool, float})
"""Values `Driver._checked` passes without walking them (with an int of up to 64 bits)."""

_FREE = object()
"""`Driver._host` holds no call: the thread is not blocked on the host, or `stop` took it."""


def check_apart(
    session: pm.MontySession,
    code: str,
    print_callback: Callable[[Any, str], None] | None = None,
) -> bool:
    """Type-check ``code`` in a feed of its own on ``session`` (checked out with the stubs
    and `_CHECKED_STUB`); True when it passed, False when the checker rejected it. Monty
    checks inside the feed that runs the code and reports no boundary, so a run's trace would
    start with the check (40-500 ms here, growing with the code). The check feed is the code
    behind a call to `_CHECKED`, answered with an exception: none of the code runs. A rejected
    code is fed again by whoever needs its errors (the run's own feed, `_orchestrator`), so
    they name its own lines. Any other Monty error propagates."""
    try:
        first = session.feed_start(f"{_CHECKED}()\n{code}", print_callback=print_callback)
        while isinstance(first, pm.FunctionSnapshot) and first.is_os_function:
            first = first.resume_not_handled()  # the checker asking for a module's stubs
    except pm.MontyTypingError:
        return False
    if not (isinstance(first, pm.FunctionSnapshot) and first.function_name == _CHECKED):
        raise OrchestrationError(f"the type check feed stopped at {first!r}, not its start")
    with contextlib.suppress(pm.MontyRuntimeError):
        first.resume({"exception": RuntimeError("type-checked")})
    return True


def _overriding(features: tuple[Feature, ...], point: str) -> tuple[Feature, ...]:
    """The ``features`` whose class does something at ``point`` (a `Feature` method): the
    others are not asked there, so a call pays only for the features that watch it."""
    return tuple(f for f in features if getattr(type(f), point) is not getattr(Feature, point))


def _is_plain(tool: Tool) -> bool:
    """Whether ``tool``'s calls may take the plain path (see `Driver._plain`)."""
    return not tool.is_async and tool.approve is False and type(tool).invoke is Tool.invoke


def _named_function(name: str) -> Any:
    def ref(*args: Any, **kwargs: Any) -> Any:  # never called: Monty routes calls to the host
        raise NotImplementedError

    ref.__name__ = ref.__qualname__ = name
    return ref

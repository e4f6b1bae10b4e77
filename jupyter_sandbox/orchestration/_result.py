"""The outcome of an orchestration, and its JSON record for saved notebooks."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from .._shared._bounds import ToolStats, kept_calls, stream_tail
from .._shared._errors import OrchestrationError
from .._shared._events import ToolCall
from .._shared._preview import preview
from .._shared._scrub import mask_record
from ..records import (
    RECORD_VERSION,
    Answered,
    Binding,
    CallRecord,
    ToolRow,
    TraceRecord,
    TraceStatus,
)
from ._approval import digest, shown
from ._trace import Trace

TRACEBACK_CHARS = 4000
"""The most of a tool's host traceback one call's record keeps."""

TRACEBACKS_CHARS = 30_000
"""The most of all its calls' host tracebacks one record keeps: with many failures kept, each
keeps its share (at least `TRACEBACK_MIN`), so a saved cell stays within its budget
(``display._format.SAVED_BUDGET_BYTES``)."""

TRACEBACK_MIN = 400
"""The least of a host traceback a call's record keeps: its last frames and the error."""

ERROR_CHARS = 200
"""The most of a call's ``error`` line (``ExcType: message``) its record keeps: a message can
be any size (its traceback's end has the rest)."""


@dataclass
class OrchestrationResult:
    """What a run produced. On failure the raised `OrchestrationError` carries one of these
    (``err.result``) with the trace and output up to the failure."""

    code: str
    value: Any = None
    """The value of the cell's last expression (None when it ends in a statement)."""
    stdout: str = ""
    duration: float = 0.0
    error: str | None = None
    """``ExcType: message`` when the run failed."""
    interrupted: bool = False
    """Ctrl-C stopped the run: the record's status is ``interrupted``, not ``error``."""
    sandbox_traceback: str | None = None
    run_id: str | None = None
    """The run's id in its store (a durable run): what `resume_run` and `fork_run` take."""
    pending: list[ToolCall] = field(default_factory=list)
    """A paused run's gated call, waiting for `resume_run` to approve or reject it."""
    bindings: list[Binding] = field(default_factory=list)
    """The notebook variables the pending call's handle arguments are bound to when it is
    approved after a kernel restart (in this kernel it gets the objects shown)."""
    described: dict[str, tuple[list[str], str]] = field(default_factory=dict)
    """For a pending call's tool: the names its positional arguments fill and its docstring's
    first line (`Tool.described`), which the call's record carries for the approver (set when
    the run pauses)."""
    refused: str | None = None
    """Why an approval was not applied (`resume_run`'s ``expect`` named another call): the
    run waits again, ``pending`` shows the call as it is now."""
    forked_from: tuple[str, int] | None = None
    """(run id, call number) this run was forked from (`fork_run`)."""
    session: str | None = None
    """The session (``session=``) whose variables the run started from and left."""
    answer: Answered | None = None
    """How the pause this run continued from was answered (`resume_run` with ``approve=``)."""
    trace_id: str | None = None
    """The OpenTelemetry trace the run's spans are in, when tracing was on (`_otel`)."""
    secrets: tuple[str, ...] = field(default=(), repr=False)
    """Secrets the run's sandbox tools returned: `to_record` masks them (`_scrub`)."""
    _trace: Trace = field(init=False, repr=False, compare=False)
    """The calls as the run records them (`_trace`); read them as ``trace``."""

    def __post_init__(self) -> None:
        self._trace = Trace(self.code)

    @property
    def trace(self) -> list[ToolCall]:
        """Every tool call, in the order the code made them."""
        return self._trace.calls()

    @trace.setter
    def trace(self, calls: list[ToolCall]) -> None:
        self._trace.replace(calls)

    @property
    def status(self) -> Literal["ok", "error", "interrupted", "paused"]:
        """``paused``: a durable run waits for a person to answer its ``pending`` call."""
        if self.pending:
            return "paused"
        return "interrupted" if self.interrupted else "error" if self.error else "ok"

    def to_record(self) -> TraceRecord:
        """The JSON-safe record behind ``application/vnd.jupyter-sandbox.trace+json``."""
        calls, dropped, tools = self._calls_record()
        status: TraceStatus = self.status
        record: TraceRecord = {
            "version": RECORD_VERSION,
            "kind": "orchestrate",
            "code": self.code,
            "status": status,
            "value": None if self.error else preview(self.value),
            "stdout": stream_tail(self.stdout),
            "stdout_chars": len(self.stdout),
            "error": self.error,
            "sandbox_traceback": self.sandbox_traceback,
            "duration": self.duration,
            "calls": calls,
            "dropped": dropped,
            "tools": tools,
        }
        if self.run_id is not None:
            record["run_id"] = self.run_id
        if self.pending:
            record["pending"] = [self._pending_record(call) for call in self.pending]
        if self.forked_from is not None:
            record["forked_from"] = {"run_id": self.forked_from[0], "call": self.forked_from[1]}
        if self.session is not None:
            record["session"] = self.session
        if self.answer is not None:
            record["answer"] = self.answer
        if self.trace_id is not None:
            record["trace_id"] = self.trace_id
        return mask_record(record, self.secrets)

    def _pending_record(self, call: ToolCall) -> CallRecord:
        """A pending call as a person approves it: every argument whole (up to
        `APPROVAL_CHARS`, and what is cut said), the digest that seals it, the variables it
        binds after a restart."""
        record = _bounded(call.to_record())
        whole = shown(call.args, call.kwargs)
        record["args"], record["kwargs"] = whole.args, whole.kwargs
        record["digest"] = digest(call.tool, call.args, call.kwargs, self.secrets)
        if whole.cut:
            record["cut"] = whole.cut
        if self.bindings:
            record["bindings"] = self.bindings
        params, summary = self.described.get(call.tool, ([], ""))
        if params and call.args:
            record["params"] = params[: len(call.args)]
        if summary:
            record["doc"] = summary
        return record

    def _calls_record(self) -> tuple[list[CallRecord], int, list[ToolRow]]:
        """The calls a saved notebook keeps (see `_bounds`: a long trace keeps its ends and its
        failures), how many it dropped, and the per-tool summary of all of them."""
        kept = kept_calls(self.trace, lambda call: call.status == "ok")
        stats = ToolStats()
        for call in self.trace:
            stats.add(call.tool, call.duration, call.status == "error")  # abandoned: not failed
        failed = sum(call.host_traceback is not None for call in kept)
        share = max(min(TRACEBACK_CHARS, TRACEBACKS_CHARS // max(failed, 1)), TRACEBACK_MIN)
        records = [_bounded(c.to_record(), share) for c in kept]
        return records, len(self.trace) - len(kept), stats.rows()


def answered(approve: bool, reason: str | None, cell: int | None = None) -> Answered:
    """A person's answer to a paused run as records keep it: approved, or rejected with the
    reason its code saw; ``cell``: the prompt number of the cell that answered, if known."""
    return {
        "how": "approved" if approve else "rejected",
        "reason": None if approve else reason,
        "cell": cell,
    }


def _bounded(call: CallRecord, chars: int = TRACEBACK_CHARS) -> CallRecord:
    """A call's record with its host traceback cut to its last ``chars`` (where the error
    is): a tool failing with a deep traceback in a loop must not make the record huge."""
    tb = call.get("host_traceback")
    if tb and len(tb) > chars:
        call["host_traceback"] = "…" + tb[-chars:]
    error = call.get("error")
    if error and len(error) > ERROR_CHARS:
        call["error"] = error[: ERROR_CHARS - 1] + "…"
    return call


def result_of(error: OrchestrationError) -> OrchestrationResult | None:
    """The run an `OrchestrationError` carries (``error.result``) as the class it is, for code
    that shows or keeps it whole; None when nothing ran. ``error.result`` is typed by the
    shared `ResultLike` protocol, which names no engine's class."""
    result = error.result
    return result if isinstance(result, OrchestrationResult) else None

"""The JSON records our engines write and our views render: their shapes, MIME types and version.

A record is what a saved notebook keeps of a run: ``OrchestrationResult.to_record()`` makes a
`TraceRecord` (``%%orchestrate``), ``SandboxRun.to_record()`` a `RunRecord` (``%%sandbox``; a
failed run's is on ``err.record``). They travel under `TRACE_MIME` and `RUN_MIME`, which the
JupyterLab renderer (``labextension/src/records.ts``, the same shapes as interfaces) draws
without a kernel; ``text/html`` and ``text/plain`` fallbacks go beside them.

These are plain dicts, typed here as `TypedDict` s for readers and type checkers. `RECORD_VERSION`
rises only when a key changes meaning or goes away; a new key is added as optional
(`NotRequired`), so records saved before it still read. Keys marked optional are absent from
older records or present only in a running cell's live record (``status: "running"``, ``live``).
"""

# No ``from __future__ import annotations``: on Python 3.11 a postponed ``NotRequired`` makes
# the key required in ``__required_keys__``, which the contract test reads.
from typing import Any, Literal, NotRequired, TypedDict

TRACE_MIME = "application/vnd.jupyter-sandbox.trace+json"
"""An `%%orchestrate` record (`TraceRecord`): status, value, stdout, one entry per tool call."""

RUN_MIME = "application/vnd.jupyter-sandbox.run+json"
"""A `%%sandbox` record (`RunRecord`): build, run status, stdout/stderr, typed inputs/outputs."""

DISPLAY_MIME = "application/vnd.jupyter-sandbox.display+json"
"""One display of a `%%sandbox` cell (`DisplayRecord`): a figure, a table, its last value."""

RECORD_VERSION = 1
"""The ``version`` of every record: raised when a key changes meaning or is removed."""

Status = Literal["ok", "error", "interrupted", "running"]
"""How a run ended; ``running`` only in a live record."""

TraceStatus = Literal["ok", "error", "interrupted", "running", "paused"]
"""How an orchestration ended: a `Status`, or ``paused`` (a durable run waits for a person to
approve or reject its ``pending`` calls; only a trace can pause)."""


class LiveInfo(TypedDict):
    """A running cell's headline (``record["live"]``); the counts are a trace's only. A live
    trace lists its latest calls and counts them all here."""

    summary: str
    calls: NotRequired[int]
    running: NotRequired[int]
    queued: NotRequired[int]
    failed: NotRequired[int]


class ToolRow(TypedDict):
    """One tool's calls over the whole run (``_bounds.ToolStats``): count, errors, seconds."""

    tool: str
    calls: int
    errors: int
    total: float
    p50: float | None
    p95: float | None


class FileLink(TypedDict):
    """A `File` or `Dir` output a ``%%sandbox`` cell linked beside the notebook: ``path``
    relative to the kernel's working directory (the notebook's folder), forward slashes."""

    path: str
    name: str
    size: int
    """Bytes (a `Dir`: of its files)."""
    kind: Literal["file", "dir"]


class TypedValue(TypedDict):
    """A sandbox input or output: its type tag and a short preview (``<hidden>`` for a secret)."""

    type: str
    preview: str
    link: NotRequired[FileLink]
    """Where the magic linked a `File`/`Dir` output for JupyterLab to open (absent from the
    Python API's records, and when it was not linked: see ``note``)."""
    note: NotRequired[str]
    """Why a `File`/`Dir` output was not linked (too big, ...), in one line."""


class CallRecord(TypedDict):
    """One tool call (``ToolCall.to_record``): values are previews, times are seconds from the
    start of the run; ``end`` is None while the call runs."""

    call_id: int
    tool: str
    args: list[str]
    kwargs: dict[str, str]
    result: str | None
    error: str | None
    host_traceback: str | None
    start: float
    end: float | None
    queued: NotRequired[float | None]
    """Seconds the call waited for a slot; None while it waits (absent in older records)."""
    cancelled: NotRequired[bool]
    """The run stopped before the call finished (absent in older records)."""
    line: int | None
    column: int | None
    replayed: bool
    children: list["Record"]
    """Nested records: the container run of a sandbox used as a tool."""
    digest: NotRequired[str]
    """A pending call's digest (`orchestration._approval`): ``%orchestrate_approve RUN --expect
    DIGEST`` makes the call only if it is still this one. A pending call's ``args`` and
    ``kwargs`` are whole reprs, not previews, up to `APPROVAL_CHARS` together."""
    cut: NotRequired[dict[str, int]]
    """A pending call's arguments not shown whole (positionals by index, keywords by name):
    each one's whole length in characters."""
    params: NotRequired[list[str]]
    """A pending call's tool's parameters its positional arguments fill, in order (from the
    tool's signature): the names its views label them by."""
    doc: NotRequired[str]
    """A pending call's tool's docstring, its first line."""
    bindings: NotRequired[list["Binding"]]
    """A pending call's handle arguments: the notebook variable each is bound to when the run
    is approved after a kernel restart."""
    printed: NotRequired[int]
    """Lines the cell had printed when the call started (a cell's record only): where its
    output falls among the calls."""
    printed_since: NotRequired[int]
    """Lines the cell printed since the call before (or since it began, for its first call);
    absent when it printed none there, and in older records."""
    printed_first: NotRequired[list[str]]
    """The first of those lines (at most two, each clipped): what the trace shows where they
    were printed (absent with ``printed_since``)."""


class Binding(TypedDict):
    """A notebook variable a paused call's handle argument is bound to after a restart."""

    variable: str
    type: str


class ForkedFrom(TypedDict):
    """Where a fork (``fork_run``) branched off: its calls before ``call`` were answered from
    run ``run_id``'s records, call ``call`` with the value the fork was given."""

    run_id: str
    call: int


class Caller(TypedDict):
    """The `Orchestrator` call a notebook cell's record shows (a call from the notebook, not
    from an orchestration): the call as written, and how many calls of that orchestrator the
    cell made, this one the first (the others show no record unless ``show=True``)."""

    call: str
    """``sum_squares(1)``: the orchestrator's name and the call's arguments, previewed."""
    calls: int


AnswerHow = Literal["approved", "rejected", "elsewhere"]
"""How a paused run was answered: see `Answered`."""


class Answered(TypedDict):
    """How a paused run was answered, on the record of the run a magic
    continued and, once known, on the paused record above it, so no dead button is offered:
    ``approved`` / ``rejected`` (with ``reason``) in the notebook cell whose prompt number is
    ``cell`` (None: not known), or ``elsewhere``: the store says the run is no longer paused
    (``status``), answered by another notebook, kernel or `resume_run`."""

    how: AnswerHow
    reason: str | None
    cell: int | None
    status: NotRequired[str]
    """``elsewhere`` only: the run's status in the store when it was asked."""


class TraceSummary(TypedDict):
    """What every renderer says of a trace, worded once in Python (``display._format``) and
    carried in the record a cell shows, so the JupyterLab renderer draws it as given."""

    headline: str
    """``orchestrate ok in 400 ms: 3 tool calls, 1 failed`` (a live record: its live line)."""
    notes: list[str]
    """Lines under the headline: the fork and session a run came from, its run id."""
    kept: str | None
    """Which calls a long trace's record lists, in one line (None: all of them)."""
    tools: bool
    """Whether the per-tool table is worth showing (a short trace's rows say it all)."""
    marks: dict[str, str]
    """By call id: the cell's output printed between the call before and this one, as the
    trace shows it above that call (``printed: loading 3 files``). What the cell prints after
    its last call has no mark: the cell's output, right below the trace, ends with it."""
    after: NotRequired[str | None]
    """Older records only: a line about the output printed after the last call, which
    renderers no longer draw."""


class TraceRecord(TypedDict):
    """An orchestration (``OrchestrationResult.to_record``), under `TRACE_MIME`."""

    version: int
    kind: Literal["orchestrate"]
    code: str
    status: TraceStatus
    value: str | None
    stdout: str
    """The end of the run's stdout (the cell's stream outputs hold all of it)."""
    stdout_chars: NotRequired[int]
    """Size of the whole stdout (absent in older and live records)."""
    error: str | None
    sandbox_traceback: str | None
    raised: NotRequired[bool]
    """The magic raised the error: the cell's error output shows it, the record does not."""
    duration: float
    calls: list[CallRecord]
    dropped: NotRequired[int]
    """Calls a long trace did not keep (absent in older and live records)."""
    tools: NotRequired[list[ToolRow]]
    """The per-tool summary over every call (absent in older records)."""
    live: NotRequired[LiveInfo]
    run_id: NotRequired[str]
    """The durable run's id in the store (absent when the run had no store)."""
    pending: NotRequired[list[CallRecord]]
    """A paused run's calls that wait for approval (absent unless ``status`` is ``paused``)."""
    forked_from: NotRequired[ForkedFrom]
    """The run and call this run was forked from (absent unless it is a fork)."""
    caller: NotRequired[Caller]
    """The orchestrator call this record shows (absent for a cell's own run)."""
    session: NotRequired[str]
    """The ``--session`` name whose variables the run kept (absent without a session)."""
    answered: NotRequired[Answered]
    """How the paused run this record shows was answered (absent while it waits)."""
    answer: NotRequired[Answered]
    """How the pause this run was continued from was answered (a run `resume_run` continued
    with ``approve=``): what tells a notebook's earlier paused record it was answered here."""
    printed: NotRequired[int]
    """Lines the cell printed in all (a cell's record only; see `CallRecord.printed`)."""
    advice: NotRequired[str]
    """How to go on after an interrupt or an error, when the cell can (``--resume``)."""
    summary: NotRequired[TraceSummary]
    """The renderers' words for this record (absent in older records and engine records:
    a display adds it)."""
    trace_id: NotRequired[str]
    """The OpenTelemetry trace id (32 hex digits) of the run's spans, when tracing was on: what
    a person searches for in Logfire, Jaeger or any OTLP backend (absent when it was off)."""


class BuildRecord(TypedDict):
    """An image build (``BuildInfo.to_record``)."""

    tag: str
    cached: bool
    seconds: float
    steps: list[str]
    total_steps: NotRequired[int]
    """Docker's step count, 0 when cached (absent in older records)."""
    log: str
    error: str | None
    running: NotRequired[bool]
    """Live records only: the build is still going."""
    line: NotRequired[str]
    """Live records only: the build's latest whole output line."""


class RequestRow(TypedDict):
    """One request an allow-listed run sent to its proxy (``network=[...]``), as the proxy
    logged it: never a body or a header; the query string and every secret value masked."""

    time: float
    """When the request started (epoch seconds)."""
    method: str
    host: str
    port: int
    path: str
    """The URL's path, its query shown as ``?***``; empty for a tunnel (``CONNECT``)."""
    status: int
    """The HTTP status the proxy answered (0: none, the connection ended first)."""
    sent: int
    """Bytes the sandbox sent (the request, and through a tunnel)."""
    received: int
    """Bytes the sandbox received."""
    allowed: bool
    why: str | None
    """Why it was refused (``not on the list``), or why an allowed one failed at the proxy."""


class RequestLogRecord(TypedDict):
    """Every request an allow-listed run made: counts of them all, the first rows."""

    total: int
    allowed: int
    refused: int
    refusals: dict[str, str]
    """``host:port`` -> why, each refused destination once."""
    rows: list[RequestRow]
    """The first requests, in order (``total`` counts them all)."""


class RunSummary(TypedDict):
    """What every renderer says of a sandbox run, worded once in Python (see `TraceSummary`)."""

    headline: str
    """``sandbox 'train' ok in 3.50 s`` (a live record: its live line)."""
    build: str | None
    """``image TAG: built in 12.30 s (6 steps)``; None without a build."""
    error: str | None
    """The error line the record shows (None: none, or the cell's error output has it)."""
    requests: NotRequired[str]
    """``3 requests: 2 allowed, 1 refused: evil.example:443 not on the list`` (absent: the
    run had no allow-list)."""


class RunRecord(TypedDict):
    """A container run (``SandboxRun.to_record``), under `RUN_MIME`."""

    version: int
    kind: Literal["sandbox"]
    name: str
    image: str
    status: Status
    error: str | None
    raised: NotRequired[bool]
    """The magic raised the error: the cell's error output shows it, the record does not."""
    duration: float
    exit_code: int | None
    attempts: int
    cached: bool
    build: BuildRecord | None
    stdout: str
    """The end of the run's stdout (the cell's stream outputs hold all of it)."""
    stdout_chars: NotRequired[int]
    """Size of the whole stdout (absent in older and live records)."""
    stderr: str
    stderr_chars: NotRequired[int]
    outputs: dict[str, TypedValue]
    inputs: dict[str, TypedValue]
    live: NotRequired[LiveInfo]
    worker: NotRequired[str]
    """The Dask worker that ran it (``create(cluster=...)``); absent for a local run."""
    session: NotRequired[str]
    """The sandbox session whose container ran the cell (``%%sandbox --session NAME``);
    absent for a one-shot run."""
    session_cell: NotRequired[int]
    """The cell's number in that session (its first cell is 1); with ``session`` only."""
    uncached: NotRequired[str]
    """Why the result was not kept in the result cache asked for (``cache="auto"`` or
    ``"override"``): it held a secret's value. Absent when it was kept, or none was asked."""
    summary: NotRequired[RunSummary]
    """The renderers' words for this record (see `TraceRecord.summary`)."""
    trace_id: NotRequired[str]
    """The OpenTelemetry trace id (32 hex digits) of the run's spans, when tracing was on
    (absent when it was off)."""
    requests: NotRequired[RequestLogRecord]
    """What an allow-listed run (``network=[...]``) sent out, through its proxy; absent for
    any other network."""


class DisplayRecord(TypedDict):
    """One thing a ``%%sandbox`` cell displayed (a figure, a table, ``display()``, its last
    value), under `DISPLAY_MIME`: a MIME bundle of checked data with the run's secrets masked,
    whose HTML, Markdown and SVG are the container's own untrusted markup (the renderer
    sanitises them; the bundle's own ``text/html`` beside it is already sanitised)."""

    version: int
    data: dict[str, Any]


Record = TraceRecord | RunRecord
"""Any record: tell them apart by ``kind``."""

__all__ = [
    "DISPLAY_MIME",
    "RECORD_VERSION",
    "RUN_MIME",
    "TRACE_MIME",
    "AnswerHow",
    "Answered",
    "BuildRecord",
    "CallRecord",
    "Caller",
    "DisplayRecord",
    "FileLink",
    "ForkedFrom",
    "LiveInfo",
    "Record",
    "RequestLogRecord",
    "RequestRow",
    "RunRecord",
    "RunSummary",
    "Status",
    "ToolRow",
    "TraceRecord",
    "TraceStatus",
    "TraceSummary",
    "TypedValue",
]

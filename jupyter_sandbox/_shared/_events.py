"""Events the engines emit while they work.

Engines (`orchestration/`, `sandbox/`) never print and never import IPython: they call an
``on_event`` callback with these small frozen records, and `display/` turns them into widgets,
HTML or text. Keeping them in one module is what lets a view, a test or a user's own callback
follow a run without knowing which engine produced it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from ..records import CallRecord, Record, RunRecord, TraceRecord, TypedValue
from ._preview import preview

Stream = Literal["stdout", "stderr"]
"""Which stream an `Output` came from."""


@dataclass(slots=True)
class ToolCall:
    """One tool call made from sandboxed code: the unit of a trace.

    Mutable on purpose: the driver fills ``end``, ``result``/``error`` when the call finishes,
    and views hold the same object from `CallStarted` to `CallFinished`.
    """

    call_id: int
    tool: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    start: float
    """Seconds since the run's code was handed to Monty (monotonic clock; see ``origin``)."""
    line: int | None = None
    """1-based line of the call in the cell, when Monty reports it."""
    column: int | None = None
    end: float | None = None
    result: Any = None
    error: str | None = None
    """``ExcType: message`` of the tool's exception, or None when it returned."""
    host_traceback: str | None = None
    """The tool's traceback on the host: Monty drops it, so the trace keeps it."""
    replayed: bool = False
    """True when the result was answered from a journal or cache instead of calling the tool."""
    children: list[Record] = field(default_factory=list)
    """Nested records (for example the container run of a sandbox used as a tool)."""
    queued: float | None = 0.0
    """Seconds the call waited for a free slot before it ran (a sandbox tool runs at most
    ``concurrency`` containers at once); None while it still waits. The tool's own time runs
    from ``start + queued`` to ``end``."""
    cancelled: bool = False
    """The run stopped before this call finished, and cancelled it (``error`` says so too;
    a container it ran was stopped and removed, its record is in ``children``)."""
    origin: float = 0.0
    """The ``time.perf_counter()`` reading ``start``, ``end`` and ``queued`` count from (the
    moment the run's code was handed to Monty), so a tool can time its part of the call
    (not in the record)."""

    @property
    def duration(self) -> float | None:
        """The tool's own time: from when it got its slot to its end, queue time apart."""
        return None if self.end is None else self.end - self.start - (self.queued or 0.0)

    @property
    def status(self) -> Literal["queued", "running", "ok", "error", "cancelled"]:
        if self.end is None:
            return "queued" if self.queued is None else "running"
        if self.cancelled:
            return "cancelled"
        return "error" if self.error is not None else "ok"

    def to_record(self, width: int = 200) -> CallRecord:
        """JSON-safe: values become previews of at most ``width`` characters."""
        return {
            "call_id": self.call_id,
            "tool": self.tool,
            "args": [preview(a, width) for a in self.args],
            "kwargs": {k: preview(v, width) for k, v in self.kwargs.items()},
            "result": None if self.error or self.end is None else preview(self.result, width),
            "error": self.error,
            "host_traceback": self.host_traceback,
            "start": self.start,
            "end": self.end,
            "line": self.line,
            "column": self.column,
            "replayed": self.replayed,
            "queued": self.queued,
            "cancelled": self.cancelled,
            "children": list(self.children),
        }


@dataclass(frozen=True, slots=True)
class Output:
    """A chunk of stdout or stderr from sandboxed code, as it happens."""

    stream: Stream
    text: str


@dataclass(frozen=True, slots=True)
class CallStarted:
    call: ToolCall


@dataclass(frozen=True, slots=True)
class CallFinished:
    call: ToolCall


@dataclass(frozen=True, slots=True)
class BuildStarted:
    """An image build begins. ``total_steps`` is predicted from the Dockerfile; each
    `BuildStep` then carries Docker's own count. An image found in the cache sends no
    `BuildStarted`, only a `BuildFinished` with ``cached=True``: no step ran."""

    tag: str
    total_steps: int


@dataclass(frozen=True, slots=True)
class BuildStep:
    """The build moved to step ``index`` (1-based) of ``total`` (Docker's ``Step n/m``).

    ``text`` says what the step does ("installing six (uv)"), not the raw instruction."""

    index: int
    total: int
    text: str


@dataclass(frozen=True, slots=True)
class BuildLog:
    """One whole line a build step printed (never a fragment of Docker's stream chunks)."""

    line: str


@dataclass(frozen=True, slots=True)
class BuildFinished:
    tag: str
    cached: bool
    seconds: float
    error: str | None = None
    """One line saying why the build failed (the log is in the record)."""


@dataclass(frozen=True, slots=True)
class RunStarted:
    """A container run begins."""

    name: str
    image: str
    attempt: int = 1
    inputs: dict[str, TypedValue] = field(default_factory=dict)
    """Type and preview of each input, as the run's record shows them (a value holding a
    secret shows as hidden): a live view shows them from the start, not only at the end."""


@dataclass(frozen=True, slots=True)
class RunFinished:
    name: str
    exit_code: int | None
    seconds: float
    outputs: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    cached: bool = False


@dataclass(frozen=True, slots=True)
class AttemptStarted:
    """The code-mode agent got a reply and is about to run the code in it.

    ``code`` is None when the reply held no Python code; that attempt fails without running.
    The orchestration's own events (`CallStarted`, `Output`...) follow until `AttemptFinished`.
    """

    number: int
    max_attempts: int
    code: str | None


@dataclass(frozen=True, slots=True)
class AttemptFinished:
    number: int
    record: TraceRecord | None
    """The orchestration's trace record, or None when there was no code to run."""
    error: str | None = None
    """``ExcType: message`` when the attempt failed (its feedback goes to the model next)."""


@dataclass(frozen=True, slots=True)
class IterationStarted:
    """The code generator has the model's code for iteration ``number`` and is about to build
    its image and run its tests (the sandbox's `BuildStarted`... and `RunStarted`... follow).

    ``plan`` is set on the first iteration; ``diff`` is the code's unified diff from the last
    iteration's (empty on the first); ``packages`` are what the image installs."""

    number: int
    max_iterations: int
    code: str
    tests: str
    plan: str | None = None
    diff: str = ""
    packages: tuple[str, ...] = ()
    system_packages: tuple[str, ...] = ()
    replayed: bool = False
    """True when the model's reply came from the ``--resume`` journal, not the model."""


@dataclass(frozen=True, slots=True)
class IterationFinished:
    """Iteration ``number`` ended: ``record`` is its JSON record (tests with their outcomes,
    the diagnosis, the feedback sent to the model), as the saved result shows it."""

    number: int
    success: bool
    record: dict[str, Any]
    diagnosis: str | None = None
    """``logic``, ``test``, ``environment`` or ``reply`` when the iteration failed."""
    run: RunRecord | None = None
    """The test run's sandbox record (None when nothing ran or it was replayed)."""


Event = (
    Output
    | CallStarted
    | CallFinished
    | BuildStarted
    | BuildStep
    | BuildLog
    | BuildFinished
    | RunStarted
    | RunFinished
    | AttemptStarted
    | AttemptFinished
    | IterationStarted
    | IterationFinished
)
"""Any event an ``on_event`` callback receives."""
EventCallback = Callable[[Event], None]
"""What ``on_event=`` takes: called with each event as it happens, possibly from a worker thread."""


def ignore(event: Event) -> None:
    """The default callback: engines always have someone to tell."""

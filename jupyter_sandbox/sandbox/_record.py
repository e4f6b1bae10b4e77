"""The full account of one sandbox run, and its JSON-safe record.

`SandboxRun` is what `Sandbox.execute` returns and what a failed run leaves on ``err.record``
(as a dict). The record's shape is a contract with the JupyterLab renderer of
``application/vnd.jupyter-sandbox.run+json``: `jupyter_sandbox.records.RunRecord` declares it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from .._shared._bounds import stream_tail
from .._shared._secrets import HIDDEN, holds_secret
from ..records import RECORD_VERSION, RunRecord, TypedValue
from ._build import BuildInfo
from ._io import preview
from ._types import infer_tag

if TYPE_CHECKING:
    from ._requests import Request, RequestLog


def _describe(
    values: dict[str, Any], tags: dict[str, str | None], hidden: set[str]
) -> dict[str, TypedValue]:
    """Type and preview of each value; those named in ``hidden`` hold a secret: not shown."""
    described: dict[str, TypedValue] = {}
    for name, value in values.items():
        tag = tags.get(name)
        if tag is None:
            try:
                tag = infer_tag(value)
            except ValueError:
                tag = type(value).__name__
        shown = HIDDEN if name in hidden else preview(value)
        described[name] = {"type": tag, "preview": shown}
    return described


@dataclass
class SandboxRun:
    """One execution: outputs (declaration order), transcript, timing, image and build."""

    name: str
    image: str
    inputs: dict[str, Any] = field(default_factory=dict)
    input_types: dict[str, str | None] = field(default_factory=dict)
    outputs: dict[str, Any] = field(default_factory=dict)
    output_types: dict[str, str | None] = field(default_factory=dict)
    stdout: str = ""
    stderr: str = ""
    exit_code: int | None = None
    duration: float = 0.0
    attempts: int = 0
    cached: bool = False
    build: BuildInfo | None = None
    error: str | None = None
    worker: str | None = None
    """The Dask worker that ran the last attempt (``create(cluster=...)``); None: locally."""
    interrupted: bool = False
    """Ctrl-C stopped the run (``error`` says where): the record's status is ``interrupted``."""
    secrets: tuple[str, ...] = field(default=(), repr=False)
    """The values of the run's secrets while it runs; `seal` turns them into ``hidden``."""
    hidden: frozenset[tuple[str, str]] = field(default=frozenset(), repr=False)
    """``("inputs" | "outputs", name)`` of each value that holds a secret."""
    uncached: str | None = None
    """Why the result was not kept in the result cache it was asked for (it held a secret)."""
    trace_id: str | None = None
    """The OpenTelemetry trace of the run's spans, when tracing was on (`_otel`)."""
    displays: list[dict[str, Any]] = field(default_factory=list)
    """What the cell displayed (figures, ``display()``, its last value), in order: MIME
    bundles of checked, secret-masked data (`_displays`); HTML and SVG still untrusted markup."""
    requests: RequestLog | None = None
    """What an allow-listed run sent out, every attempt's (`_requests`); None: no allow-list."""

    @property
    def status(self) -> Literal["ok", "error", "interrupted"]:
        if self.interrupted:
            return "interrupted"
        return "error" if self.error is not None else "ok"

    @property
    def value(self) -> Any:
        """What ``.run()`` returns: None, the single output, or a tuple in declaration order."""
        values = tuple(self.outputs.values())
        if not values:
            return None
        return values[0] if len(values) == 1 else values

    def seal(self) -> None:
        """At the end of the run: note which values hold a secret (the record shows them as
        hidden), then forget the secrets' values, so a run kept in the notebook holds them
        only where the code put them."""
        self.hidden = frozenset(
            (label, name)
            for label, values in (("inputs", self.inputs), ("outputs", self.outputs))
            for name, value in values.items()
            if holds_secret(value, self.secrets)
        )
        self.secrets = ()

    def log_requests(self, requests: list[Request] | None) -> None:
        """Add an attempt's requests (None: the run has no allow-list, nothing to log)."""
        if requests is not None:
            from ._requests import RequestLog  # here: only an allow-listed run needs it

            self.requests = self.requests or RequestLog()
            self.requests.add(requests)

    def described_inputs(self) -> dict[str, TypedValue]:
        """The inputs as `to_record` shows them, before `seal` (``secrets`` still known)."""
        hidden = {name for name, value in self.inputs.items() if holds_secret(value, self.secrets)}
        return _describe(self.inputs, self.input_types, hidden)

    def _hidden(self, label: str) -> set[str]:
        return {name for kind, name in self.hidden if kind == label}

    def to_record(self) -> RunRecord:
        record: RunRecord = {
            "version": RECORD_VERSION,
            "kind": "sandbox",
            "name": self.name,
            "image": self.image,
            "status": self.status,
            "error": self.error,
            "duration": round(self.duration, 3),
            "exit_code": self.exit_code,
            "attempts": self.attempts,
            "cached": self.cached,
            "build": None if self.build is None else self.build.to_record(),
            "stdout": stream_tail(self.stdout),  # the cell's stream outputs hold it all
            "stdout_chars": len(self.stdout),
            "stderr": stream_tail(self.stderr),
            "stderr_chars": len(self.stderr),
            "outputs": _describe(self.outputs, self.output_types, self._hidden("outputs")),
            "inputs": _describe(self.inputs, self.input_types, self._hidden("inputs")),
        }
        if self.worker is not None:
            record["worker"] = self.worker
        if self.uncached is not None:
            record["uncached"] = self.uncached
        if self.trace_id is not None:
            record["trace_id"] = self.trace_id
        if self.requests is not None:
            record["requests"] = self.requests.to_record()
        return record

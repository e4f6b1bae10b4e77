"""The outcome of an orchestration, and its JSON record for saved notebooks."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .._events import ToolCall
from .._preview import preview

RECORD_VERSION = 1


@dataclass
class OrchestrationResult:
    """What a run produced. On failure the raised `OrchestrationError` carries one of these
    (``err.result``) with the trace and output up to the failure."""

    code: str
    value: Any = None
    """The value of the cell's last expression (None when it ends in a statement)."""
    stdout: str = ""
    trace: list[ToolCall] = field(default_factory=list)
    duration: float = 0.0
    error: str | None = None
    """``ExcType: message`` when the run failed."""
    sandbox_traceback: str | None = None

    def to_record(self) -> dict[str, Any]:
        """The JSON-safe record behind ``application/vnd.jupyter-sandbox.trace+json``."""
        return {
            "version": RECORD_VERSION,
            "kind": "orchestrate",
            "code": self.code,
            "status": "error" if self.error else "ok",
            "value": None if self.error else preview(self.value),
            "stdout": self.stdout,
            "error": self.error,
            "sandbox_traceback": self.sandbox_traceback,
            "duration": self.duration,
            "calls": [call_record(c) for c in self.trace],
        }


def call_record(call: ToolCall) -> dict[str, Any]:
    return {
        "call_id": call.call_id,
        "tool": call.tool,
        "args": [preview(a) for a in call.args],
        "kwargs": {k: preview(v) for k, v in call.kwargs.items()},
        "result": None if call.error or call.end is None else preview(call.result),
        "error": call.error,
        "host_traceback": call.host_traceback,
        "start": call.start,
        "end": call.end,
        "line": call.line,
        "column": call.column,
        "replayed": call.replayed,
        "children": list(call.children),
    }

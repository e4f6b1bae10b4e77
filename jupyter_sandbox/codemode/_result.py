"""What an agent run keeps: every attempt, whole, so a reader can see how the code came about."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .._shared._errors import OrchestrationError
from .._shared._events import ToolCall
from ..orchestration import OrchestrationResult

Message = dict[str, str]
"""One chat message, OpenAI style: ``{"role": "system" | "user" | "assistant", "content": ...}``."""


@dataclass
class Attempt:
    """One round trip: what the model was sent, what it replied, and how its code ran."""

    number: int
    messages: list[Message]
    """The conversation exactly as sent to the model for this attempt."""
    reply: str
    code: str | None
    """The program extracted from the reply; None when the reply held none."""
    result: OrchestrationResult | None = None
    """The run (value, stdout, trace), also when it failed; None when nothing ran."""
    error: OrchestrationError | None = None
    feedback: str | None = None
    """The message that tells the model why this attempt failed."""

    @property
    def ok(self) -> bool:
        return self.error is None

    def to_record(self) -> dict[str, Any]:
        return {
            "number": self.number,
            "messages": self.messages,
            "reply": self.reply,
            "code": self.code,
            "status": "ok" if self.ok else "error",
            "error": None if self.error is None else f"{type(self.error).__name__}: {self.error}",
            "feedback": self.feedback,
            "trace": None if self.result is None else self.result.to_record(),
        }


@dataclass
class AgentResult:
    """A successful agent run: the last attempt worked; the earlier ones are kept too."""

    task: str
    attempts: list[Attempt] = field(default_factory=list)

    @property
    def final(self) -> Attempt:
        return self.attempts[-1]

    @property
    def result(self) -> OrchestrationResult:
        assert self.final.result is not None  # a successful attempt always ran
        return self.final.result

    @property
    def value(self) -> Any:
        return self.result.value

    @property
    def code(self) -> str:
        assert self.final.code is not None  # a successful attempt always had code
        return self.final.code

    @property
    def stdout(self) -> str:
        return self.result.stdout

    @property
    def trace(self) -> list[ToolCall]:
        return self.result.trace

    def to_record(self) -> dict[str, Any]:
        """JSON-safe: the task and every attempt with its trace record."""
        return {
            "kind": "codemode",
            "task": self.task,
            "attempts": [a.to_record() for a in self.attempts],
        }

"""The agent loop: ask the model for code, run it in Monty, feed failures back, repeat.

The model is any callable from messages to text, so no client library is a dependency: an
OpenAI, Anthropic or local client is wrapped in a three-line function by the caller. With the
``ai`` extra, a pydantic-ai model name (``"openai:gpt-4o"``) or ``Model`` works too (`_models`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Never

from .._shared._defaults import MAX_ATTEMPTS, store_or_default
from .._shared._errors import CodeModeError, Interrupted, OrchestrationError, SandboxConfigError
from .._shared._events import AttemptFinished, AttemptStarted, EventCallback, ToolCall, ignore
from ..orchestration import (
    Limits,
    Store,
    Tools,
    orchestrate,
    refuse_flat,
    resolve_tools,
    result_of,
)
from ..records import TraceRecord
from ._extract import extract_code
from ._models import LLM, as_llm
from ._prompt import NO_CODE, feedback, system_prompt
from ._result import AgentResult, Attempt, Message

if TYPE_CHECKING:
    from pydantic_ai.models import Model


class CodeModeAgent:
    """Turns a task in plain words into orchestration code that runs, retrying on failure.

    Each attempt sends the conversation so far, extracts the program from the reply and runs
    it with `orchestrate` (same ``tools``, ``inputs`` and limits as ``%%orchestrate``). A
    failure goes back to the model as the next user message (sandbox traceback, type-check
    diagnostics or the tool's error, and what the code printed), until an attempt succeeds or
    ``max_attempts`` are used, which raises `CodeModeError`. Ctrl-C (`Interrupted`) and errors
    raised by ``llm`` itself are not the model's to fix: they propagate at once.

    ``llm`` is a function from messages to text, or with the ``ai`` extra a pydantic-ai model
    name (``"openai:gpt-4o"``, ``"anthropic:claude-sonnet-4-5"``) or ``Model`` object.

    Approval gates (``@tool(approve=...)``) are honoured: ``approver(call) -> bool`` answers
    each gated call inline (a rejected call is ``PermissionError`` in the code, which the
    model's code may catch). Without an approver the runs are durable (in ``store``, by
    default `default_store_path()`): a gated call pauses the run and ends the turn, whose
    result reports it (``result.result.status == "paused"``, ``.run_id``, ``.pending``);
    `resume_run` or ``%orchestrate_approve RUN_ID`` continues it, in any process. A pause is
    no failure: it goes back to no model. ``store=""`` keeps no store even then (as an empty
    ``%config OrchestrateMagics.store`` does): a gated call without an approver fails.
    """

    def __init__(
        self,
        llm: LLM | str | Model,
        tools: Tools = None,
        *,
        max_attempts: int = MAX_ATTEMPTS,
        inputs: Mapping[str, Any] | None = None,
        limits: Limits | None = None,
        type_check: bool = True,
        approver: Callable[[ToolCall], bool] | None = None,
        store: Store | str | os.PathLike[str] | None = None,
        **removed: Never,
    ) -> None:
        refuse_flat("CodeModeAgent", removed)
        if max_attempts < 1:
            raise SandboxConfigError(
                f"max_attempts must be at least 1, got {max_attempts}", parameter="max_attempts"
            )
        self.llm = as_llm(llm)
        """The model as a function from messages to text (a pydantic-ai name or ``Model``
        given as ``llm`` is wrapped in one, see `_models`)."""
        self.tools = resolve_tools(tools)
        self.inputs = dict(inputs or {})
        self.max_attempts = max_attempts
        if limits is not None and not isinstance(limits, Limits):
            raise SandboxConfigError(
                f"limits takes Limits(...), got {type(limits).__name__}", parameter="limits"
            )
        self.limits = Limits() if limits is None else limits
        """Each attempt's, as `orchestrate` takes them."""
        self.type_check = type_check
        self.approver = approver
        gated = approver is None and any(t.approve is not False for t in self.tools.values())
        self.store: Store | str | os.PathLike[str] | None = store_or_default(store, needed=gated)
        """Where runs are kept: ``store``, or the default store when a tool is gated and
        no approver answers it (a gated call then pauses the run); None: runs are not kept."""
        self.system_prompt = system_prompt(self.tools, self.inputs)

    def run(self, task: str, *, on_event: EventCallback | None = None) -> AgentResult:
        """Work on ``task`` until its code succeeds; `AttemptStarted`/`AttemptFinished` and
        each run's own events go to ``on_event``."""
        emit = on_event or ignore
        messages: list[Message] = [
            {"role": "system", "content": self.system_prompt},
            {"role": "user", "content": task},
        ]
        attempts: list[Attempt] = []
        for number in range(1, self.max_attempts + 1):
            sent = [dict(m) for m in messages]
            reply = self.llm(sent)
            if not isinstance(reply, str):
                raise SandboxConfigError(f"llm must return str, got {type(reply).__name__}")
            attempt = Attempt(number, sent, reply, extract_code(reply))
            emit(AttemptStarted(number, self.max_attempts, attempt.code))
            self._execute(attempt, emit)
            attempts.append(attempt)
            emit(AttemptFinished(number, _record(attempt), _error_line(attempt)))
            if attempt.ok:
                return AgentResult(task, attempts)
            assert attempt.feedback is not None  # every failure gets feedback
            messages += [
                {"role": "assistant", "content": reply},
                {"role": "user", "content": attempt.feedback},
            ]
        last = attempts[-1]
        error = CodeModeError(
            f"no working code after {self.max_attempts} attempt(s); last: {_error_line(last)}",
            attempts=attempts,
            sandbox_traceback=last.error.sandbox_traceback if last.error else "",
        )
        error.result = last.result
        raise error

    def _execute(self, attempt: Attempt, emit: EventCallback) -> None:
        if attempt.code is None:
            attempt.error = OrchestrationError("the reply held no Python code")
            attempt.feedback = NO_CODE
            return
        try:
            attempt.result = orchestrate(
                attempt.code,
                tools=self.tools,
                inputs=self.inputs,
                limits=self.limits,
                type_check=self.type_check,
                on_event=emit,
                approver=self.approver,
                store=self.store,
            )
        except Interrupted:
            raise
        except OrchestrationError as exc:
            attempt.result = result_of(exc)
            attempt.error = exc
            attempt.feedback = feedback(exc)


def _record(attempt: Attempt) -> TraceRecord | None:
    return None if attempt.result is None else attempt.result.to_record()


def _error_line(attempt: Attempt) -> str | None:
    return None if attempt.error is None else f"{type(attempt.error).__name__}: {attempt.error}"

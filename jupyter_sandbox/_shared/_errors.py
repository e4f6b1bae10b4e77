"""The exception classes; `jupyter_sandbox.errors` is their public home and draws the tree.

Grouped by cause, not by shared attributes: an `except` clause for one cause never catches
another (Ctrl-C is not a `LimitExceeded`, an unparseable output is not a `MissingOutput`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from ..records import RunRecord, TraceRecord
from ._events import ToolCall
from ._text import printable


class ResultLike(Protocol):
    """What an `OrchestrationError` carries as ``result``: the run up to the failure (an
    `OrchestrationResult`). A protocol, so this shared module names no engine's class and
    the engines it is raised from stay above it; ``orchestration.result_of`` gives the class."""

    @property
    def code(self) -> str: ...
    @property
    def value(self) -> Any: ...
    @property
    def stdout(self) -> str: ...
    @property
    def error(self) -> str | None: ...
    @property
    def trace(self) -> list[ToolCall]: ...
    def to_record(self) -> TraceRecord: ...


class AttemptLike(Protocol):
    """One of a `CodeModeError`'s ``attempts`` (a `codemode.Attempt`): what the model was
    sent and replied, the code it wrote and how that ran."""

    @property
    def number(self) -> int: ...
    @property
    def reply(self) -> str: ...
    @property
    def code(self) -> str | None: ...
    @property
    def result(self) -> ResultLike | None: ...
    @property
    def error(self) -> OrchestrationError | None: ...


class SandboxError(Exception):
    """Base class of every error raised by jupyter-sandbox.

    An error whose remedy is a parameter says so in Python words and carries it as data:
    ``parameter`` names it (``max_calls``, ``network``, ``type_check``...) and ``hint`` is the
    phrase of the message that spells it (``Limits(max_calls=...)``), so a program can act on
    it and a magic can put its own option in its place (``--max-calls``). Both are empty when
    the message names no parameter."""

    parameter: str = ""
    hint: str = ""

    def __init__(self, *args: object, parameter: str = "", hint: str = "") -> None:
        super().__init__(*args)
        if parameter:
            self.parameter = parameter
        if hint:
            self.hint = hint


class SandboxConfigError(SandboxError, ValueError):
    """Bad arguments, detected before anything runs (unknown type, code and command both set...).

    ``parameter`` names the argument at fault when the message starts with it, so a magic can
    say its own option instead (``cpu must be...`` -> ``--cpus must be...``)."""

    def __init__(self, message: str, *, parameter: str = "", hint: str = "") -> None:
        super().__init__(message, parameter=parameter, hint=hint)


class OrchestrationError(SandboxError):
    """Sandboxed orchestration code failed.

    ``sandbox_traceback`` is Monty's traceback with the cell's own line numbers; ``result``
    holds the trace and output up to the failure.
    """

    def __init__(
        self, message: str, *, sandbox_traceback: str = "", parameter: str = "", hint: str = ""
    ) -> None:
        super().__init__(message, parameter=parameter, hint=hint)
        self.sandbox_traceback = sandbox_traceback
        self.result: ResultLike | None = None


class TypeCheckError(OrchestrationError):
    """The type checker rejected the code; no tool was called. The message shows each finding
    at its line with a caret; ``diagnostics`` lists them in the checker's own words
    (``error[rule] message``), for a program that sorts them."""

    diagnostics: tuple[str, ...] = ()


class ToolError(OrchestrationError):
    """A tool raised and the sandboxed code did not catch it."""

    def __init__(
        self,
        message: str,
        *,
        sandbox_traceback: str = "",
        tool: str = "",
        host_traceback: str = "",
    ) -> None:
        super().__init__(message, sandbox_traceback=sandbox_traceback)
        self.tool = tool
        self.host_traceback = host_traceback


class LimitExceeded(OrchestrationError):
    """A resource limit stopped the code. ``limit`` is one of time, memory, calls, output
    (printed too much), result (the value writes out too large), stack (calls nested past
    ``max_stack_depth``), transfer (arguments copied to the host past ``max_transfer``) or
    nesting (``orchestrate`` nested in tools too deep). ``parameter`` is the `Limits` field
    that raises it (``max_calls``), empty for nesting, which no parameter raises; the message
    says it as ``Limits(max_calls=...)`` (``hint``)."""

    def __init__(
        self, message: str, *, limit: str, sandbox_traceback: str = "", parameter: str = ""
    ) -> None:
        hint = f"Limits({parameter}=...)" if parameter else ""
        super().__init__(
            message, sandbox_traceback=sandbox_traceback, parameter=parameter, hint=hint
        )
        self.limit = limit


class Interrupted(OrchestrationError):
    """The run was interrupted (KeyboardInterrupt) and its worker killed.

    Not a `LimitExceeded`: no limit was hit, so ``except LimitExceeded`` (to retry with a
    larger one) must not swallow the user's Ctrl-C."""


class CodeModeError(OrchestrationError):
    """`CodeModeAgent` used every attempt without the model's code succeeding.

    ``attempts`` holds each attempt (messages, reply, code, error, trace); ``result`` and
    ``sandbox_traceback`` are the last attempt's, so code that handles any orchestration
    failure handles this one too.
    """

    def __init__(
        self, message: str, *, attempts: Sequence[AttemptLike], sandbox_traceback: str = ""
    ) -> None:
        super().__init__(message, sandbox_traceback=sandbox_traceback)
        self.attempts: list[AttemptLike] = list(attempts)
        self.shown = False
        """Whether the cell's view already showed each attempt's error (set by
        ``%%codemode``): the cell's error output then says the rest in one line."""


class StoreError(SandboxError):
    """The durable store (`jupyter_sandbox.Store`) cannot be used as asked: it cannot be
    opened or written, its key file is unsafe, a run id is unknown, or a saved blob was
    modified outside jupyter-sandbox or saved by another pydantic-monty version (refused,
    never loaded). The message says what to do."""


class ContainerError(SandboxError):
    """A %%sandbox container could not be built or run, or its code failed.

    The message is made printable (`_text.printable`) whoever raises it: it often quotes what
    the container wrote, and a terminal must not act on escape codes in it."""

    record: RunRecord | None = None

    def __init__(
        self, message: str = "", *args: object, parameter: str = "", hint: str = ""
    ) -> None:
        super().__init__(printable(message), *args, parameter=parameter, hint=hint)


class DockerUnavailable(ContainerError):
    """No Docker-API engine answered."""


class IsolationUnavailable(ContainerError):
    """The engine cannot run the isolation level asked for (``isolation="gvisor"`` where
    ``runsc`` is not registered with it); the message says what to run. Nothing ran."""


class ImageBuildError(ContainerError):
    """The image build failed; ``log`` holds the failing step's output."""

    def __init__(self, message: str, *, log: str = "", parameter: str = "", hint: str = "") -> None:
        super().__init__(message, parameter=parameter, hint=hint)
        self.log = printable(log)


class InvalidPackageError(ImageBuildError):
    """A requested pip or apt package does not exist."""

    def __init__(self, message: str, *, package: str, log: str = "") -> None:
        super().__init__(message, log=log)
        self.package = package


class UnusableImage(ContainerError):
    """The image cannot start the run's program (``--image`` without python3, ``--command``
    without bash): the image is at fault, not the code, so ``retries`` do not re-run it."""

    def __init__(self, message: str, *, program: str, parameter: str = "", hint: str = "") -> None:
        super().__init__(message, parameter=parameter, hint=hint)
        self.program = program


class SandboxTimeout(ContainerError):
    """The container ran past its timeout and was killed."""


class OutOfMemory(ContainerError):
    """The container was killed by the kernel's OOM killer."""


class SandboxCancelled(ContainerError):
    """The run was cancelled (its awaiting task was) or interrupted (Ctrl-C, a kernel
    interrupt); its container was stopped and removed, an image build in progress stopped."""


class OutputLimitExceeded(ContainerError):
    """The code wrote more stdout+stderr than the run's output cap (the container was stopped),
    or left more in ``/var/outputs`` than its disk limit, or JSON outputs that would decode to
    more than its memory limit (nothing of it was returned)."""


class NonZeroExit(ContainerError):
    """The code in the container exited with a non-zero status."""

    def __init__(
        self,
        message: str,
        *,
        exit_code: int,
        stderr_tail: str = "",
        parameter: str = "",
        hint: str = "",
        advice: str = "",
    ) -> None:
        super().__init__(message, parameter=parameter, hint=hint)
        self.exit_code = exit_code
        self.stderr_tail = printable(stderr_tail)
        self.advice = advice
        """The one sentence naming what fixes it, when we know (also in the message)."""
        self.streamed = False
        """Its stderr streamed into a notebook cell, whose output then ends with the message's
        last line: the cell's error output says the exit code and the advice only."""


class SessionLost(ContainerError):
    """The session's container is gone (killed for memory, from outside, or with its engine):
    its state went with it. The next cell starts it afresh (or from its last snapshot)."""

    def __init__(self, message: str, *, name: str = "", oom: bool = False) -> None:
        super().__init__(message)
        self.name = name
        self.oom = oom


class SessionCellError(ContainerError):
    """A session's cell raised: ``traceback`` is the cell's own, as the session printed it.
    The session and its state stay."""

    def __init__(self, message: str, *, type_name: str, traceback: str) -> None:
        super().__init__(message)
        self.type_name = type_name
        self.traceback = traceback


class OutputError(ContainerError):
    """A declared output cannot be returned; ``name`` names it."""

    def __init__(self, message: str, *, name: str) -> None:
        super().__init__(message)
        self.name = name


class MissingOutput(OutputError):
    """A declared output was not written by the code."""


class InvalidOutput(OutputError):
    """A declared output was written but cannot be read as its declared type."""

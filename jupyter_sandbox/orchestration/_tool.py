"""`Tool`: a host function sandboxed code may call, and the checks it brings (its name, whether
a call needs a person's approval).

Its own module so that `SandboxTool` (a `Tool` whose calls are container runs) and the registry
that makes either one (`_tools`) both import it, and not each other.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

from .._shared import _otel
from .._shared._errors import SandboxConfigError
from .._shared._events import ToolCall

Approve = bool | Callable[..., bool]
"""A tool's approval gate: True (every call waits for a person), False (none does), or a
predicate called with the call's arguments that says whether this call needs approval."""


class Tool:
    """A host function exposed to sandboxed code under ``name``.

    ``approve`` gates its calls (see `Approve`): a gated call is answered by the run's
    ``approver``, or pauses a durable run until `resume_run` approves or rejects it."""

    def __init__(
        self, func: Callable[..., Any], name: str | None = None, *, approve: Approve = False
    ) -> None:
        if not callable(func):
            raise SandboxConfigError(f"tool() needs a function, got {type(func).__name__}")
        self.func = func
        self.key: str = name or str(getattr(func, "__name__", ""))
        """What code calls the tool by: an identifier (``tools=`` and the registry key it)."""
        self.name: str = self.key
        """What the tool is called when shown: its key, except an orchestrator's, which keeps
        the name it was given as Flyte does (``sandboxed-code``, its key ``sandboxed_code``)."""
        if not self.key.isidentifier():
            raise SandboxConfigError(
                f"tool name {self.key!r} is not a Python identifier; pass name='...'"
            )
        if self.key.startswith("_"):  # stubs hide private names from the type checker
            raise SandboxConfigError(f"tool name {self.key!r} starts with '_'; pass name='...'")
        if not (isinstance(approve, bool) or callable(approve)):
            raise SandboxConfigError(
                f"approve= takes True, False or a function of the call's arguments, got "
                f"{type(approve).__name__}"
            )
        self.approve = approve
        self.is_async = inspect.iscoroutinefunction(func)
        functools.update_wrapper(self, func)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """The function; a gated tool called so inside a run's tool is asked first, as if
        the run had called it (`_approval.direct`): the gate is the tool's, not the route's."""
        if self.approve is not False:
            from ._approval import direct  # here: the approval module imports this one

            direct(self, args, kwargs)
        return self.func(*args, **kwargs)

    def invoke(self, call: ToolCall, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """What the driver calls: the function, or for an async tool its coroutine. A
        subclass may use ``call`` to nest records in the trace (see `SandboxTool`)."""
        if _otel.calls:  # a traced call: the tool runs with its span current
            return _otel.within(call, self.func, *args, **kwargs)
        return self.func(*args, **kwargs)

    def gated(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
        """Whether this call needs approval. A predicate that raises gates the call: a
        check that cannot decide must not let the call through."""
        if isinstance(self.approve, bool):
            return self.approve
        try:
            return bool(self.approve(*args, **kwargs))
        except Exception:
            return True

    @property
    def signature(self) -> inspect.Signature | None:
        """The function's signature, or None when Python cannot tell (some builtins)."""
        try:
            return inspect.signature(self.func)
        except (TypeError, ValueError):
            return None

    @property
    def doc(self) -> str:
        return inspect.getdoc(self.func) or ""

    def described(self) -> tuple[list[str], str]:
        """The parameters positional arguments fill, in order (up to a ``*args``), and the
        docstring's first line: what a paused call's record names its arguments by and says
        the tool does, for the person who approves it."""
        names = []
        for parameter in self.signature.parameters.values() if self.signature else ():
            if parameter.kind not in (parameter.POSITIONAL_ONLY, parameter.POSITIONAL_OR_KEYWORD):
                break
            names.append(parameter.name)
        return names, self.doc.strip().partition("\n")[0]

    def __repr__(self) -> str:
        kind = "async tool" if self.is_async else "tool"
        return f"<{kind} {self.name}{self.signature or '(...)'}>"

"""Tools: the only things sandboxed code can call.

`@tool` wraps a function (sync or ``async def``) in a `Tool` and registers it in the
notebook-wide `registry`, so ``%%orchestrate`` finds it by name. The wrapped function stays
callable as before: registering a tool never changes how the notebook itself uses it.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, overload

from .._errors import SandboxConfigError
from .._events import ToolCall


class Tool:
    """A host function exposed to sandboxed code under ``name``."""

    def __init__(self, func: Callable[..., Any], name: str | None = None) -> None:
        if not callable(func):
            raise SandboxConfigError(f"tool() needs a function, got {type(func).__name__}")
        self.func = func
        self.name: str = name or str(getattr(func, "__name__", ""))
        if not self.name.isidentifier():
            raise SandboxConfigError(
                f"tool name {self.name!r} is not a Python identifier; pass name='...'"
            )
        if self.name.startswith("_"):  # stubs hide private names from the type checker
            raise SandboxConfigError(f"tool name {self.name!r} starts with '_'; pass name='...'")
        self.is_async = inspect.iscoroutinefunction(func)
        functools.update_wrapper(self, func)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.func(*args, **kwargs)

    def invoke(self, call: ToolCall, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """What the driver calls: the function, or for an async tool its coroutine. A
        subclass may use ``call`` to nest records in the trace (see `SandboxTool`)."""
        return self.func(*args, **kwargs)

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

    def __repr__(self) -> str:
        kind = "async tool" if self.is_async else "tool"
        return f"<{kind} {self.name}{self.signature or '(...)'}>"


class ToolRegistry(Mapping[str, Tool]):
    """Tools by name. The notebook has one (`registry`); tests and APIs may build their own."""

    def __init__(self) -> None:
        self._tools: dict[str, Tool] = {}

    def register(self, item: Tool) -> Tool:
        """Add or replace a tool: re-running a notebook cell redefines it, as Python would."""
        self._tools[item.name] = item
        return item

    def unregister(self, name: str) -> None:
        self._tools.pop(name, None)

    def __getitem__(self, name: str) -> Tool:
        return self._tools[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._tools)

    def __len__(self) -> int:
        return len(self._tools)


registry = ToolRegistry()
"""The notebook-wide registry that ``@tool`` fills and ``%%orchestrate`` reads."""


def as_tool(obj: Any, name: str | None = None, *, concurrency: int | None = None) -> Tool:
    """A `Tool` for a function, a `Tool` (renamed if asked) or a sandbox (runs as a container)."""
    from ._sandbox_tool import SandboxTool, is_sandbox  # it imports this module

    if isinstance(obj, Tool) and name in (None, obj.name):
        return obj
    if is_sandbox(obj):
        return SandboxTool(obj, name, concurrency=concurrency)
    if isinstance(obj, Tool):
        return Tool(obj.func, name)
    return Tool(obj, name)


@overload
def tool(obj: Any, /, *, name: str | None = None, concurrency: int | None = None) -> Tool: ...
@overload
def tool(
    *, name: str | None = None, concurrency: int | None = None
) -> Callable[[Callable[..., Any]], Tool]: ...
def tool(
    obj: Any = None, /, *, name: str | None = None, concurrency: int | None = None
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Register a function, or a sandbox, as a tool sandboxed code may call.

    Use as ``@tool``, ``@tool(name="search")``, ``tool(func)`` or ``tool(sandbox)``. A sandbox
    tool runs its container once per call, ``concurrency`` containers at most at a time.
    Returns the `Tool`, which calls through to the function, so the notebook can keep calling
    it directly.
    """

    def register(f: Any) -> Tool:
        return registry.register(as_tool(f, name, concurrency=concurrency))

    return register if obj is None else register(obj)


def resolve_tools(
    tools: Iterable[Callable[..., Any]] | Mapping[str, Callable[..., Any]] | None,
) -> dict[str, Tool]:
    """Normalise the ``tools=`` argument: None means every registered tool."""
    if tools is None:
        return dict(registry)
    if isinstance(tools, Mapping):
        return {n: as_tool(f, n) for n, f in tools.items()}
    resolved = [as_tool(t) for t in tools]
    return {t.name: t for t in resolved}

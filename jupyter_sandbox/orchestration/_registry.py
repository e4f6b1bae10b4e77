"""Tools: the only things sandboxed code can call.

`@tool` wraps a function (sync or ``async def``) in a `Tool` and registers it in the
notebook-wide `registry`, so ``%%orchestrate`` finds it by name. The wrapped function stays
callable as before: registering a tool never changes how the notebook itself uses it.

The process has one `ToolRegistry`, held like the `Runtime` (`_instances.Default`): the engine
asks `current()` each time, and `registry` (the public name) forwards to it, so a test that
`install` s a fresh one (the ``tool_registry`` fixture in tests/conftest.py) leaves no tool
behind for the next test, with no module global to poke.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, overload

from .._shared._errors import SandboxConfigError
from .._shared._instances import Default
from ._sandbox_tool import SandboxTool, is_sandbox
from ._tool import Approve, Tool

__all__ = [
    "Tool",
    "ToolRegistry",
    "Tools",
    "as_tool",
    "current",
    "install",
    "registry",
    "resolve_tools",
    "tool",
]

Tools = Iterable[Callable[..., Any]] | Mapping[str, Callable[..., Any]] | None
"""What ``tools=`` takes: functions and `Tool` s, a name -> function mapping, or None (every
registered tool)."""


class ToolRegistry(Mapping[str, Tool]):
    """Tools by name. The notebook has one (`registry`); tests and APIs may build their own,
    empty or holding ``tools`` (a copy: registering in one never changes the other)."""

    def __init__(self, tools: Mapping[str, Tool] | None = None) -> None:
        self._tools: dict[str, Tool] = dict(tools or {})

    def register(self, item: Tool) -> Tool:
        """Add or replace a tool: re-running a notebook cell redefines it, as Python would."""
        self._tools[item.key] = item
        return item

    def unregister(self, name: str) -> None:
        self._tools.pop(name, None)

    def __getitem__(self, name: str) -> Tool:
        return self._tools[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._tools)

    def __len__(self) -> int:
        return len(self._tools)


_default: Default[ToolRegistry] = Default(ToolRegistry)
current = _default.get
"""The process's registry now (made empty on first use)."""
install = _default.install
"""Put a registry in the process's place; returns the one it replaces (tests put it back)."""


class _Current(ToolRegistry):
    """`registry`: whichever registry is `current()`, under the one name users import.

    Forwarding (not rebinding a global) keeps ``from jupyter_sandbox import registry`` taken
    before a test installs a fresh registry pointing at the fresh one."""

    def __init__(self) -> None:
        super().__init__()  # holds nothing itself: every method asks current()

    def register(self, item: Tool) -> Tool:
        return current().register(item)

    def unregister(self, name: str) -> None:
        current().unregister(name)

    def __getitem__(self, name: str) -> Tool:
        return current()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(current())

    def __len__(self) -> int:
        return len(current())


registry: ToolRegistry = _Current()
"""The notebook-wide registry that ``@tool`` fills and ``%%orchestrate`` reads."""


def as_tool(
    obj: Any,
    name: str | None = None,
    *,
    concurrency: int | None = None,
    approve: Approve | None = None,
) -> Tool:
    """A `Tool` for a function, a `Tool` (renamed, or gated, if asked) or a sandbox (runs as a
    container). ``approve=None`` keeps a `Tool`'s own gate (a function's is False)."""
    if isinstance(obj, Tool) and name in (None, obj.key) and approve in (None, obj.approve):
        return obj
    as_function = getattr(obj, "as_tool_function", None)
    if callable(as_function):  # a sandbox session: one stateful function (`SandboxSession`)
        obj = as_function()
    if is_sandbox(obj):
        return SandboxTool(obj, name, concurrency=concurrency, approve=approve or False)
    if isinstance(obj, Tool):
        return Tool(obj.func, name, approve=obj.approve if approve is None else approve)
    return Tool(obj, name, approve=approve or False)


@overload
def tool(
    obj: Any,
    /,
    *,
    name: str | None = None,
    concurrency: int | None = None,
    approve: Approve = False,
) -> Tool: ...
@overload
def tool(
    *, name: str | None = None, concurrency: int | None = None, approve: Approve = False
) -> Callable[[Callable[..., Any]], Tool]: ...
def tool(
    obj: Any = None,
    /,
    *,
    name: str | None = None,
    concurrency: int | None = None,
    approve: Approve = False,
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Register a function, or a sandbox, as a tool sandboxed code may call.

    Use as ``@tool``, ``@tool(name="search")``, ``tool(func)`` or ``tool(sandbox)``. A sandbox
    tool runs its container once per call, ``concurrency`` containers at most at a time.
    ``approve=True`` (or a predicate on the call's arguments, true when the call needs it)
    makes each such call wait for a person: ``orchestrate(..., approver=fn)`` answers it
    inline; with a store and no approver the run pauses until `resume_run` approves or
    rejects it (a rejected call raises ``PermissionError`` inside the code).
    Returns the `Tool`, which calls through to the function, so the notebook can keep calling
    it directly.
    """

    def register(f: Any) -> Tool:
        return current().register(as_tool(f, name, concurrency=concurrency, approve=approve))

    return register if obj is None else register(obj)


def resolve_tools(tools: Tools) -> dict[str, Tool]:
    """Normalise the ``tools=`` argument: None means every registered tool. In a list, two
    different tools under one name are refused (Flyte's ``tasks=`` refuses them too): the
    code could only ever call the last."""
    if tools is None:
        return dict(current())
    if isinstance(tools, Mapping):
        return {n: as_tool(f, n) for n, f in tools.items()}
    resolved: dict[str, Tool] = {}
    given: dict[str, object] = {}
    for item in tools:
        one = as_tool(item)
        if given.setdefault(one.key, item) is not item and resolved[one.key].func is not one.func:
            raise SandboxConfigError(
                f"duplicate tool name {one.key!r} in tools=: the code could call only one of"
                " them; give one another name (Tool(f, name=...), or a name -> function mapping)"
            )
        resolved[one.key] = one
    return resolved

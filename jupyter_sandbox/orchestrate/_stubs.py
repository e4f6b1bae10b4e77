"""Type stubs for the type checker, generated from the tools' signatures and the inputs.

Monty type-checks a cell (with ty) before running it, so ``add("a", 2)`` is rejected before
any tool is called. The checker only knows what the stubs declare: every tool as a function
signature, every input as a typed global, and every non-data class as an opaque class (a
handle the code can pass around but not inspect).
"""

from __future__ import annotations

import collections.abc
import inspect
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ._tools import Tool
from ._values import is_plain, type_name

_HEADER = (
    "import datetime\nimport decimal\nimport pathlib\n"
    "from typing import Any, Literal\n"
    "from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence\n"
    # Monty raises it (a rejected approval, a tool's own), its checker does not know the name
    "class PermissionError(OSError): ...\n"
)
_STDLIB_MODULES = {"datetime", "decimal", "pathlib"}
_ABC = {
    getattr(collections.abc, n): n
    for n in ("Awaitable", "Callable", "Iterable", "Iterator", "Mapping", "Sequence")
}


class _StubWriter:
    """Renders annotations to stub source, declaring opaque classes as it meets them."""

    def __init__(self) -> None:
        self.classes: dict[str, type] = {}

    def render(self, annotation: Any) -> str:
        if annotation is inspect.Parameter.empty or annotation is Any:
            return "Any"
        if annotation is None or annotation is type(None):
            return "None"
        origin = typing.get_origin(annotation)
        args = typing.get_args(annotation)
        if origin is typing.Union or origin is types.UnionType:
            return " | ".join(self.render(a) for a in args)
        if origin is typing.Literal:
            return f"Literal[{', '.join(repr(a) for a in args)}]"
        if origin is not None:
            base = self._class_name(origin)
            if base == "Any" or not args:
                return base
            if base == "Callable":
                return "Callable[..., Any]"
            rendered = ", ".join("..." if a is Ellipsis else self.render(a) for a in args)
            return f"{base}[{rendered}]"
        if isinstance(annotation, type):
            return self._class_name(annotation)
        return "Any"

    def _class_name(self, cls: Any) -> str:
        if not isinstance(cls, type):
            return "Any"
        if cls in _ABC:
            return _ABC[cls]
        if cls.__module__ == "builtins":
            return cls.__qualname__
        if cls.__module__ in _STDLIB_MODULES:
            return f"{cls.__module__}.{cls.__qualname__}"
        name = cls.__name__
        if self.classes.setdefault(name, cls) is not cls:
            return "Any"  # two different classes share a name: stay permissive
        return name

    def function(self, tool: Tool) -> str:
        sig = tool.signature
        prefix = "async def" if tool.is_async else "def"
        if sig is None:
            return f"{prefix} {tool.name}(*args: Any, **kwargs: Any) -> Any: ..."
        try:
            hints = typing.get_type_hints(tool.func)
        except Exception:  # unresolvable forward references: check arity only
            hints = {}
        params: list[str] = []
        seen_kw_only = False
        for i, p in enumerate(sig.parameters.values()):
            ann = self.render(hints.get(p.name, inspect.Parameter.empty))
            default = "" if p.default is inspect.Parameter.empty else " = ..."
            if p.kind is p.VAR_POSITIONAL:
                params.append(f"*{p.name}: {ann}")
                seen_kw_only = True
                continue
            if p.kind is p.VAR_KEYWORD:
                params.append(f"**{p.name}: {ann}")
                continue
            if p.kind is p.KEYWORD_ONLY and not seen_kw_only:
                params.append("*")
                seen_kw_only = True
            params.append(f"{p.name}: {ann}{default}")
            nxt = list(sig.parameters.values())[i + 1 : i + 2]
            if p.kind is p.POSITIONAL_ONLY and (not nxt or nxt[0].kind is not p.POSITIONAL_ONLY):
                params.append("/")
        returns = self.render(hints.get("return", sig.return_annotation))
        return f"{prefix} {tool.name}({', '.join(params)}) -> {returns}: ..."


@dataclass(frozen=True)
class Stubs:
    """The declarations, by kind: the checker reads `source`, code mode shows the model each
    tool's declaration beside its docstring (no re-parsing of the text)."""

    classes: list[str]
    """``class Frame: ...`` for each opaque handle type."""
    functions: dict[str, str]
    """Tool name -> ``def add(x: int, y: int) -> int: ...``."""
    inputs: dict[str, str]
    """Input name -> ``x: int``."""

    @property
    def source(self) -> str:
        return "\n".join(
            [_HEADER, *self.classes, *self.functions.values(), *self.inputs.values(), ""]
        )


def stubs(tools: Mapping[str, Tool], inputs: Mapping[str, Any]) -> Stubs:
    """The stubs declaring ``tools`` and the types of ``inputs``."""
    writer = _StubWriter()
    functions = {name: writer.function(t) for name, t in tools.items()}
    declared = {
        name: f"{name}: {type_name(value) if is_plain(value) else writer.render(type(value))}"
        for name, value in inputs.items()
    }
    classes = [f"class {name}: ..." for name in writer.classes]
    return Stubs(classes, functions, declared)


def build_stubs(tools: Mapping[str, Tool], inputs: Mapping[str, Any]) -> str:
    """Stub source declaring ``tools`` and the types of ``inputs``."""
    return stubs(tools, inputs).source

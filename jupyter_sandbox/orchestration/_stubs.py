"""Type stubs for the type checker, generated from the tools' signatures and the inputs.

Monty type-checks a cell (with ty) before running it, so ``add("a", 2)`` is rejected before
any tool is called. The checker only knows what the stubs declare: every tool as a function
signature, every input as a typed global, and every non-data class as an opaque class (a
handle the code can pass around but not inspect).

The stubs are built on every checked cell (they key the type-check cache, `_typecheck`), so
the last sets built are kept, by what they are written from (`_stub_key`): an unchanged cell
with unchanged tools and input types costs a few microseconds here, not a few hundred.
"""

from __future__ import annotations

import builtins
import collections.abc
import functools
import inspect
import threading
import types
import typing
import weakref
from collections import OrderedDict
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from typing import Any

from ._registry import Tool
from ._stub_key import tool_key
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
SHADOWING = frozenset(
    {
        name
        for name, value in vars(builtins).items()
        if not name.startswith("_") and getattr(value, "__module__", "builtins") == "builtins"
    }  # not what IPython adds (display) or puts in the site module's place (exit)
    | {"copyright", "credits", "exit", "help", "license", "quit"}
    | _STDLIB_MODULES
    | {"Any", "Literal", *_ABC.values()}
)
"""Names a tool declared in the stubs would take from the checker: Python's builtins and what
the header binds. A tool stubbed as ``print`` (or ``len``) is what the checker sees in all of
the cell's code, which then fails its check (``print('x')`` is an unawaited call), while Monty
still calls its own builtin; one stubbed as ``list`` or ``Any`` breaks the other stubs'
annotations. Tools whose names are not ours to choose (an MCP server's) are renamed off them."""


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
            return f"{prefix} {tool.key}(*args: Any, **kwargs: Any) -> Any: ..."
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
        return f"{prefix} {tool.key}({', '.join(params)}) -> {returns}: ..."


@dataclass(frozen=True)
class Stubs:
    """The declarations, by kind: the checker reads `source`, code mode shows the model each
    tool's declaration beside its docstring (no re-parsing of the text). Immutable: one set
    is shared by every cell built from the same tools and input types."""

    classes: tuple[str, ...]
    """``class Frame: ...`` for each opaque handle type."""
    functions: Mapping[str, str]
    """Tool name -> ``def add(x: int, y: int) -> int: ...``."""
    inputs: Mapping[str, str]
    """Input name -> ``x: int``."""

    @functools.cached_property
    def source(self) -> str:
        return "\n".join(
            [_HEADER, *self.classes, *self.functions.values(), *self.inputs.values(), ""]
        )


_KEPT = 64
"""Stub sets kept: the tool sets and input types a notebook's cells run with."""


class _Kept:
    """The stub sets built last, by `_stub_key` of their tools and inputs, least recently
    used first; thread-safe (cells of several notebooks build stubs at once).

    A key names objects by id. Each set holds them weakly where Python allows (functions,
    code, classes, modules), so a tool redefined in a notebook frees the old function and
    what its closure holds, and strongly otherwise (a ``__signature__``); a set whose weakly
    held object is gone is dropped when looked up, as its id may be another object's now."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sets: OrderedDict[Hashable, tuple[list[weakref.ref[Any]], list[object], Stubs]]
        self._sets = OrderedDict()

    def get(self, key: Hashable) -> Stubs | None:
        with self._lock:
            found = self._sets.get(key)
            if found is None:
                return None
            if any(ref() is None for ref in found[0]):
                del self._sets[key]
                return None
            self._sets.move_to_end(key)
            return found[2]

    def put(self, key: Hashable, refs: list[object], built: Stubs) -> None:
        weak: list[weakref.ref[Any]] = []
        strong: list[object] = []
        for obj in refs:
            try:
                weak.append(weakref.ref(obj))
            except TypeError:  # not weakly referable: small values (None, a Signature)
                strong.append(obj)
        with self._lock:
            self._sets[key] = (weak, strong, built)
            while len(self._sets) > _KEPT:
                self._sets.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._sets.clear()


kept = _Kept()
"""The process's stub sets (`clear` it to measure building them)."""


def stubs(tools: Mapping[str, Tool], inputs: Mapping[str, Any]) -> Stubs:
    """The stubs declaring ``tools`` and the types of ``inputs``: a kept set when every tool
    has a key (`_stub_key.tool_key`) and one was built from the same keys and inputs."""
    plain = tuple(is_plain(value) for value in inputs.values())
    refs: list[object] = []
    keys = tuple(tool_key(t, refs) for t in tools.values())
    # an input's stub is its type's, or for data Monty holds, its type's as data
    kinds = tuple(map(type, inputs.values()))
    refs += kinds
    key = (tuple(tools), keys, tuple(inputs), tuple(map(id, kinds)), plain)
    found = None if None in keys else kept.get(key)
    if found is not None:
        return found
    built = _written(tools, inputs, plain)
    if None not in keys:
        kept.put(key, refs, built)
    return built


def _written(
    tools: Mapping[str, Tool], inputs: Mapping[str, Any], plain: tuple[bool, ...]
) -> Stubs:
    writer = _StubWriter()
    functions = {name: writer.function(t) for name, t in tools.items()}
    declared = {
        name: f"{name}: {type_name(value) if data else writer.render(type(value))}"
        for (name, value), data in zip(inputs.items(), plain, strict=True)
    }
    classes = tuple(f"class {name}: ..." for name in writer.classes)
    return Stubs(classes, types.MappingProxyType(functions), types.MappingProxyType(declared))


def build_stubs(tools: Mapping[str, Tool], inputs: Mapping[str, Any]) -> str:
    """Stub source declaring ``tools`` and the types of ``inputs``."""
    return stubs(tools, inputs).source

"""What a tool's stub is written from, read cheaply, so unchanged stubs are not written again.

Writing a tool's stub costs 0.2-0.3 ms here (`inspect.signature`, then `typing.get_type_hints`,
which compiles every string annotation), paid on every checked cell to key the type-check
cache. The stub is a function of state that is cheap to read and compare: the function
objects of the tool's ``__wrapped__`` chain, each one's code object, which parameters have a
default, its annotations, a ``__signature__`` it was given, and for annotations written as
strings (``from __future__ import annotations``) the objects their names resolve to in the
function's globals. Re-registering a tool, redefining its function, replacing its code or
defaults, editing its annotations, or rebinding a name a string annotation uses changes the
key; rebinding an attribute of a module a string annotation reaches through (``np.ndarray``)
does not, nor renaming a class in place.

A method bound to an object (``tool(client.search)``) is keyed by its function: the object it
is bound to is not in its stub. Anything else (a `functools.partial`, a callable object, a
builtin, a `Tool` subclass with its own signature) has no key and its stub is written each
time.
"""

from __future__ import annotations

import builtins
import functools
import types
import typing
from collections.abc import Hashable, Mapping
from typing import Any

from ._tool import Tool

_NO_NAME = object()
"""What a name a string annotation uses resolves to when it is not defined."""
_PARTIAL_METHOD = ("_partialmethod", "__partialmethod__")
"""Attributes by which `inspect.signature` reads a function's signature from elsewhere."""
_DEPTH = 8
"""How deep aliases that are strings themselves (``Num = "int"``) are followed."""


def tool_key(tool: Tool, refs: list[object]) -> Hashable | None:
    """A hashable value equal for two tools exactly when their stubs are written from the
    same state, or None when the tool is not a plain function or a method bound to an
    object (written each time).

    Objects are in the key by ``id``; each is appended to ``refs``, which whoever keeps the
    key must hold with it and check alive before using it: a live object's id is its own,
    so an equal key names the very same objects (an object freed and its id reused cannot
    match, see `_stubs._Kept`)."""
    if type(tool).signature is not Tool.signature:
        return None
    func: Any = tool.func
    bound = type(func) is types.MethodType  # its function's signature without the first
    if bound:
        func = func.__func__
    parts: list[Hashable] = [tool.key, tool.is_async, bound]
    while True:  # the chain `inspect.signature` and `get_type_hints` follow
        if type(func) is not types.FunctionType:
            return None
        own = func.__dict__
        if own and any(name in own for name in _PARTIAL_METHOD):
            return None
        signature = own.get("__signature__")
        code = func.__code__
        refs += (func, code, signature)
        parts += (
            id(func),
            id(code),
            len(func.__defaults__ or ()),
            tuple(func.__kwdefaults__ or ()),
            tuple(func.__annotations__.items()),
            id(signature),
        )
        if "__wrapped__" not in own:
            break
        func = own["__wrapped__"]
    try:  # `get_type_hints` evaluates the outer annotations in the innermost function's globals
        found = _resolved(names_in_all(tuple(tool.func.__annotations__.values())), func.__globals__)
        key = (*parts, *map(id, found))
        hash(key)
    except TypeError:  # an unhashable annotation (``Annotated[int, {...}]``): no key
        return None
    refs += found
    return key


def _resolved(names: tuple[str, ...], namespace: Mapping[str, Any]) -> list[object]:
    """The objects ``names`` resolve to in a function's globals or builtins, in order,
    followed by those the names in values that are annotations with strings in them
    (aliases) resolve to, a few levels deep."""
    if not names:
        return []
    spare = namespace.get("__builtins__", builtins)
    builtin = spare.__dict__ if isinstance(spare, types.ModuleType) else spare
    objects: list[object] = []
    for _ in range(_DEPTH):
        found = [namespace.get(n, builtin.get(n, _NO_NAME)) for n in names]
        objects += found
        # most are classes, where the evaluation stops
        further = [obj for obj in found if not isinstance(obj, type)]
        names = tuple([name for obj in further for name in _names_in_value(obj)])
        if not names:
            break
    return objects


@functools.lru_cache(maxsize=1024)
def names_in_all(annotations: tuple[Any, ...]) -> tuple[str, ...]:
    """`names_in` of each of a function's annotations, in order (one lookup per tool)."""
    return tuple(name for annotation in annotations for name in names_in(annotation))


def _names_in_value(obj: object) -> tuple[str, ...]:
    try:
        return names_in(obj)
    except TypeError:  # unhashable: not an annotation `get_type_hints` evaluates further
        return ()


@functools.lru_cache(maxsize=1024)
def names_in(annotation: Any) -> tuple[str, ...]:
    """The names the strings in ``annotation`` read (``"list[Frame]"`` reads ``list`` and
    ``Frame``), including strings nested in a generic (``list["Frame"]``) or in a string
    (``'list["Frame"]'``, as ``from __future__ import annotations`` keeps it), which
    `get_type_hints` evaluates in turn."""
    if isinstance(annotation, typing.ForwardRef):
        annotation = annotation.__forward_arg__
    if isinstance(annotation, str):
        try:
            code = compile(annotation, "<annotation>", "eval", dont_inherit=True)
        except (SyntaxError, ValueError):
            return ()
        nested = (
            name for const in code.co_consts if isinstance(const, str) for name in names_in(const)
        )
        return (*code.co_names, *nested)
    return _names_in_args(typing.get_args(annotation))


def _names_in_args(args: typing.Iterable[Any]) -> tuple[str, ...]:
    """`names_in` over a generic's arguments; ``Callable[[int], str]`` has a list among them."""
    return tuple(
        name
        for arg in args
        for name in (_names_in_args(arg) if isinstance(arg, list) else names_in(arg))
    )

"""Whether a value fits an annotation, checked on the host at an orchestrator's boundary.

Monty's checker proves the body right *given* its parameters' annotations; nothing proves the
notebook passes what they say (``pipeline("10")``), nor that a value coming back from a tool
typed ``Any`` is what the return annotation promises. So each call checks its arguments before
the body runs and its value after, as Flyte's sandboxed tasks validate their interface.

Deliberately small: the annotations a sandboxed interface can have (Flyte's list: primitives,
``list``/``dict``/``tuple``/``set``, ``Optional``/``Union``, opaque handle classes), checked
the way a type checker reads them (an ``int`` is a ``float``, a ``bool`` an ``int``). What it
cannot decide without running code (a ``TypeVar``, a ``Protocol``, a ``Callable`` signature)
passes: the type check of the body already covers those.
"""

from __future__ import annotations

import collections.abc
import inspect
import types
import typing
from typing import Any

_NUMBERS: dict[type, tuple[type, ...]] = {float: (int, float), complex: (int, float, complex)}
"""Types a type checker accepts where ``float`` or ``complex`` is written (PEP 484's numeric
tower)."""
_ITEMS: frozenset[Any] = frozenset(
    {
        list,
        set,
        frozenset,
        collections.abc.Sequence,
        collections.abc.MutableSequence,
        collections.abc.Set,
        collections.abc.Collection,
    }
)
"""Generic containers whose one argument types every item (not ``Iterable``: checking an
iterator would use it up)."""


def conforms(value: object, annotation: Any) -> bool:
    """Whether ``value`` fits ``annotation`` (see the module's docstring for how far)."""
    if annotation is Any or annotation is inspect.Parameter.empty or annotation is object:
        return True
    if annotation is None or annotation is type(None):
        return value is None
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Union or origin is types.UnionType:
        return any(conforms(value, arg) for arg in args)
    if origin is typing.Literal:  # ``Literal[1]`` is not ``True``, though ``1 == True``
        return any(type(value) is type(arg) and value == arg for arg in args)
    if origin is None:
        if isinstance(annotation, type):
            return isinstance(value, _NUMBERS.get(annotation, annotation))
        return True  # a TypeVar, a NewType, a string: the body's type check covers them
    if not isinstance(origin, type) or not isinstance(value, origin):
        return not isinstance(origin, type)  # ``Annotated`` and the like: not ours to read
    if not args:
        return True
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return all(conforms(item, args[0]) for item in value)  # type: ignore[attr-defined]
        return len(value) == len(args) and all(  # type: ignore[arg-type]
            conforms(item, arg)
            for item, arg in zip(value, args, strict=True)  # type: ignore[call-overload]
        )
    if origin in (dict, collections.abc.Mapping, collections.abc.MutableMapping):
        key, item = args if len(args) == 2 else (Any, Any)
        return all(
            conforms(k, key) and conforms(v, item)
            for k, v in value.items()  # type: ignore[attr-defined]
        )
    if origin in _ITEMS:
        return all(conforms(item, args[0]) for item in value)  # type: ignore[attr-defined]
    return True  # a Callable's signature, an Iterator's items: not checked without running it

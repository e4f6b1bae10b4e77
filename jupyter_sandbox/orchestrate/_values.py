"""What crosses into the sandbox as data, and what crosses as an opaque handle.

Monty holds plain data (numbers, strings, bytes, dates, Decimal, containers of those). Anything
else (a DataFrame, an array, a client object) is wrapped in `pydantic_monty.ClassInstance`
with no attributes and no methods exposed: the code can pass it to tools and return it, but
cannot read it, and the host gets the very same object back.
"""

from __future__ import annotations

import datetime
import decimal
import pathlib
from typing import Any

from pydantic_monty import ClassInstance

_SCALARS: frozenset[type] = frozenset(
    {
        type(None),
        bool,
        int,
        float,
        complex,
        str,
        bytes,
        datetime.date,
        datetime.datetime,
        datetime.time,
        datetime.timedelta,
        decimal.Decimal,
        pathlib.PurePosixPath,
    }
)
_CONTAINERS: frozenset[type] = frozenset({list, tuple, set, frozenset})
_MAX_DEPTH = 64


def is_plain(value: object, depth: int = 0) -> bool:
    """True when Monty can hold ``value`` as data (exact types only: a dict subclass would
    silently lose its class on the way in, so it travels as a handle instead)."""
    kind = type(value)
    if kind in _SCALARS:
        return True
    if depth > _MAX_DEPTH:
        return False
    if kind is dict:
        return all(
            is_plain(k, depth + 1) and is_plain(v, depth + 1)
            for k, v in value.items()  # type: ignore[attr-defined]
        )
    if kind in _CONTAINERS or (isinstance(value, tuple) and hasattr(value, "_fields")):
        return all(is_plain(item, depth + 1) for item in value)  # type: ignore[attr-defined]
    return False


def to_sandbox(value: Any) -> Any:
    """Plain data as is; anything else as an opaque handle.

    Containers mixing data and objects are handled element by element, so a tool may return
    ``{"frame": df, "rows": 3}`` and the code can still read ``rows``.
    """
    if type(value) in _SCALARS or is_plain(value):  # the common case first: once per call
        return value
    kind = type(value)
    if kind is dict:
        return {to_sandbox(k): to_sandbox(v) for k, v in value.items()}
    if kind in _CONTAINERS:
        return kind(to_sandbox(item) for item in value)
    return ClassInstance(value)


def type_name(value: object) -> str:
    """The stub type the type checker should see for an input value."""
    kind = type(value)
    if kind in _SCALARS:
        if kind is type(None):
            return "None"
        return (
            kind.__name__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__name__}"
        )
    if kind is dict:
        return "dict[Any, Any]"
    if kind in _CONTAINERS:
        return f"{kind.__name__}[Any]" if kind is not tuple else "tuple[Any, ...]"
    return "Any"

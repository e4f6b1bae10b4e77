"""What crosses into the sandbox as data, and what crosses as an opaque handle.

Monty holds plain data (numbers, strings, bytes, dates, Decimal, containers of those). Anything
else (a DataFrame, an array, a client object) is wrapped in `pydantic_monty.ClassInstance`
with no attributes and no methods exposed: the code can pass it to tools and return it, but
cannot read it, and the host gets the very same object back.

A handle shows its host class's name and nothing of its state: ``str(h)`` reads ``Opaque()``,
and ``type(h)`` is the class, which the code can name and hand to a tool (the tool gets the
host class) but cannot call, construct or read. That is accepted: the name is no data of the
object; the class gives a tool nothing a handle does not already (any host object crosses as
a handle, a function too, so a tool that calls what it is given is the risk either way); and
the name is what errors and restored runs use to say which object a message is about.
"""

from __future__ import annotations

import datetime
import decimal
import itertools
import pathlib
from collections.abc import Iterable
from typing import Any

from pydantic_monty import ClassInstance, MontyClassProxy, MontyClassTypeProxy, MontyStdTypeProxy

SCALARS: frozenset[type] = frozenset(
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
_WRITTEN_BY_REPR: frozenset[type] = SCALARS - {type(None), bool, int, str, bytes}
"""Data whose written-out size `data_size` takes from its repr (each is short to compute, and
the walk stops at the limit, so ``[d] * 10**6`` costs at most the limit's worth)."""
DEPTH_CEILING = 64
"""Nesting levels that cross as data; deeper parts cross as handles (Monty's conversion
recurses, and a 5000-deep list would overflow it)."""
_HANDLE_SIZE = 8
"""What `data_size` counts for each item (a container's slot), on top of what it writes."""


def is_plain(value: object) -> bool:
    """True when Monty can hold ``value`` as data (exact types only: a dict subclass would
    silently lose its class on the way in, so it travels as a handle instead). Containers
    nested deeper than `DEPTH_CEILING`, or holding themselves, are not."""
    return type(value) in SCALARS or _plain(value, 0, {})


def _plain(value: object, depth: int, seen: dict[int, bool]) -> bool:
    """`is_plain`, remembering each container's answer by id: a value built from shared
    references (``[a] * 1000``, or ``x = [x, x]`` twenty times over) is walked once per
    object, not once per path, and a container met again while it is being checked (a
    cycle) is not plain."""
    kind = type(value)
    if kind in SCALARS:
        return True
    if depth >= DEPTH_CEILING or not (kind is dict or kind in _CONTAINERS or _is_namedtuple(value)):
        return False
    key = id(value)
    if key in seen:
        return seen[key]
    seen[key] = False
    items: Iterable[Any] = (
        itertools.chain.from_iterable(value.items())  # type: ignore[attr-defined]
        if kind is dict
        else value  # type: ignore[assignment]
    )
    seen[key] = answer = all(_plain(item, depth + 1, seen) for item in items)
    return answer


def _is_namedtuple(value: object) -> bool:
    """Told by the type alone: ``isinstance`` and ``hasattr`` ask the object itself (its
    ``__class__``, its ``__getattr__``), and a proxy a tool returns (a lazy object, an unbound
    context-local) may raise there, or claim to be a tuple and iterate without end."""
    kind = type(value)
    return issubclass(kind, tuple) and hasattr(kind, "_fields")


def to_sandbox(value: Any) -> Any:
    """Plain data as is; anything else as an opaque handle.

    Containers mixing data and objects are handled element by element, so a tool may return
    ``{"frame": df, "rows": 3}`` and the code can still read ``rows``. What cannot be split
    that way crosses whole as one handle: a dict keyed by an object (``{handle: 1}``) or a set
    of objects (sandbox keys and set members must be hashable data), a named tuple holding an
    object, and whatever sits deeper than `DEPTH_CEILING`. A container that holds itself crosses
    with a handle where the cycle closes.
    """
    if type(value) in SCALARS:  # the common case first: once per call
        return value
    return _to_sandbox(value, 0, {}, {})


def _to_sandbox(value: Any, depth: int, plain: dict[int, bool], done: dict[int, Any]) -> Any:
    if _plain(value, depth, plain):
        return value
    kind = type(value)
    if depth >= DEPTH_CEILING or not (kind is dict or kind in _CONTAINERS):
        return ClassInstance(value)
    if kind is dict:
        if not all(_plain(k, depth + 1, plain) for k in value):
            return ClassInstance(value)
    elif kind in (set, frozenset):
        return ClassInstance(value)  # not plain, so it holds an object
    key = id(value)
    if key in done:  # shared (converted once) or a cycle closing (its handle)
        return done[key]
    done[key] = ClassInstance(value)
    step = depth + 1
    converted = (
        {k: _to_sandbox(v, step, plain, done) for k, v in value.items()}
        if kind is dict
        else kind(_to_sandbox(item, step, plain, done) for item in value)
    )
    done[key] = converted
    return converted


def data_size(value: object, limit: int) -> int:
    """Roughly the bytes ``value`` takes once written out (its repr, JSON, a display
    message), counting shared references each time they appear, as writing them out does:
    characters of text and bytes, digits of numbers, the host repr of a handle (an object),
    and `_HANDLE_SIZE` more for each item. Stops counting past ``limit`` (and returns what it
    has, more than ``limit``), so a value that would write out to gigabytes, or a cycle,
    costs only ``limit`` worth of walking.

    A handle once counted 8 bytes whatever its repr, so the code could share one object with
    a long repr (a DataFrame, a bytearray) a million times and the display wrote that repr
    each time. Each object's repr is measured once (`_repr_size`), however often it is met."""
    total = 0
    reprs: dict[int, int] = {}
    stack = [value]
    while stack and total <= limit:
        item = stack.pop()
        kind = type(item)
        total += _HANDLE_SIZE
        if kind is str or kind is bytes:
            total += len(item)  # type: ignore[arg-type]
        elif kind is int:  # its digits, without writing them (past 4300 `repr` refuses)
            total += item.bit_length() * 3 // 10  # type: ignore[attr-defined]
        elif kind in _WRITTEN_BY_REPR:  # a 4000-digit Decimal or a long path is no 8 bytes
            total += len(repr(item))
        elif kind is dict or kind in _CONTAINERS or _is_namedtuple(item):
            if total + _HANDLE_SIZE * len(item) > limit:  # type: ignore[arg-type]
                return total + _HANDLE_SIZE * len(item)  # type: ignore[arg-type]
            stack.extend(
                itertools.chain.from_iterable(item.items())  # type: ignore[attr-defined]
                if kind is dict
                else item  # type: ignore[arg-type]
            )
        elif kind not in SCALARS:  # a handle: displays write its host repr each time
            size = reprs.get(id(item))  # the value holds the item, so its id stays its own
            if size is None:
                size = reprs[id(item)] = _repr_size(item, limit)
            total += size
    return total


def _repr_size(item: object, limit: int) -> int:
    """The length of ``item``'s repr, as a display writes it. An object holding more bytes
    than ``limit`` (a buffer: a bytearray, an array) is past it without writing its repr
    (which takes 1-4 characters a byte); a repr that raises counts nothing (the display
    shows one line of its failure). A ``KeyboardInterrupt`` from it may be Ctrl-C: it
    propagates."""
    try:
        held = memoryview(item).nbytes  # type: ignore[arg-type]
    except Exception:  # no buffer, or one that refuses
        held = 0
    if held > limit:
        return held
    try:
        return len(repr(item))
    except KeyboardInterrupt:
        raise
    except BaseException:  # a tool's object: its repr may raise anything, SystemExit too
        return 0


def too_deep(value: object) -> bool:
    """True when containers in ``value`` nest more than `DEPTH_CEILING` levels deep (a container
    that holds itself nests without end): printing or displaying it would recurse past
    Python's limit. Each container is walked again only when met deeper than before."""
    deepest: dict[int, int] = {}
    stack: list[tuple[object, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        kind = type(item)
        if not (kind is dict or kind in _CONTAINERS or _is_namedtuple(item)):
            continue
        if depth > DEPTH_CEILING:
            return True
        if deepest.get(id(item), -1) >= depth:
            continue
        deepest[id(item)] = depth
        items: Iterable[object] = item.values() if kind is dict else item  # type: ignore[attr-defined,assignment]
        stack.extend((child, depth + 1) for child in items)
    return False


_PROXIES: frozenset[type] = frozenset({MontyClassProxy, MontyClassTypeProxy, MontyStdTypeProxy})
"""What Monty hands back for what the code made or named itself (an instance of a class it
defined, a class, a builtin): data of the run, not host objects."""


def as_seen(value: Any, depth: int = 0) -> str:
    """``value`` written as the code in Monty sees it: data by its repr, a handle by its
    class's name only (``Opaque()``), a class as ``<class 'Name'>``, what the code made itself
    as Monty writes it (a dataclass with its fields). Never an object's host ``repr``, which
    may hold what the handle keeps from the code (a client's key): what leaves a run for
    someone who may see only what the code could (an MCP client) is written with this."""
    kind = type(value)
    if kind in SCALARS:
        return repr(value)
    if depth >= DEPTH_CEILING:
        return "..."
    step = depth + 1
    if kind is list:
        return f"[{', '.join(as_seen(item, step) for item in value)}]"
    if kind is tuple:
        items = [as_seen(item, step) for item in value]
        return f"({items[0]},)" if len(items) == 1 else f"({', '.join(items)})"
    if is_data_namedtuple(value):
        fields = (f"{k}={as_seen(v, step)}" for k, v in zip(kind._fields, value, strict=False))
        return f"{kind.__name__}({', '.join(fields)})"
    if kind is dict and not any(map(is_host_object, value)):
        pairs = (f"{as_seen(k, step)}: {as_seen(v, step)}" for k, v in value.items())
        return f"{{{', '.join(pairs)}}}"
    if (kind is set or kind is frozenset) and not any(map(is_host_object, value)):
        members = ", ".join(as_seen(item, step) for item in value)
        if kind is frozenset:
            return f"frozenset({{{members}}})" if members else "frozenset()"
        return f"{{{members}}}" if members else "set()"
    if kind is MontyClassProxy:
        if value.is_dataclass:
            fields = (f"{k}={as_seen(v, step)}" for k, v in value.attributes.items())
            return f"{value.name}({', '.join(fields)})"
        return f"<{value.name} object>"
    if kind is MontyStdTypeProxy and value.kind == "function":
        return f"<built-in function {value.name}>"
    if kind is MontyClassTypeProxy or kind is MontyStdTypeProxy:
        return f"<class {value.name!r}>"
    if issubclass(kind, type):  # a host class (``type(handle)``): its name, as for a handle
        return f"<class {value.__name__!r}>"
    return f"{kind.__name__}()"


def is_data_namedtuple(value: object) -> bool:
    """True for a named tuple that crossed as data (the code reads its fields); one holding
    an object crossed whole as a handle."""
    return _is_namedtuple(value) and is_plain(value)


def is_host_object(value: object) -> bool:
    """True for a value the code holds as an opaque handle: neither data nor one of Monty's
    own proxies. A dict keyed by one, or a set holding one, crossed whole as a handle."""
    return type(value) not in _PROXIES and not is_plain(value)


def type_name(value: object) -> str:
    """The stub type the type checker should see for an input value."""
    kind = type(value)
    if kind in SCALARS:
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


class HandleMarker(dict[str, str]):
    """``{"handle": name}``: stands in, in a stored call record, for a value pickle could not
    store. ``name`` is the value's type (``module.QualName``), never its repr, which may be
    huge or hold secrets. A dict, as the engine reads it; a class of its own, so that a tool
    whose result is the dict ``{"handle": ...}`` is never mistaken for one. A checkpointed
    argument that was a handle the run sent into Monty also carries ``"id"``, its uuid, by
    which a restored run binds it again (`_rebind`)."""

    def __init__(self, name: str) -> None:
        super().__init__(handle=name)

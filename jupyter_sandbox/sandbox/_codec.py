"""Values as files: the one encoding both sides of a sandbox agree on.

This module is copied next to the code inside the container (the auto-IO runner imports it), so
it is standard library only and has no package-relative imports. Each value is written in the
most natural text a verbatim script or a shell command would read or write (``42``, raw UTF-8,
ISO dates, JSON for lists and dicts); the declared type tag, never the content, decides how a
file is read back. Nothing is pickled and nothing passes through a shell.

Its import is on the path of every auto-IO run (the runner imports it in a fresh interpreter),
so it imports only ``datetime`` (a C module, ~0.3 ms) at the top: ``json`` (which brings ``re``
and ``enum``: ~13 ms in a container under load), ``decimal`` and ``re`` are imported by the
functions that need them, and ``typing`` (~7 ms) only by the type checker.
"""

from __future__ import annotations

import datetime as dt

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

SCALAR_TAGS = ("int", "float", "bool", "str", "bytes", "none", "datetime", "date", "timedelta")
PATH_TAGS = ("file", "dir")
TAGS = (*SCALAR_TAGS, "json", *PATH_TAGS)
INFERABLE = (*SCALAR_TAGS, "json")
"""Tags `infer` can give: never a path, so an untyped output never becomes a `File`/`Dir`."""
INFERRED_TYPES = ".inferred-types.json"
"""Tags the auto-IO runner chose for outputs declared without one (no output name starts with
a dot, so it cannot collide)."""
_MICROS = 1_000_000
_SECONDS_CEILING = int(dt.timedelta.max.total_seconds()) + 1
"""Checked before converting, so ``1e999999`` is refused instead of built as a huge integer."""
_COSTS = ((b"[", 120), (b"{", 216), (b":", 64), (b",", 44), (b'"', 28))
"""Bytes of Python objects `json_size` counts per character of JSON, each at least what that
character can make json build (CPython 3.11, 64 bits, sizes as tracemalloc sees them):
``[`` a list with its first 4 slots (88) and its first item (a number: 32); ``{`` a dict of up
to 5 keys (184) and its first value; ``:`` one more dict entry (the table grows); ``,`` one
more item (an 8-byte slot, 1/8 of one for the list's growth, a number's 24-32 bytes); ``"``
half a string's header (49 bytes, rounded up). The text of strings and numbers is the
data's length on top."""
_STRINGS = rb'"[^"\\]*+(?:\\.[^"\\]*+)*+(?:"|\Z)'
"""A JSON string, or an unterminated one to the end (json stops there: nothing after it is
built), matched once each: linear in the data."""
_STRIPPED = 2_000_000
"""Quotes past which `json_size` does not count again without the strings: each string
matched costs ~0.6 us, so this caps that count near a second."""


def check(tag: str, value: Any) -> None:
    """Raise TypeError when ``value`` cannot be encoded, exactly, as ``tag``."""
    test = _CHECKS.get(tag)
    if test is None:
        raise TypeError(f"unknown type tag {tag!r}")
    if not test(value):
        got = type(value).__name__
        hint = " (JSON would not give it back unchanged)" if tag == "json" else ""
        raise TypeError(f"expected {tag}, got {got}{hint}")


def _json_exact(value: Any) -> bool:
    import json

    try:
        return bool(json.loads(json.dumps(value)) == value)
    except (TypeError, ValueError):
        return False


_CHECKS: dict[str, Callable[[Any], bool]] = {
    "int": lambda value: isinstance(value, int) and not isinstance(value, bool),
    "float": lambda value: isinstance(value, int | float) and not isinstance(value, bool),
    "bool": lambda value: isinstance(value, bool),
    "str": lambda value: isinstance(value, str),
    "bytes": lambda value: isinstance(value, bytes | bytearray),
    "none": lambda value: value is None,
    "datetime": lambda value: isinstance(value, dt.datetime),
    "date": lambda value: isinstance(value, dt.date) and not isinstance(value, dt.datetime),
    "timedelta": lambda value: isinstance(value, dt.timedelta),
    "json": lambda value: isinstance(value, list | dict) and _json_exact(value),
}
"""Per tag, whether a value is exactly that; only the declared tag's test runs (the JSON
round trip costs an import and a copy of the value)."""


def infer(value: Any) -> str:
    """The tag of a value (order matters: bool is an int, datetime is a date)."""
    kinds: tuple[tuple[Any, str], ...] = (
        (bool, "bool"),
        (int, "int"),
        (float, "float"),
        (str, "str"),
        (bytes | bytearray, "bytes"),
        (type(None), "none"),
        (dt.datetime, "datetime"),
        (dt.date, "date"),
        (dt.timedelta, "timedelta"),
        (list | dict, "json"),
    )
    for kind, tag in kinds:
        if isinstance(value, kind):
            return tag
    raise TypeError(f"unsupported type {type(value).__name__}")


def encode(tag: str, value: Any) -> bytes:
    """The file content for ``value`` declared as ``tag`` (checked first)."""
    check(tag, value)
    if tag == "bytes":
        return bytes(value)
    if tag == "none":
        return b""
    if tag == "bool":
        return b"true" if value else b"false"
    if tag == "float":
        return repr(float(value)).encode()
    if tag in ("datetime", "date"):
        return str(value.isoformat()).encode()
    if tag == "timedelta":
        micros = value // dt.timedelta(microseconds=1)
        sign = "-" if micros < 0 else ""
        whole, frac = divmod(abs(micros), _MICROS)
        return f"{sign}{whole}.{frac:06d}".encode()
    if tag == "json":
        import json

        return json.dumps(value, ensure_ascii=False).encode()
    return str(value).encode()


def decode(tag: str, data: bytes) -> Any:
    """The value a file holds, read as ``tag``; ValueError when it does not parse.

    The data comes from code we do not trust, so every way parsing can fail (an overflowing
    number, JSON nested past the recursion limit...) is a ValueError, never anything else.
    """
    try:
        return _decode(tag, data)
    except ArithmeticError:
        raise ValueError(f"out of range for {tag}: {data[:40]!r}") from None
    except RecursionError:
        raise ValueError(f"nested too deeply to read as {tag}") from None


def _decode(tag: str, data: bytes) -> Any:
    if tag == "bytes":
        return data
    if tag == "none":
        return None
    text = data.decode("utf-8")
    if tag == "str":
        return text
    word = text.strip()
    if tag == "int":
        return int(word)
    if tag == "float":
        return float(word)
    if tag == "bool":
        if word.lower() in ("true", "1"):
            return True
        if word.lower() in ("false", "0"):
            return False
        raise ValueError(f"not a bool: {word[:40]!r}")
    if tag == "datetime":
        return dt.datetime.fromisoformat(word)
    if tag == "date":
        return dt.date.fromisoformat(word)
    if tag == "timedelta":
        from decimal import Decimal

        seconds = Decimal(word)
        if not seconds.is_finite() or abs(seconds) > _SECONDS_CEILING:
            raise ValueError(f"not a timedelta in seconds: {word[:40]!r}")
        return dt.timedelta(microseconds=int(seconds * _MICROS))
    if tag == "json":
        import json

        return json.loads(text)
    raise ValueError(f"unknown type tag {tag!r}")


def json_size(data: bytes, bound: int) -> int:
    """An upper bound of the bytes of Python objects ``json.loads(data)`` builds, for any data
    (valid JSON or not: json builds a value before finding an error after it).

    Counted without parsing, so an output is refused before it costs the kernel up to ~34
    times its size (``[[[]]],...``): structural characters times `_COSTS`, plus the data's
    length for the text of strings and numbers (times 4 when a string may hold a character
    beyond ASCII: one such character makes CPython store every character of its string in 4
    bytes). The first count takes structural characters inside strings as structure (a
    string of brackets is over-counted ~100 times), so a count over ``bound`` is redone with
    the strings taken out (a regular expression: ~10-100 MB/s, so only for up to a million
    strings; the first count runs at ~200 MB/s). Measured: 1.4-3x the real size for lists,
    dicts, records, numbers and strings (JSON text in strings 1.6x once counted again); more
    only where CPython shares objects (small integers, ``null``, empty strings: 5-13x) and
    for escapes (``\\u0000``: 16x).
    """
    letters = len(data) * (1 if _ascii(data) else 4)
    size = _structure(data) + letters
    if size > bound and data.count(b'"') <= _STRIPPED:  # without the strings' own brackets
        import re  # caches the compiled pattern

        size = _structure(re.sub(_STRINGS, b'""', data, flags=re.DOTALL)) + letters
    return size


def _structure(data: bytes) -> int:
    return sum(data.count(char) * cost for char, cost in _COSTS)


def _ascii(data: bytes) -> bool:
    """Whether every string in ``data`` is stored one byte per character (no character past
    ASCII, raw or as a ``\\u`` escape; latin-1 ones would be, but telling costs a scan)."""
    return data.isascii() and b"\\u" not in data

"""Just enough CBOR to replace two fields of a Monty session or snapshot dump (see `_sessions`).

A dump is ``MONTY`` + a format header + one CBOR item. We never decode the whole item (the
heap can be large): `span` walks map keys down a path and returns where a value's bytes start
and end, and `encode` writes the few plain values we put in their place. Everything else in
the dump is copied byte for byte.
"""

from __future__ import annotations

from typing import Any

_TEXT, _ARRAY, _MAP = 3, 4, 5


def _head(data: bytes, at: int) -> tuple[int, int, int, int]:
    """Major type, argument, and where the item's content starts; ``info`` 31 (indefinite
    length) is not used by Monty's encoder and is refused."""
    byte = data[at]
    major, info = byte >> 5, byte & 31
    if info < 24:
        return major, info, info, at + 1
    if info > 27:
        raise ValueError(f"unsupported CBOR item at byte {at}")
    size = 1 << (info - 24)
    return major, int.from_bytes(data[at + 1 : at + 1 + size], "big"), info, at + 1 + size


def skip(data: bytes, at: int) -> int:
    """Where the item starting at ``at`` ends (a loop, not recursion: a heap holds
    hundreds of thousands of items)."""
    remaining = 1
    while remaining:
        remaining -= 1
        major, arg, _, at = _head(data, at)
        if major in (2, _TEXT):
            at += arg
        elif major == _ARRAY:
            remaining += arg
        elif major == _MAP:
            remaining += 2 * arg
        elif major == 6:
            remaining += 1
    return at


def keys_follow(data: bytes, at: int, keys: tuple[str, ...]) -> int:
    """Where the map entries starting at ``at`` end, if they are exactly ``keys`` in this
    order; `ValueError` otherwise."""
    for key in keys:
        if _text(data, at) != key:
            raise ValueError(f"expected key {key!r} at byte {at}")
        at = skip(data, skip(data, at))
    return at


def _text(data: bytes, at: int) -> str | None:
    major, arg, _, start = _head(data, at)
    return data[start : start + arg].decode() if major == _TEXT else None


def span(data: bytes, at: int, path: tuple[str, ...]) -> tuple[int, int]:
    """Start and end of the value reached from the map at ``at`` through the keys ``path``;
    `KeyError` naming the key when it is missing."""
    start = find(data, at, path)
    return start, skip(data, start)


def find(data: bytes, at: int, path: tuple[str, ...]) -> int:
    """Where the value reached through ``path`` starts (`span` without walking to its end,
    which for a dump's state means walking its whole heap)."""
    for key in path:
        major, count, _, at = _head(data, at)
        if major != _MAP:
            raise KeyError(key)
        for _ in range(count):
            found = _text(data, at) == key
            at = skip(data, at)
            if found:
                break
            at = skip(data, at)
        else:
            raise KeyError(key)
    return at


def first_key(data: bytes, at: int) -> str | None:
    """The first key of the map at ``at`` (a Rust enum's variant: ``{"Idle": ...}``); None
    when it is not a map with a text key first."""
    major, count, _, start = _head(data, at)
    return _text(data, start) if major == _MAP and count else None


def decode_text(data: bytes, at: int) -> str | None:
    """The text at ``at``, or None when the item there is null."""
    if data[at] == 0xF6:
        return None
    value = _text(data, at)
    if value is None:
        raise ValueError(f"expected text at byte {at}")
    return value


def decode_simple_map(data: bytes, at: int) -> dict[str, Any]:
    """A map of text keys to integers, nulls and maps of the same (the limits): decoded."""
    major, count, _, at = _head(data, at)
    if major != _MAP:
        raise ValueError(f"expected a map at byte {at}")
    out: dict[str, Any] = {}
    for _ in range(count):
        key = _text(data, at)
        if key is None:
            raise ValueError(f"expected a text key at byte {at}")
        at = skip(data, at)
        kind, arg, _, _ = _head(data, at)
        if kind == _MAP:
            out[key] = decode_simple_map(data, at)
        elif kind == 0:
            out[key] = arg
        elif data[at] == 0xF6:
            out[key] = None
        else:
            raise ValueError(f"unexpected CBOR item for {key!r} at byte {at}")
        at = skip(data, at)
    return out


def _argument(major: int, arg: int) -> bytes:
    if arg < 24:
        return bytes([major << 5 | arg])
    for info, size in ((24, 1), (25, 2), (26, 4), (27, 8)):
        if arg < 1 << (8 * size):
            return bytes([major << 5 | info]) + arg.to_bytes(size, "big")
    raise ValueError(f"{arg} does not fit in CBOR")


def encode(value: Any) -> bytes:
    """CBOR for None, bools, non-negative ints, text, lists and text-keyed dicts."""
    if value is None:
        return b"\xf6"
    if value is True or value is False:
        return b"\xf5" if value else b"\xf4"
    if isinstance(value, int) and value >= 0:
        return _argument(0, value)
    if isinstance(value, str):
        raw = value.encode()
        return _argument(_TEXT, len(raw)) + raw
    if isinstance(value, list):
        return _argument(_ARRAY, len(value)) + b"".join(encode(v) for v in value)
    if isinstance(value, dict):
        return _argument(_MAP, len(value)) + b"".join(
            encode(k) + encode(v) for k, v in value.items()
        )
    raise TypeError(f"cannot encode {type(value).__name__}")

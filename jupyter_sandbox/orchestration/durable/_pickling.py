"""Call records as pickles: only bytes the store sealed itself are ever unpickled; a value
pickle cannot store, or could not load again, becomes a `HandleMarker`.
"""

from __future__ import annotations

import pickle
import re
from typing import Any

from ..._shared._errors import StoreError
from .._values import HandleMarker
from ._files import reason


def pickled(value: object) -> bytes:
    try:
        return _round_trip(value)
    except Exception:  # a value's own __reduce__ or constructor may raise anything
        return _round_trip(_picklable(value))


def _round_trip(value: object) -> bytes:
    """``value`` pickled, once it is known to unpickle too: an exception class whose
    ``__init__`` takes more than its message pickles but cannot be rebuilt, and one such record
    must not make its whole run unloadable. Bytes naming no class (no byte of the opcodes
    that load one anywhere in them: builtin data only, the usual call record) always load:
    they are not loaded to check (a durable run stores every call)."""
    data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    if _CLASS_OPCODES.search(data):
        pickle.loads(data)
    return data


_CLASS_OPCODES = re.compile(
    b"[" + re.escape(pickle.STACK_GLOBAL + pickle.EXT1 + pickle.EXT2 + pickle.EXT4) + b"]"
)
"""The opcodes by which a protocol 4+ pickle names a class or function (GLOBAL is protocol
3's). A byte of one inside data (an int, a character) is only a false alarm: it checks."""


def _picklable(value: object) -> object:
    """``value`` with each part pickle cannot store replaced by a `HandleMarker`, looking
    inside plain dicts, lists and tuples so that one odd argument does not hide the rest."""
    try:
        _round_trip(value)
    except Exception:
        pass
    else:
        return value
    if type(value) is dict:
        return {key: _picklable(item) for key, item in value.items()}
    if type(value) is list:
        return [_picklable(item) for item in value]
    if type(value) is tuple:
        return tuple(_picklable(item) for item in value)
    kind = type(value)
    return HandleMarker(f"{kind.__module__}.{kind.__qualname__}")


def unpickled(payload: bytes, what: str) -> Any:
    """Bytes this store sealed (checked by the caller): a value whose class this process
    lacks (one defined in a notebook cell not run yet) cannot be rebuilt, and says so."""
    try:
        return pickle.loads(payload)
    except Exception as error:
        raise StoreError(
            f"{what} holds a value this process cannot rebuild ({reason(error)}): define "
            "what it names (run the cell that does), then try again"
        ) from error

"""The type checks that passed, remembered so an unchanged cell is not checked again.

Monty's checker costs 20-25 ms per cell (more for longer code), paid again each time a cell is
re-run although nothing it reads has changed. What it reads is all text: the stubs (the tools'
signatures, the inputs' types, the check's own stop call), a session's declarations and
imports (the checker's state `durable.SessionLink.load` builds from them), the code, and
Monty's own version (its checker and the standard library stubs it ships). A cell whose key
(a SHA-256 of all of them) passed once passes again, so its check is skipped. The stubs the
key hashes are themselves kept by what they are written from (`_stubs.kept`), so an unchanged
cell's key costs tens of microseconds, not the few hundred writing them takes.

Only passes are kept: a rejected cell is checked again by the feed that runs it, so its errors
are drawn from the cell's own lines (see `Driver._checked_apart`). The cache is per process,
in memory, and bounded (least recently used out first): a stale entry cannot exist, since any
change to what the checker reads is a different key.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence

import pydantic_monty as pm

_SIZE = 256
"""Keys kept: a notebook's cells times the tool sets they ran with, with room to spare
(32 bytes each)."""
_VERSION = pm.__version__.encode()


class Passed:
    """Keys of checks that passed, least recently used first; thread-safe (runs of several
    notebooks check at once)."""

    def __init__(self, size: int = _SIZE) -> None:
        self._size = size
        self._lock = threading.Lock()
        self._keys: OrderedDict[bytes, None] = OrderedDict()

    def __contains__(self, key: bytes) -> bool:
        with self._lock:
            if key not in self._keys:
                return False
            self._keys.move_to_end(key)
            return True

    def add(self, key: bytes) -> None:
        with self._lock:
            self._keys[key] = None
            self._keys.move_to_end(key)
            while len(self._keys) > self._size:
                self._keys.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._keys.clear()


passed = Passed()
"""The process's cache (`clear` it to measure a cold check)."""


def key(stubs: str, code: str, declarations: Sequence[str] | None) -> bytes:
    """What the checker reads for ``code``, hashed, with ``declarations`` (a session's:
    `_hooks.Feature.declarations`). Each part is length-prefixed, so no two different sets
    of parts hash the same text."""
    parts = [_VERSION, stubs.encode(), code.encode()]
    parts += [part.encode() for part in declarations or ()]
    digest = hashlib.sha256()
    for part in parts:
        digest.update(len(part).to_bytes(8, "little"))
        digest.update(part)
    return digest.digest()


def checked(stubs: str, code: str, declarations: Sequence[str], check: Callable[[], bool]) -> bool:
    """Whether ``code`` passed the type check: True at once when this key passed before,
    else ``check()``, remembered when it passes."""
    found = key(stubs, code, declarations)
    if found in passed:
        return True
    ok = check()
    if ok:
        passed.add(found)
    return ok

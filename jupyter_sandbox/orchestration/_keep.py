"""How many bytes of tool values a run, a kernel and the store keep: the defaults, in one place.

Every argument a cell passes to a tool is copied out of Monty into the kernel, and every
result comes back from the host. Before these bounds a run's trace, the journal ``--resume``
replays from (256 cells of them) and the store kept each of those values whole: ``s = 'x' *
5_000_000`` passed 200 times a cell grew the kernel by ~950 MB a cell, never freed, and three
cells of 300 calls with a 1 MB argument grew the store by ~290 MB each. Monty's own heap was
bounded (``--max-memory``); the copies outside it were not.

So what is kept is counted in bytes (`_values.data_size`: what the value takes written out):

- a value larger than `Keep.value`, or one that would take a run past `Keep.run`, is kept as
  a `Summary` (its type, size and digest) in the trace, the journal and the record, and the
  call then counts as not replayable (``--resume`` calls its tool again);
- the journals of a kernel together keep at most `Keep.kernel`: the least recently run cell's
  is forgotten first (`_memo.Journals`);
- the store keeps at most `Keep.store_run` of one run, `Keep.store_cell` of a cell's runs
  and `Keep.store_total` in all (`_store.Store.make_room`, `_durable.Durable`);
- the bytes of arguments crossing to the host count against ``--max-transfer``
  (`_limits.Limits.max_transfer`), so a loop that copies gigabytes out stops with one line.

A host object a tool returned (a handle) is no copy: it is kept by reference, as before.
The ``%%orchestrate`` magic's ``%config`` settings read their defaults from `Keep()`.
"""

from __future__ import annotations

import hashlib
import pickle
from dataclasses import dataclass
from typing import Any

from .._shared import _defaults as default
from .._shared._checks import bounded
from ._trace import Plain, Started
from ._values import HandleMarker, data_size, is_plain

MB = 2**20

_SMALL = frozenset({type(None), bool, float})
TINY = 128
"""Bytes under which a value is kept whole however full the run is: its summary would be
no smaller. Each still counts."""
TEXT_CHARS = 8000
"""Characters of a failed call's error, and of its host traceback, kept (`Keeper.text`)."""


@dataclass(frozen=True)
class Keep:
    """Megabytes of tool values kept whole; ``Keep()`` holds the defaults."""

    value: int = default.KEEP_VALUE
    """One value (an argument, a result); larger ones are kept as a `Summary`."""
    run: int = default.KEEP_RUN
    """All values one run's trace (and so its journal and record) keeps whole."""
    kernel: int = default.KEEP_KERNEL
    """All values the ``--resume`` journals of one kernel keep."""
    store_run: int = default.STORE_RUN
    """What one run writes to the store (call records and its latest snapshot): past it,
    later values are kept as summaries and the run says so once."""
    store_cell: int = default.STORE_CELL
    """What the runs of one cell keep in the store: older runs of the cell are evicted."""
    store_total: int = default.STORE_TOTAL
    """What the store keeps in all: the oldest runs are evicted (paused runs are kept, and
    counted), and the file shrinks."""

    def __post_init__(self) -> None:
        for name in ("value", "run", "kernel", "store_run", "store_cell", "store_total"):
            bounded(getattr(self, name), name, low=1, high=2**40, integer=True, unit="MB")


DEFAULT_KEEP = Keep()
"""What a run keeps when given no `Keep`: the defaults, made once (a run is made per call)."""


class Summary(HandleMarker):
    """Stands in for a value too large to keep: ``{"handle": type, "size": bytes, "digest":
    sha256 prefix}``. A `HandleMarker`, so a stored call whose result is one counts as not
    completed and an argument that is one never matches a call made again (not replayed)."""

    def __init__(self, name: str, size: int, digest: str) -> None:
        super().__init__(name)
        self["size"] = str(size)
        self["digest"] = digest

    def __repr__(self) -> str:
        return (
            f"<{self['handle']} of {int(self['size']):,} bytes, sha256:{self['digest']}, not kept>"
        )


def summary(value: Any, size: int | None = None) -> Summary:
    """``value``'s `Summary` (``size``: its `data_size` when known exactly)."""
    kind = type(value)
    if kind is str:
        data = value.encode("utf-8", "surrogatepass")
        size = len(value)
    elif kind is bytes:
        data, size = value, len(value)
    else:
        try:
            data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception:  # a value's own __reduce__ may raise anything
            data = b""
        if size is None:
            size = data_size(value, 2**62)
    return Summary(f"{kind.__module__}.{kind.__qualname__}", size, _digest(data))


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def quick_size(value: Any, limit: int) -> int | None:
    """``value``'s `data_size`, cheaply for the usual argument; None for a host object (a
    handle: kept by reference, it copies nothing)."""
    kind = type(value)
    if kind is str or kind is bytes:
        return len(value)
    if kind in _SMALL or (kind is int and value.bit_length() <= 64):
        return 8
    if not is_plain(value):
        return None
    return data_size(value, limit)


class Keeper:
    """One run's account of the values its trace keeps whole (`Keep.value`, `Keep.run`)."""

    __slots__ = ("left", "limit", "summarized", "used")

    def __init__(self, keep: Keep) -> None:
        self.limit = keep.value * MB
        self.left = keep.run * MB
        self.used = 0
        """Bytes kept whole so far (what a journal of this run holds)."""
        self.summarized = 0
        """Values kept as a `Summary`."""

    def kept(self, value: Any) -> Any:
        """``value`` itself while it fits, counted; else its `Summary`."""
        size = quick_size(value, self.limit)
        if size is None:
            return value
        if size <= TINY or (size <= self.limit and size <= self.left):
            self.left -= size
            self.used += size
            return value
        self.summarized += 1
        return summary(value, size if size <= self.limit else None)

    def plain(self, started: Started, end: float, value: Any, size: int) -> Plain:
        """A plain call as the trace keeps it (`_trace.Plain`), ``size`` the bytes of its
        arguments (`crossing_bytes`): the hot path, so arguments that fit whole are counted
        at once, and a number returned is kept without a call of ours."""
        if size <= TINY or (size <= self.limit and size <= self.left):
            self.left -= size
            self.used += size
        else:
            started = (*started[:3], self.args(started[3]), self.kwargs(started[4]), started[5])
        kind = type(value)
        if not (kind is int or kind is float or kind is bool or value is None):
            value = self.kept(value)
        return started, end, value

    def text(self, text: str) -> str:
        """A failed call's error or host traceback as kept: its two ends when longer than
        `TEXT_CHARS` (a tool raising ``ValueError('z' * 5_000_000)`` in a loop kept ~10 MB a
        call before), `TINY` characters once the run's budget is spent; counted."""
        if len(text) > TEXT_CHARS:
            half = TEXT_CHARS // 2
            text = f"{text[:half]} … ({len(text):,} characters, cut) … {text[-half:]}"
        if len(text) > TINY and len(text) > self.left:
            text = text[:TINY] + "…"
        self.left -= len(text)
        self.used += len(text)
        return text

    def args(self, args: tuple[Any, ...]) -> tuple[Any, ...]:
        """``args`` as kept: the same tuple when each fits (the usual call allocates nothing)."""
        out: list[Any] | None = None
        for i, arg in enumerate(args):
            kept = self.kept(arg)
            if kept is not arg:
                if out is None:
                    out = list(args)
                out[i] = kept
        return args if out is None else tuple(out)

    def kwargs(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        if not kwargs:
            return kwargs
        kept = {k: self.kept(v) for k, v in kwargs.items()}
        return kwargs if all(kept[k] is v for k, v in kwargs.items()) else kept


def crossing_bytes(args: tuple[Any, ...], kwargs: dict[str, Any], limit: int) -> int:
    """Bytes of a call's arguments that crossed to the host (a handle counts nothing: it
    crosses as a reference), counted up to about ``limit``. Once per call, on the hot path:
    the usual argument (a number, a text) is counted inline, without a call of ours."""
    total = 0
    for value in args:
        kind = type(value)
        if kind is str or kind is bytes:
            total += len(value)
        elif kind is int or kind is float or kind is bool or value is None:
            total += 8
        else:
            total += quick_size(value, limit) or 0
    if kwargs:
        total += crossing_bytes(tuple(kwargs.values()), {}, limit)
    return total

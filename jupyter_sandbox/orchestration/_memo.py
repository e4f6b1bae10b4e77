"""Remembered tool results: a per-cell journal for ``--resume`` and an opt-in cross-cell cache.

Both answer a call without calling the tool, and the trace marks such calls ``replayed``.

- `Journal`: the calls of one cell's last run, in the order they were made. Resuming re-runs
  the code and answers call *i* from entry *i* while the tool and arguments match: a call
  that had completed is answered, one that had failed or never finished (cancelled when the
  run stopped) is made again and the replay goes on past it, so in ``gather(a, b, c)`` where
  ``b`` failed after ``c`` finished, only ``b`` runs again. From the first call the code makes
  differently on, tools are called again. That makes a run that failed half-way (a tool
  raised, a limit, an interrupt) cheap to finish.
- `Journaling`: the run's feature (`_hooks`) that writes its calls into its `Journal` when it
  ends.
- `Journals`: the journals ``%%orchestrate`` keeps, by cell and by code (see `Journals.start`).
- `ToolCache`: results by tool and arguments, across cells and runs, for tools whose result
  depends only on their arguments. Opt-in: a cache must never hide a side effect by surprise.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

from .._shared._events import ToolCall
from ..records import Record
from ._hooks import Feature
from ._keep import Keep, quick_size
from ._values import DEPTH_CEILING, HandleMarker, data_size, is_plain

if TYPE_CHECKING:
    from ._driver import Driver

_KEY_LIMIT_BYTES = 2**20
"""Bytes of arguments beyond which a call is not cached (its key would be their repr)."""


@dataclass(frozen=True, slots=True)
class Recorded:
    """A finished run's call as data (a `records.CallRecord` with the values themselves, not
    previews): what a journal or a store keeps, and what a resumed or forked run is answered
    from. Not the live `ToolCall`: a journal must not change when a view still holding that
    object does, nor keep its run's timing origin."""

    call_id: int
    tool: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    status: str
    """``ok``, ``error``, ``cancelled``, ``running`` for a call the run never saw end, or
    ``unstored`` for one whose result was not kept (not replayable)."""
    result: Any = None
    error: str | None = None
    children: tuple[Record, ...] = ()
    """The container runs that answered it (a sandbox tool)."""

    @classmethod
    def of(cls, call: ToolCall) -> Recorded:
        return cls(**cls.dict_of(call))

    @staticmethod
    def dict_of(call: ToolCall) -> dict[str, Any]:
        """``of(call).to_dict()`` without the object between (a durable run stores each call).
        A call whose result was too large to keep (`_keep.Summary`) is ``unstored``: not
        completed, so a resumed run makes it again instead of answering with the summary."""
        status: str = call.status
        if status == "ok" and issubclass(type(call.result), HandleMarker):
            status = "unstored"
        return {
            "call_id": call.call_id,
            "tool": call.tool,
            "args": call.args,
            "kwargs": call.kwargs,
            "status": status,
            "result": call.result,
            "error": call.error,
            "children": tuple(call.children),
        }

    def to_dict(self) -> dict[str, Any]:
        """The record as a store keeps it (`Store.record_call`); `from_dict` reads it."""
        return {name: getattr(self, name) for name in _FIELDS}

    @classmethod
    def from_dict(cls, record: Mapping[str, Any]) -> Recorded:
        return cls(**{f.name: record[f.name] for f in fields(cls) if f.name in record})


_FIELDS = tuple(f.name for f in fields(Recorded))
"""`Recorded`'s field names (``fields()`` itself is slow: a durable run stores every call)."""


@dataclass
class Journal:
    """The calls of one cell's latest run. Pass the same object to each run."""

    calls: list[Recorded] = field(default_factory=list)
    failed: bool = False
    """Whether that run failed (a tool raised, a limit, an interrupt)."""
    size: int = 0
    """Bytes of tool values it keeps whole (`_keep.Keeper.used`): what `Journals` counts."""

    def __len__(self) -> int:
        return len(self.calls)

    @property
    def completed(self) -> int:
        """Calls a resumed run can be answered with."""
        return sum(call.status == "ok" for call in self.calls)


class Journaling(Feature):
    """Writes the run's calls into ``journal`` when it ends (what ``--resume`` answers the
    next run of the cell from in this kernel)."""

    def __init__(self, journal: Journal) -> None:
        self.journal = journal

    def end(self, run: Driver) -> None:
        self.journal.calls = [Recorded.of(call) for call in run.result.trace]
        self.journal.failed = run.result.error is not None
        self.journal.size = run.keeper.used


class Journals:
    """The journals of a notebook's cells, for ``--resume``.

    A person resumes "the run that just failed": in the cell that failed, or in a copy of its
    code below it (as a notebook teaches it, or after pasting). Cells are keyed by the
    frontend's cell id, so a copy is another cell; `start` therefore falls back to the last
    failed run of the same code. At most ``limit`` cells and codes are remembered (the
    journals hold tool results), holding at most ``budget`` bytes of tool values together
    (`_keep.Keep.kernel`): the least recently run are forgotten first.
    """

    def __init__(self, limit: int = 256, budget: int = Keep.kernel * 2**20) -> None:
        self.limit = limit
        self.budget = budget
        self._cells: dict[str, Journal] = {}
        self._failed: dict[str, Journal] = {}
        """The last failed run of each code, by its hash."""

    def start(self, cell: str, code: str, *, resume: bool) -> tuple[Journal, int]:
        """The journal to run cell ``cell`` with, and how many completed calls it can answer
        when resuming (0: nothing to resume from). The journal replayed is, in this order, the
        cell's own last run if it failed, the last failed run of this code in any cell, the
        cell's own last run."""
        journal = self._cells.pop(cell, None)
        if journal is None:
            journal = Journal()
        self._cells[cell] = journal  # now the most recently run
        self._trim()
        if not resume:
            return journal, 0
        failed = self._failed.get(_digest(code))
        if not journal.failed and failed is not None:
            journal.calls, journal.failed = list(failed.calls), True
        return journal, journal.completed

    def finished(self, code: str, journal: Journal) -> None:
        """After a run with ``journal``: remember it if it failed, as the last failed run of
        ``code``."""
        if journal.failed:
            key = _digest(code)
            self._failed.pop(key, None)
            self._failed[key] = Journal(list(journal.calls), failed=True, size=journal.size)
        self._trim()

    @property
    def size(self) -> int:
        """Bytes of tool values the journals keep (a failed run's, kept twice, counts once
        per copy: an upper bound)."""
        return sum(j.size for j in self._cells.values()) + sum(
            j.size for j in self._failed.values()
        )

    def _trim(self) -> None:
        """Forget the least recently run cells and codes beyond ``limit`` each, then the oldest
        of either beyond ``budget`` bytes (the cell running now is kept)."""
        _trim(self._cells, self.limit)
        _trim(self._failed, self.limit)
        size = self.size
        while size > self.budget and (self._failed or len(self._cells) > 1):
            entries = self._failed if self._failed else self._cells
            size -= entries.pop(next(iter(entries))).size


def _digest(code: str) -> str:
    return hashlib.sha256(code.encode()).hexdigest()


def _trim(entries: dict[str, Journal], limit: int) -> None:
    """Drop the oldest entries (first inserted) beyond ``limit``."""
    while len(entries) > limit:
        del entries[next(iter(entries))]


class ToolCache:
    """Tool results keyed by tool name and (plain-data) arguments; lives as long as the object.
    Holds at most ``budget`` bytes of results (`_keep.quick_size`; a host object counts
    nothing: it is the tool's, by reference): the oldest are forgotten first, and a result
    larger than the budget is not cached."""

    def __init__(self, budget: int = Keep.kernel * 2**20) -> None:
        self.budget = budget
        self._values: dict[str, Any] = {}
        self._sizes: dict[str, int] = {}
        self._size = 0

    @staticmethod
    def key(tool: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | None:
        """A stable key, or None when an argument is an object (no safe notion of equality)."""
        if not (is_plain(args) and is_plain(kwargs)):
            return None
        if data_size((args, kwargs), _KEY_LIMIT_BYTES) > _KEY_LIMIT_BYTES:
            return None  # the key is a repr: arguments that write out huge are not cached
        return repr((tool, args, sorted(kwargs.items())))

    def get(self, key: str) -> tuple[bool, Any]:
        if key in self._values:
            return True, self._values[key]
        return False, None

    def put(self, key: str, value: Any) -> None:
        size = len(key) + (quick_size(value, self.budget) or 0)
        if size > self.budget:
            return
        self._forget(key)
        while self._values and self._size + size > self.budget:
            self._forget(next(iter(self._values)))
        self._values[key], self._sizes[key] = value, size
        self._size += size

    def _forget(self, key: str) -> None:
        if key in self._values:
            del self._values[key]
            self._size -= self._sizes.pop(key)

    def clear(self) -> None:
        self._values.clear()
        self._sizes.clear()
        self._size = 0

    def __len__(self) -> int:
        return len(self._values)


def same(a: Any, b: Any) -> bool:
    """Equal as data, or the very same object: a handle equals only itself (``==`` on an
    arbitrary object may be elementwise, costly or raise). Each pair of containers is compared
    once (arguments built from shared references stay cheap) and nesting deeper than data
    goes (see `is_plain`) is not the same."""
    return _same(a, b, 0, set())


def _same(a: Any, b: Any, depth: int, compared: set[tuple[int, int]]) -> bool:
    if a is b:
        return True
    if type(a) is not type(b):
        return False
    kind = type(a)  # not isinstance: it asks a handle's own `__class__`, which may raise
    if issubclass(kind, dict | list | tuple):
        if depth >= DEPTH_CEILING or len(a) != len(b):
            return False
        pair = (id(a), id(b))
        if pair in compared:  # equal when first compared, or the walk has already stopped
            return True
        compared.add(pair)
        if issubclass(kind, dict):
            return a.keys() == b.keys() and all(_same(a[k], b[k], depth + 1, compared) for k in a)
        return all(_same(x, y, depth + 1, compared) for x, y in zip(a, b, strict=True))
    return is_plain(a) and bool(a == b)

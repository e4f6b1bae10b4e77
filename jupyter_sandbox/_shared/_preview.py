"""Short, safe text previews of arbitrary values for traces, records and views.

A trace must never fail or flood because a tool returned a huge or odd object, so every
preview goes through `preview`: a bounded ``repr`` that survives a broken ``__repr__``.

A preview reads like ``repr`` (what ``Out[]`` shows for the same value): dict keys and set
members keep their iteration order. The standard ``reprlib`` sorts both, so a ``{"b": 1, "a": 2}``
result would read ``{'a': 2, 'b': 1}`` beside an ``Out[]`` that says otherwise. Only the length
differs from ``repr``: long strings, numbers and containers are cut with an ellipsis.
"""

from __future__ import annotations

import reprlib
from collections.abc import Iterable
from itertools import islice

ELLIPSIS = "\u2026"
"""Marks every cut: ``...`` would read as Python's own ``Ellipsis`` inside a list."""


class _OrderedRepr(reprlib.Repr):
    """`reprlib.Repr` without its sorting: dicts, sets and frozensets in iteration order."""

    def __init__(self) -> None:
        super().__init__()
        self.fillvalue = ELLIPSIS
        self.maxstring = self.maxother = 160
        self.maxlist = self.maxtuple = self.maxset = self.maxfrozenset = self.maxdict = 12
        self.maxlevel = 4

    def repr_dict(self, x: dict[object, object], level: int) -> str:
        if not x:
            return "{}"
        if level <= 0:
            return "{" + self.fillvalue + "}"
        pieces = [
            f"{self.repr1(key, level - 1)}: {self.repr1(value, level - 1)}"
            for key, value in islice(x.items(), self.maxdict)
        ]
        return "{" + self._joined(pieces, len(x) > self.maxdict) + "}"

    def repr_set(self, x: set[object], level: int) -> str:
        return self._members(x, level, "set()", "{", "}", self.maxset)

    def repr_frozenset(self, x: frozenset[object], level: int) -> str:
        return self._members(x, level, "frozenset()", "frozenset({", "})", self.maxfrozenset)

    def _members(
        self,
        x: set[object] | frozenset[object],
        level: int,
        empty: str,
        left: str,
        right: str,
        most: int,
    ) -> str:
        if not x:
            return empty
        if level <= 0:
            return left + self.fillvalue + right
        pieces = [self.repr1(member, level - 1) for member in islice(x, most)]
        return left + self._joined(pieces, len(x) > most) + right

    def _joined(self, pieces: Iterable[str], cut: bool) -> str:
        return ", ".join([*pieces, self.fillvalue] if cut else pieces)


_repr = _OrderedRepr()


def preview(value: object, limit: int = 200) -> str:
    """``repr(value)`` cut to ``limit`` characters; never raises, whatever a tool's object
    raises from its ``__repr__`` (``SystemExit`` too, and an exception whose own repr fails),
    except ``KeyboardInterrupt``: that may be the person's Ctrl-C, and stays theirs."""
    try:
        text = _repr.repr(value)
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # a user object's __repr__ may raise anything
        try:
            why = repr(exc)
        except BaseException:
            why = type(exc).__name__
        text = f"<{type(value).__name__} (repr failed: {why})>"
    return text if len(text) <= limit else text[: limit - 1] + ELLIPSIS

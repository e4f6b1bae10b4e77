"""Short, safe text previews of arbitrary values for traces, records and views.

A trace must never fail or flood because a tool returned a huge or odd object, so every
preview goes through `preview`: a bounded ``repr`` that survives a broken ``__repr__``.
"""

from __future__ import annotations

import reprlib

_repr = reprlib.Repr()
_repr.maxstring = 160
_repr.maxother = 160
_repr.maxlist = _repr.maxtuple = _repr.maxset = _repr.maxdict = 12
_repr.maxlevel = 4


def preview(value: object, limit: int = 200) -> str:
    """``repr(value)`` cut to ``limit`` characters; never raises."""
    try:
        text = _repr.repr(value)
    except Exception as exc:  # a user object's __repr__ may raise anything
        text = f"<{type(value).__name__} (repr failed: {exc!r})>"
    return text if len(text) <= limit else text[: limit - 1] + "…"

"""A record's MIME bundle: the record under its MIME type (`jupyter_sandbox.records`), with
HTML and text fallbacks."""

from __future__ import annotations

from typing import Any

from jupyter_sandbox.records import RUN_MIME, TRACE_MIME, Record


def mime_for(record: Record) -> str:
    """The MIME type of a record, from its ``kind`` (anything not an orchestration is a run)."""
    return TRACE_MIME if record.get("kind") == "orchestrate" else RUN_MIME


def bundle(record: Record) -> dict[str, Any]:
    """The final display of a run: the JSON record for our renderer plus HTML and text fallbacks.

    Every frontend picks the richest type it can render, so a saved or exported notebook shows
    the run everywhere, and the record itself stays machine-readable in the ``.ipynb``. The
    record carries its ``summary`` (`_format.summarised`): the words the JupyterLab renderer
    draws, so they are worded in Python only.
    """
    from . import _format, _html, _text

    shown = _format.summarised(record)  # worded once: every renderer says the same
    return {
        mime_for(record): shown,
        "text/html": _html.render(shown),
        "text/plain": _text.render(shown),
    }

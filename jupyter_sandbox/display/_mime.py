"""The MIME types our records travel under, shared by the Python views and the labextension."""

from __future__ import annotations

from typing import Any

TRACE_MIME = "application/vnd.jupyter-sandbox.trace+json"
"""An `%%orchestrate` record: status, value, stdout and one entry per tool call."""

RUN_MIME = "application/vnd.jupyter-sandbox.run+json"
"""A `%%sandbox` record: build, run status, stdout/stderr, typed inputs and outputs."""


def mime_for(record: dict[str, Any]) -> str:
    """The MIME type of a record, from its ``kind`` (anything not an orchestration is a run)."""
    return TRACE_MIME if record.get("kind") == "orchestrate" else RUN_MIME


def bundle(record: dict[str, Any]) -> dict[str, Any]:
    """The final display of a run: the JSON record for our renderer plus HTML and text fallbacks.

    Every frontend picks the richest type it can render, so a saved or exported notebook shows
    the run everywhere, and the record itself stays machine-readable in the ``.ipynb``.
    """
    from . import _html, _text

    return {
        mime_for(record): record,
        "text/html": _html.render(record),
        "text/plain": _text.render(record),
    }

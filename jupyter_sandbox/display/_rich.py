"""A sandbox cell's displays (figures, tables, ``display()``, its last value) as cell outputs.

Each display the run brought back (`SandboxRun.displays`: checked, secret-masked data, whose
HTML and SVG are still the container's own markup) becomes one ``display_data`` output,
shown after the run's record as a notebook cell shows its own: its MIME bundle holds

- the display under `DISPLAY_MIME`, which the JupyterLab extension renders as *untrusted*
  output, through JupyterLab's own HTML sanitiser (a live session's outputs are otherwise
  trusted, and a saved notebook is trusted again once its owner saves it), and
- fallbacks every other frontend and every export (nbconvert's HTML) shows as it is, so they
  are made safe here: HTML through ``nh3`` (ammonia: no script, no event handler, no
  ``javascript:`` link, no style), Markdown likewise when it holds raw HTML (`_safe`), an SVG
  only as an ``<img>`` of it (a script in an image never runs), PNG/JPEG as checked base64,
  JSON as its text, and text.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

from jupyter_sandbox.records import DISPLAY_MIME, RECORD_VERSION, DisplayRecord

from ._route import CellRoute

_DATA = ("text/html", "text/markdown", "image/png", "image/jpeg", "text/plain")
"""Fallbacks kept as they came (after `_safe`). JSON data is not one: JupyterLab's own JSON
viewer ranks ahead of every extension and would draw it instead of `DISPLAY_MIME`; its
text (indented) stands in for it."""


def display_bundle(display: Mapping[str, Any]) -> dict[str, Any]:
    """The MIME bundle of one display: ours for JupyterLab, safe fallbacks for the rest."""
    record: DisplayRecord = {"version": RECORD_VERSION, "data": dict(display)}
    shown: dict[str, Any] = {DISPLAY_MIME: record}
    for mime in _DATA:
        if mime in display:
            shown[mime] = _safe(mime, display[mime])
    if "application/json" in display:
        shown["text/plain"] = json.dumps(display["application/json"], indent=2)
    svg = display.get("image/svg+xml")
    if isinstance(svg, str) and "text/html" not in shown:
        image = base64.b64encode(svg.encode()).decode()
        shown["text/html"] = f'<img alt="SVG image" src="data:image/svg+xml;base64,{image}">'
    if not shown.get("text/plain"):  # a terminal says what it cannot draw
        kinds = ", ".join(mime for mime in display if mime != "text/plain")
        shown["text/plain"] = f"<display: {kinds}>"
    return shown


_HARMFUL_LINK = re.compile(
    r"(\]\(\s*|^\s*\[[^\]\n]*\]:\s*)(?:javascript|vbscript|data)\s*:", re.IGNORECASE | re.MULTILINE
)
"""A Markdown link (inline or a reference) to a URL that runs or embeds something."""


def _safe(mime: str, value: Any) -> Any:
    """``value`` as a frontend may show it without running any of it. Markdown keeps its
    syntax (nh3 would take ``a<b`` in a code span for a tag) unless it holds raw HTML, which
    a Markdown renderer passes through, and loses links to ``javascript:`` and the like."""
    if mime == "text/html":
        import nh3

        return nh3.clean(str(value))
    if mime == "text/markdown":
        text = str(value)
        if "<" in text:
            import nh3

            text = nh3.clean(text)
        return _HARMFUL_LINK.sub(r"\1#", text)
    return value


def show_displays(displays: Iterable[Mapping[str, Any]]) -> None:
    """Each display as an output of the running cell (text without IPython)."""
    route = CellRoute()
    for display in displays:
        route.show(display_bundle(display))

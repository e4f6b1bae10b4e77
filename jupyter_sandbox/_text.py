"""Text from a container made safe for our error messages.

A container's stderr or output can hold terminal escape sequences (OSC 52 sets the clipboard,
OSC 0 the window title, CSI moves the cursor or clears the screen). Our error messages are
shown by terminals too (IPython's, a log), so what a container wrote is made printable before
it enters one. The streams themselves are passed on as written: they are the program's output,
and notebooks render its colours.
"""

from __future__ import annotations

import re

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
"""An ANSI colour (SGR) or cursor code, as docker build logs and tools emit them: what build
log lines and the views drop (``labextension/src/format.ts`` has the same pattern)."""

_ESCAPES = re.compile(
    r"\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?"  # OSC ... BEL or ST (clipboard, title, links)
    r"|\x1b[P_^X][^\x1b]*(?:\x1b\\)?"  # DCS, APC, PM, SOS strings
    r"|\x1b\[[0-?]*[ -/]*[@-~]?"  # CSI (cursor moves, colours, screen clears)
    r"|\x1b[ -/]*[0-~]?"  # any other escape
    r"|\x9b[0-?]*[ -/]*[@-~]?"  # the 8-bit CSI
)
_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
"""C0/C1 controls but tab and newline, DEL, and the bidirectional overrides (text that reads
differently from what it is)."""


def printable(text: str) -> str:
    """``text`` without escape sequences or control characters: safe inside an error message."""
    return _CONTROLS.sub("", _ESCAPES.sub("", text))

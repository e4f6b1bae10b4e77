"""Text both engines handle as written: a container's made safe for our error messages, and
code we are given made runnable when it is indented as a whole.

A container's stderr or output can hold terminal escape sequences (OSC 52 sets the clipboard,
OSC 0 the window title, CSI moves the cursor or clears the screen). Our error messages are
shown by terminals too (IPython's, a log), so what a container wrote is made printable before
it enters one. The streams themselves are passed on as written: they are the program's output,
and notebooks render its colours.

Code arrives indented as a whole when it is written as a triple-quoted string inside a function
(as Flyte's examples and tests write it) or pasted from one; `unindented` removes the margin
every line shares, once, before either engine sees the code.
"""

from __future__ import annotations

import os
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


_MARGIN = re.compile(r"^[ \t]*(?=\S)", re.MULTILINE)
"""The leading whitespace of a line that holds more than whitespace."""


def unindented(code: str) -> str:
    """``code`` without the indentation all its non-blank lines share, as Flyte's
    ``orchestrate_local`` and IPython's cells dedent it. Code with no such margin is returned
    unchanged (whitespace-only lines and string literals included), so only code that could
    not run as written (its first statement indented) is touched; no line is added or
    removed, so errors name the lines as written."""
    first = len(code) - len(code.lstrip())  # where the first non-blank line's text starts
    if first == 0 or code[first - 1] in "\r\n":  # at the margin: the usual case, no scan
        return code
    margin = os.path.commonprefix(_MARGIN.findall(code))  # noqa: RUF071  # by character: tabs, spaces
    if not margin:
        return code
    return "\n".join(  # lines as Python counts them: a \u2028 in a string is not a line end
        line[len(margin) :] if line.startswith(margin) else line.lstrip(" \t")
        for line in code.split("\n")
    )

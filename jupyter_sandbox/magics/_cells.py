"""A tool's own frames named as the notebook names cells: ``Cell In[5], line 3``.

A tool defined in a notebook cell lives in a file IPython made up for that cell
(``/tmp/ipykernel_10169/3594171636.py``); the engine's traceback of the tool
(`ToolCall.host_traceback`, plain `traceback` text: engines never import IPython) names that
file, which no one can find. IPython's own tracebacks name it ``Cell In[5]``, from the
compiler's map of those files to execution counts (``shell.compile.format_code_name``, the call
`IPython.core.tbtools` makes); this asks the same map, so both read alike. A file the map does
not know (a module, a cell of an earlier kernel) keeps its path.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from IPython.core.getipython import get_ipython

from .._shared._events import CallFinished, Event, EventCallback

_FRAME = re.compile(r'^( *)File "([^"\n]+)", line (\d+)', re.MULTILINE)


def cell_frames(traceback: str) -> str:
    """``traceback`` with each frame in a notebook cell named as IPython names it."""
    shell = get_ipython()
    name_of: Callable[[str], tuple[str, str] | None] | None = getattr(
        getattr(shell, "compile", None), "format_code_name", None
    )
    if name_of is None or 'File "' not in traceback:
        return traceback

    def named(frame: re.Match[str]) -> str:
        found = name_of(frame.group(2))
        if found is None:
            return frame.group(0)
        label, name = found
        return f"{frame.group(1)}{label} {name}, line {frame.group(3)}"

    return _FRAME.sub(named, traceback)


def naming_cells(on_event: EventCallback) -> EventCallback:
    """``on_event`` with each failed call's host traceback in `cell_frames`' words first, so
    the live view, the record it ends with and the error (`ToolError.host_traceback` is read
    from the same call) all name the cell."""

    def forward(event: Event) -> None:
        if isinstance(event, CallFinished) and event.call.host_traceback:
            event.call.host_traceback = cell_frames(event.call.host_traceback)
        on_event(event)

    return forward

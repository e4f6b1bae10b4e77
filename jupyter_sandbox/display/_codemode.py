"""`CodeModeView`: the agent loop in a cell, one block per attempt.

Each attempt shows the code the model wrote as a fenced ``python`` Markdown block, which
frontends draw as highlighted code (JupyterLab, Notebook 7, VS Code, nbconvert's HTML), then
that code's run through an ordinary `OrchestrateView` (live trace, final record), then, if it
failed, one line saying the error went back to the model. A reader of the saved notebook thus
sees every attempt and why the next one exists.
"""

from __future__ import annotations

import re
from typing import Any

from jupyter_sandbox._shared._events import AttemptFinished, AttemptStarted, Event, Output

from ._route import CellRoute
from ._views import OrchestrateView

_BACKTICKS = re.compile(r"`{3,}")


class CodeModeView:
    """Same contract as the other views: ``on_event`` from any thread, created on the cell's.

    The agent emits `AttemptStarted` on the cell's thread, so each attempt's `OrchestrateView`
    is created there too and pins its output to this cell.
    """

    def __init__(self, quiet: bool = False) -> None:
        self.quiet = quiet
        self._route = CellRoute()
        self._run: OrchestrateView | None = None
        self._max_attempts = 0

    def on_event(self, event: Event) -> None:
        if isinstance(event, AttemptStarted):
            self._max_attempts = event.max_attempts
            if not self.quiet:
                self._route.show(code_bundle(event))
            self._run = None if event.code is None else OrchestrateView(quiet=self.quiet)
        elif isinstance(event, AttemptFinished):
            if self._run is not None and event.record is not None:
                self._run.finish(event.record)
            self._run = None
            if event.error is not None and not self.quiet:
                self._route.show({"text/plain": _failed_line(event, self._max_attempts)})
        elif self._run is not None:
            self._run.on_event(event)
        elif isinstance(event, Output):
            self._route.write(event.stream, event.text)


def code_bundle(event: AttemptStarted) -> dict[str, Any]:
    """The attempt's code as Markdown and text. No HTML: frontends prefer HTML to Markdown,
    and JupyterLab highlights the code of a Markdown block but not of an HTML ``<code>``."""
    title = f"Attempt {event.number} of {event.max_attempts}"
    if event.code is None:
        text = f"{title}: the reply held no Python code"
        return {"text/markdown": f"**{text}**", "text/plain": text}
    fence = "`" * max([3, *(len(m) + 1 for m in _BACKTICKS.findall(event.code))])
    return {
        "text/markdown": f"**{title}**\n\n{fence}python\n{event.code}\n{fence}",
        "text/plain": f"{title}:\n{event.code}",
    }


def _failed_line(event: AttemptFinished, max_attempts: int) -> str:
    kind = (event.error or "").split(":", 1)[0]
    then = (
        "no attempts left" if event.number >= max_attempts else "the error goes back to the model"
    )
    return f"Attempt {event.number} of {max_attempts} failed ({kind}); {then}."

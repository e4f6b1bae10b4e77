"""The two views the magics drive: `OrchestrateView` and `SandboxView`.

Contract: create the view when the cell starts (on the cell's thread), call ``on_event`` for
each engine event from any thread, call ``finish(record)`` once at the end, success or failure.

- The code's own stdout/stderr (`Output` events) always stream live into the cell.
- With a kernel, a live widget shows progress from the first engine event on; ``finish``
  replaces it in the output by the final MIME bundle (the JSON record plus HTML and text), so
  the live view and the saved notebook show the same run, once, and reopening the notebook
  needs no kernel and no widget state. The widget's models are then closed: a kernel running
  thousands of cells keeps none of them. Events arriving after ``finish`` (a tool thread that
  was abandoned on interrupt and ends later) no longer touch the view.
- Without a kernel (terminal IPython, plain Python) progress lines go to stderr and ``finish``
  displays (or prints) the text rendering.
- ``quiet=True`` shows only the code's own output: no progress, no trace, no final bundle.
  The record is still returned by the engine for whoever wants it.
"""

from __future__ import annotations

import threading
import uuid
from typing import Any, Protocol

from jupyter_sandbox._events import BuildFinished, BuildStarted, BuildStep, Event, Output

from . import _format as fmt
from ._mime import bundle
from ._route import CellRoute, kernel_present


class _Live(Protocol):
    root: Any

    def on_event(self, event: Event) -> None: ...

    def finish(self, record: dict[str, Any]) -> None: ...

    def close(self) -> None: ...


class _View:
    """What both views share: routing, quiet mode, the live widget and the final bundle."""

    _placeholder = "jupyter-sandbox: running (live view needs ipywidgets)"

    def __init__(self, quiet: bool = False, *, widgets: bool | None = None) -> None:
        self.quiet = quiet
        self._route = CellRoute()
        self._widgets = (kernel_present() if widgets is None else widgets) and not quiet
        self._live: _Live | None = None
        self._finished = False
        self._lock = threading.Lock()
        self._display_id = f"jupyter-sandbox-{uuid.uuid4().hex}"

    def _make_live(self) -> _Live:
        raise NotImplementedError

    def _live_view(self) -> _Live | None:
        """The widget, displayed on the first engine event: a run that fails before doing
        anything (bad arguments) leaves no empty widget behind, only its error. None once the
        view is finished and no widget was made."""
        if self._live is None:
            with self._lock:
                if self._live is None and not self._finished:
                    from ._widgets import widget_bundle

                    live = self._make_live()
                    self._route.show(widget_bundle(live.root, self._placeholder), self._display_id)
                    self._live = live
        return self._live

    def _text_event(self, event: Event) -> None:
        """Progress in text mode; most events only matter in the final record."""

    def on_event(self, event: Event) -> None:
        if isinstance(event, Output):
            self._route.write(event.stream, event.text)
        elif self._widgets and not self._finished:
            live = self._live_view()
            if live is not None:
                live.on_event(event)
        elif not self.quiet:
            self._text_event(event)

    def finish(self, record: dict[str, Any]) -> None:
        if self.quiet:
            return
        with self._lock:
            self._finished = True  # no widget is made (nor updated) after this point
        if self._live is not None:
            self._live.finish(record)
            self._route.replace(bundle(record), self._display_id)
            self._live.close()
        else:
            self._route.show(bundle(record))


class OrchestrateView(_View):
    """Live call trace for `%%orchestrate`; the final display is the trace record."""

    def _make_live(self) -> _Live:
        from ._widgets import TraceWidget

        return TraceWidget()


class SandboxView(_View):
    """Build progress and run status for `%%sandbox`; the final display is the run record."""

    def _make_live(self) -> _Live:
        from ._widgets import SandboxWidget

        return SandboxWidget()

    def _text_event(self, event: Event) -> None:
        if isinstance(event, BuildStarted):
            line = f"building image {event.tag} ({event.total_steps} steps)"
        elif isinstance(event, BuildStep):
            line = f"step {event.index}/{event.total}: {fmt.clip(event.text, 100)}"
        elif isinstance(event, BuildFinished):
            record = {"cached": event.cached, "seconds": event.seconds, "error": event.error}
            line = f"image {event.tag}: {fmt.build_state(record)}"
        else:
            return
        self._route.write("stderr", f"[sandbox] {line}\n")


__all__ = ["OrchestrateView", "SandboxView"]

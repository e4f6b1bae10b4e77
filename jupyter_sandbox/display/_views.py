"""The two views the magics drive: `OrchestrateView` and `SandboxView`.

Contract: create the view when the cell starts (on the cell's thread), call ``on_event`` for
each engine event from any thread, call ``finish(record)`` once at the end, success or failure.

- The code's own stdout/stderr (`Output` events) always stream live into the cell; what it
  prints before the live view is shown (before its first call) waits for it, up to
  `HOLD_PRINTS` seconds, so the trace's header comes first and the output follows it in the
  order the trace's rows say it was printed.
- With a kernel, the live view is the final display's own MIME bundle built from a live
  record (`_live`): shown on the first engine event under a display id, replaced at most
  every 0.2 s (`Throttle`) and, by ``finish``, with the final bundle. Every frontend draws the
  running and the finished cell alike (JupyterLab with our renderer, others with the HTML or
  text), and reopening the notebook needs no kernel and no widget state. Events arriving after
  ``finish`` (a tool thread that was abandoned on interrupt and ends later) change nothing.
- Without a kernel (terminal IPython, plain Python) progress lines go to stderr and ``finish``
  displays (or prints) the text rendering.
- ``quiet=True`` shows only the code's own output: no progress, no trace, no final bundle.
  The record is still returned by the engine for whoever wants it.
"""

from __future__ import annotations

import threading
import uuid
from dataclasses import dataclass
from typing import Any, Protocol

from jupyter_sandbox._shared._events import (
    BuildFinished,
    BuildStarted,
    BuildStep,
    Event,
    Output,
    Stream,
)
from jupyter_sandbox._shared._grammar import is_run_id
from jupyter_sandbox.records import Answered, BuildRecord, Record, TraceRecord

from . import _format as fmt
from ._live import LiveRun, LiveTrace
from ._mime import bundle
from ._route import CellRoute, kernel_present
from ._throttle import Throttle

HOLD_PRINTS = 1.0
"""Seconds output printed before a cell's first call waits for the live view's header."""


class _LiveRecord(Protocol):
    def on_event(self, event: Event) -> bool: ...

    def record(self) -> Record: ...

    def placed(self, record: Any) -> Any: ...


class _View:
    """What both views share: routing, quiet mode, the live display and the final bundle."""

    def __init__(self, quiet: bool = False, *, live: bool | None = None) -> None:
        self.quiet = quiet
        self._route = CellRoute()
        self._live_display = (kernel_present() if live is None else live) and not quiet
        self._state = self._live_record()
        self._shown = False
        self._finished = False
        self._lock = threading.Lock()
        self._display_id = f"jupyter-sandbox-{uuid.uuid4().hex}"
        self._throttle = Throttle(self._render)
        self._held: list[tuple[Stream, str]] | None = [] if self._live_display else None
        self._release: threading.Timer | None = None

    def _live_record(self) -> _LiveRecord:
        raise NotImplementedError

    def live_record(self) -> Record:
        """The record the live display shows now (what the next render sends)."""
        return self._state.record()

    def _render(self) -> None:
        """Send the live record: shown the first time (a run that fails before doing anything
        leaves no empty view behind, only its error), replaced afterwards; never after
        ``finish`` (the lock orders the two)."""
        with self._lock:
            if self._finished:
                return
            data = bundle(self._state.record())
            if self._shown:
                self._route.replace(data, self._display_id)
            else:
                self._route.show(data, self._display_id)
                self._shown = True
                self._write_held()

    def _write_held(self) -> None:
        """Write the output held back for the header (with ``_lock`` held); from now on the
        output streams as it comes."""
        held, self._held = self._held or [], None
        if self._release is not None:
            self._release.cancel()
        for stream, text in held:
            self._route.write(stream, text)

    def _hold(self, event: Output) -> bool:
        """Hold output printed before the live view is shown, so the view's header comes
        first and the output follows it, as the trace's rows say it was printed; False once
        the view shows (or without one): write it. Held output is written anyway after
        `HOLD_PRINTS` seconds, so a cell that prints and then works a while before its
        first call says so while it works."""
        with self._lock:
            if self._held is None:
                return False
            self._held.append((event.stream, event.text))
            if self._release is None:
                self._release = threading.Timer(HOLD_PRINTS, self._let_go)
                self._release.daemon = True
                self._release.start()
            return True

    def _let_go(self) -> None:
        with self._lock:
            self._write_held()

    def _text_event(self, event: Event) -> None:
        """Progress in text mode; most events only matter in the final record."""

    def on_event(self, event: Event) -> None:
        if isinstance(event, Output):
            if self._live_display and not self._finished:  # where it falls among the calls
                self._state.on_event(event)
            if not self._hold(event):
                self._route.write(event.stream, event.text)
        elif self._live_display:
            if not self._finished and self._state.on_event(event):
                if self._shown:
                    self._throttle.request()
                else:  # shown at once, in order with the output around it
                    self._render()
        elif not self.quiet:
            self._text_event(event)

    def finish(self, record: Record) -> None:
        """Show the final record in the live view's place; a run with nothing to show (no
        call, no error the record says: `fmt.says_nothing`) shows none, as a plain cell."""
        if self.quiet:
            return
        record = self._state.placed(record)
        with self._lock:
            self._finished = True
            if self._shown:
                self._route.replace(bundle(record), self._display_id)
                return
            if not (record.get("kind") == "orchestrate" and fmt.says_nothing(record)):  # type: ignore[arg-type]
                self._route.show(bundle(record), self._display_id)
                self._shown = True
            self._write_held()

    def redraw(self, record: Record) -> None:
        """Replace the finished record this view shows with ``record`` (the same run, said
        again: an orchestrator call's count of calls in its cell); nothing when it showed
        none."""
        with self._lock:
            if self._finished and self._shown:
                self._route.replace(bundle(self._state.placed(record)), self._display_id)


class OrchestrateView(_View):
    """Live call trace for `%%orchestrate`; the final display is the trace record. A paused
    run's record is remembered (`shown_pause`), so the magic that answers it in a later cell
    can redraw it as answered."""

    def _live_record(self) -> _LiveRecord:
        return LiveTrace()

    def finish(self, record: Record) -> None:
        super().finish(record)
        if self.quiet or not kernel_present() or record.get("kind") != "orchestrate":
            return
        trace: TraceRecord = record  # type: ignore[assignment]  # kind says so
        run_id = trace.get("run_id")
        if trace.get("status") == "paused" and is_run_id(run_id) and not trace.get("answered"):
            with _shown_lock:
                _shown.pop(str(run_id), None)  # re-inserted last: the newest
                _shown[str(run_id)] = ShownPause(self._display_id, trace)
                while len(_shown) > SHOWN_PAUSES:  # the oldest unanswered go first
                    del _shown[next(iter(_shown))]


@dataclass(frozen=True)
class ShownPause:
    """A paused run's record this kernel displayed, under its display id."""

    display_id: str
    record: TraceRecord

    def answer(self, answered: Answered) -> None:
        """Redraw the record as answered, in the cell that showed it (``update_display``: the
        frontend, nbclient and the saved notebook get the new bundle, so its buttons go and its
        HTML and text say how the run was answered, in an export too)."""
        CellRoute().replace(bundle({**self.record, "answered": answered}), self.display_id)

    def keep(self) -> None:
        """Remember it again: the magic that took it did not answer the run after all."""
        run_id = str(self.record.get("run_id"))
        with _shown_lock:
            _shown.setdefault(run_id, self)


SHOWN_PAUSES = 256
"""Paused records a kernel remembers to redraw: a bound on what a notebook that pauses again
and again keeps in memory (an older one, once answered, is marked by the extension instead)."""

_shown: dict[str, ShownPause] = {}
"""The paused records this kernel displayed, by run id (the latest pause of each run); a
kernel restart forgets them, and the JupyterLab extension then asks the notebook instead."""
_shown_lock = threading.Lock()


def shown_pause(run_id: str) -> ShownPause | None:
    """Take the record this kernel showed for paused run ``run_id`` (None: it showed none): the
    magic answering the run takes it before the run continues (and may pause again)."""
    with _shown_lock:
        return _shown.pop(run_id, None)


class SandboxView(_View):
    """Build progress and run status for `%%sandbox`; the final display is the run record."""

    def _live_record(self) -> _LiveRecord:
        return LiveRun()

    def _text_event(self, event: Event) -> None:
        if isinstance(event, BuildStarted):
            line = f"building image {event.tag} ({event.total_steps} steps)"
        elif isinstance(event, BuildStep):
            line = f"step {event.index}/{event.total}: {fmt.clip(event.text, 100)}"
        elif isinstance(event, BuildFinished):
            build: BuildRecord = {
                "tag": event.tag,
                "cached": event.cached,
                "seconds": event.seconds,
                "steps": [],
                "log": "",
                "error": event.error,
            }
            line = f"image {event.tag}: {fmt.build_state(build)}"
        else:
            return
        self._route.write("stderr", f"[sandbox] {line}\n")


__all__ = ["OrchestrateView", "SandboxView", "ShownPause", "shown_pause"]

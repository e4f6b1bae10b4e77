"""Live ipywidgets views. Imported only when a kernel (and so possibly a widget frontend) is live.

Each widget keeps plain-Python state updated by `on_event` (from any thread, O(1) per event)
and renders it into widget traits through a `Throttle`. ``finish`` renders the final state
synchronously. The views then get replaced in the output by the final MIME bundle (see
`_views`) and ``close`` closes every widget model they made: nothing shows them any more, and
a model left open stays in the kernel and in the frontend's widget manager for the kernel's
life (8 per ``%%orchestrate`` cell, 24,000 after 3,000 cells).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from html import escape
from typing import Any

import ipywidgets as w

from jupyter_sandbox._events import (
    BuildFinished,
    BuildLog,
    BuildStarted,
    BuildStep,
    CallFinished,
    CallStarted,
    Event,
    RunFinished,
    RunStarted,
    ToolCall,
)
from jupyter_sandbox._preview import preview

from . import _format as fmt
from . import _html
from ._throttle import Throttle

LIVE_ROWS = 100
"""Most recent calls shown while running: enough to watch, bounded however long the run."""

LOG_TAIL = 400
"""Build log lines kept in the live view; the full log is in the final record."""

WIDGET_VIEW_MIME = "application/vnd.jupyter.widget-view+json"


def widget_bundle(widget: w.Widget, text: str) -> dict[str, Any]:
    """A display bundle for a widget with a meaningful ``text/plain`` for widget-less frontends."""
    view = {"version_major": 2, "version_minor": 0, "model_id": widget.model_id}
    return {WIDGET_VIEW_MIME: view, "text/plain": text}


def close_tree(root: w.Widget) -> None:
    """Close ``root`` and every widget it holds, however deep (children, layout, style).

    ``Widget.close`` closes one model: an ``HTML`` is three (itself, its ``Layout``, its
    style), so closing only the roots would leave most models open.
    """
    pending = [root]
    while pending:
        widget = pending.pop()
        for name in widget.keys:
            value = getattr(widget, name)
            held = value if isinstance(value, tuple | list) else (value,)
            pending.extend(item for item in held if isinstance(item, w.Widget))
        widget.close()


class _LiveWidget:
    """What both live views share: a root widget, closed with everything in it at the end."""

    root: w.Box

    def close(self) -> None:
        close_tree(self.root)


class TraceWidget(_LiveWidget):
    """The live `%%orchestrate` call trace: counters plus the latest calls on a timeline."""

    def __init__(self) -> None:
        self.summary = w.HTML(value="orchestrate: starting")
        self.table = w.HTML()
        self.root = w.VBox([self.summary, self.table])
        self._lock = threading.Lock()
        self._recent: deque[ToolCall] = deque(maxlen=LIVE_ROWS)
        self._started = 0
        self._finished = 0
        self._failed = 0
        self._t0 = time.monotonic()
        self._final: dict[str, Any] | None = None
        self._throttle = Throttle(self._render)

    def on_event(self, event: Event) -> None:
        if isinstance(event, CallStarted):
            with self._lock:
                self._started += 1
                self._recent.append(event.call)
        elif isinstance(event, CallFinished):
            with self._lock:
                self._finished += 1
                self._failed += event.call.error is not None
        else:
            return
        self._throttle.request()

    def finish(self, record: dict[str, Any]) -> None:
        self._final = record
        self._throttle.flush()

    def _render(self) -> None:
        if self._final is not None:
            self.summary.value = f"<b>{fmt.orchestrate_summary(self._final)}</b>"
            self.table.value = _html.calls_table(
                self._final.get("calls", []), self._final.get("duration") or 0.0
            )
            return
        with self._lock:
            calls = [c.to_record(width=40) for c in self._recent]
            started, running, failed = self._started, self._started - self._finished, self._failed
        span = max([time.monotonic() - self._t0] + [c["end"] or c["start"] for c in calls])
        shown = f", showing the last {len(calls)}" if started > len(calls) else ""
        self.summary.value = (
            f"<b>orchestrate running {fmt.seconds(span)}: {started} tool calls "
            f"({running} running, {failed} failed{shown})</b>"
        )
        self.table.value = _html.STYLE + f'<div class="jsb">{_html.calls_table(calls, span)}</div>'


class SandboxWidget(_LiveWidget):
    """The live `%%sandbox` view: image build progress, then the container run."""

    def __init__(self) -> None:
        self.status = w.HTML(value="sandbox: starting")
        self.progress = w.IntProgress(value=0, min=0, max=1, description="build")
        self.step = w.Label()
        self.log_line = w.Label()
        self.log = w.HTML()
        self.log_box = w.Accordion(children=[self.log], titles=("build log",))
        self.build_box = w.VBox([self.progress, self.step, self.log_line, self.log_box])
        self.build_box.layout.display = "none"
        self.run = w.HTML()
        self.root = w.VBox([self.status, self.build_box, self.run])
        self._lock = threading.Lock()
        self._log: deque[str] = deque(maxlen=LOG_TAIL)
        self._state: dict[str, Any] = {"status": "sandbox: starting", "run": ""}
        self._throttle = Throttle(self._render)

    def on_event(self, event: Event) -> None:
        with self._lock:
            self._apply(event)
        self._throttle.request()

    def _apply(self, event: Event) -> None:
        """Fold one event into the state. The live line under the step is the step's latest
        output line (whole lines only), then the build's one-line error; a cached image shows
        no build box at all: no step ran."""
        state = self._state
        if isinstance(event, BuildStarted):
            state.update(build=True, max=max(event.total_steps, 1), value=0, line="")
            state["status"] = f"building image {event.tag}"
            state["step"] = "starting the build"
        elif isinstance(event, BuildStep):
            state.update(max=max(event.total, 1), value=event.index - 1, line="")
            state["step"] = f"step {event.index} of {event.total}: {fmt.clip(event.text, 120)}"
            self._log.append(state["step"])
        elif isinstance(event, BuildLog):
            self._log.append(fmt.plain(event.line))
            state["line"] = fmt.clip(event.line, 160)
        elif isinstance(event, BuildFinished):
            record = {"cached": event.cached, "seconds": event.seconds, "error": event.error}
            state["status"] = f"image {event.tag}: {fmt.build_state(record)}"
            if event.error:
                state.update(bar="danger", line=fmt.clip(event.error, 160))
            elif not event.cached:
                state.update(bar="success", value=state.get("max", 1))
        elif isinstance(event, RunStarted):
            state["status"] = f"running {event.name} in {event.image} (attempt {event.attempt})"
        elif isinstance(event, RunFinished):
            state["status"] = _run_line(event)
            state["run"] = _outputs_table(event.outputs)

    def finish(self, record: dict[str, Any]) -> None:
        with self._lock:
            self._state["status"] = fmt.sandbox_summary(record)
            build = record.get("build")
            if build and build.get("error"):
                self._state.update(build=True, bar="danger", line=fmt.clip(build["error"], 160))
        self._throttle.flush()

    def _render(self) -> None:
        with self._lock:
            state = dict(self._state)
            log = "\n".join(self._log)
        self.status.value = f"<b>{escape(state['status'])}</b>"
        if state.get("build"):
            self.build_box.layout.display = "flex"
            self.progress.max = state.get("max", 1)
            self.progress.value = min(state.get("value", 0), self.progress.max)
            self.progress.bar_style = state.get("bar", "info")
            self.step.value = state.get("step", "")
            self.log_line.value = state.get("line", "")
        # collapsed until opened: the step and the one-line error above say what happened
        self.log_box.layout.display = "block" if log else "none"
        self.log.value = f"<pre>{escape(log)}</pre>"
        self.run.value = state["run"]


def _run_line(event: RunFinished) -> str:
    verdict = "failed" if event.error or event.exit_code not in (0, None) else "finished"
    cached = ", cached result" if event.cached else ""
    error = f": {event.error}" if event.error else ""
    return (
        f"{event.name} {verdict} in {fmt.seconds(event.seconds)} "
        f"(exit {event.exit_code}{cached}){error}"
    )


def _outputs_table(outputs: dict[str, Any]) -> str:
    rows = "".join(
        f"<tr><td>{escape(name)}</td><td>{escape(type(value).__name__)}</td>"
        f"<td><code>{escape(preview(value))}</code></td></tr>"
        for name, value in outputs.items()
    )
    return f'<table class="jsb-outputs">{rows}</table>' if rows else ""

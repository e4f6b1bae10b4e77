"""Live records: the record a run will end with, growing as its events arrive.

A cell's live view is the same MIME bundle as its final display (our record type, ``text/html``,
``text/plain``), shown under a display id and replaced with ``update_display`` (see `_views`).
JupyterLab therefore draws the running cell and the saved one with one renderer, so nothing
jumps when the cell ends; other frontends take their richest type (HTML in VS Code and
nbconvert, text in a terminal); and no widget model exists that could be left open. A notebook
saved mid-run (or whose kernel died) keeps the last live record, which renders without a kernel.

A live record has the final record's keys, ``status: "running"`` and ``live.summary`` (the
headline while it runs, shared by every renderer; no clock in it: it is redrawn only when
something happens, and a clock that stops would say the run stopped). It stays bounded
however long the run: the last `LIVE_CALLS` calls plus counts, the last `LOG_TAIL` build log
lines. Events update plain Python state under a lock (microseconds, any thread); `record`
builds the dict when the throttle asks for a render.

A live trace's call previews are masked by every secret a sandbox tool has returned in the
process (`_scrub.known`), as the final record is by its run's: a call's result,
or the arguments of a call the code hands it to, would otherwise show the secret while the
run lasts.
"""

from __future__ import annotations

import bisect
import threading
import time
from collections import deque
from typing import TypedDict

from jupyter_sandbox._shared._bounds import KEEP_EDGE, ToolStats
from jupyter_sandbox._shared._events import (
    BuildFinished,
    BuildLog,
    BuildStarted,
    BuildStep,
    CallFinished,
    CallStarted,
    Event,
    Output,
    RunFinished,
    RunStarted,
    ToolCall,
)
from jupyter_sandbox._shared._preview import preview
from jupyter_sandbox.records import (
    RECORD_VERSION,
    BuildRecord,
    CallRecord,
    RunRecord,
    TraceRecord,
    TypedValue,
)

from . import _format as fmt

LIVE_CALLS = 100
"""Most recent calls a live trace holds: enough to watch, bounded however long the run."""

LOG_TAIL = 400
"""Build log lines a live record holds; the final record has the whole log."""

TRACEBACK_TAIL = 4000
"""Characters of a host traceback a live call keeps (its end, where the error is)."""


class LiveTrace:
    """`%%orchestrate` while it runs: counts of all calls, records of the latest ones."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._recent: deque[ToolCall] = deque(maxlen=LIVE_CALLS)
        self._open: dict[int, ToolCall] = {}  # unfinished calls, to tell queued from running
        self._started = 0
        self._finished = 0
        self._failed = 0
        self._stats = ToolStats()  # the per-tool summary of every finished call, not the last few
        self._t0 = time.monotonic()
        self._lines = 0  # output lines the cell has begun printing
        self._open_line = False  # the last one has no newline yet
        self._printed: list[tuple[int, int]] = []  # (call id, lines) where the count changed
        self._head: list[str] = []  # the first lines printed since the last call began
        self._gaps = _Gaps()  # by call id: what was printed just before it

    def on_event(self, event: Event) -> bool:
        """Fold in one event; False when it changes nothing this view shows (output streams
        into the cell by itself: only where it falls among the calls, and the first lines of
        each stretch of it, are kept)."""
        if isinstance(event, Output):
            with self._lock:
                if event.text:
                    self._keep_head(event.text)
                    self._lines += event.text.count("\n") + (not self._open_line)
                    self._open_line = not event.text.endswith("\n")
                    self._lines -= not self._open_line  # the newline closed a line, not begun one
            return False
        if isinstance(event, CallStarted):
            with self._lock:
                self._started += 1
                self._recent.append(event.call)
                self._open[id(event.call)] = event.call
                since = self._lines - (self._printed[-1][1] if self._printed else 0)
                if since:
                    self._printed.append((event.call.call_id, self._lines))
                    self._gaps.add(event.call.call_id, since, self._head)
                self._head = []
        elif isinstance(event, CallFinished):
            with self._lock:
                self._finished += 1
                self._open.pop(id(event.call), None)
                failed = event.call.status == "error"  # an abandoned call did not fail
                self._failed += failed
                self._stats.add(event.call.tool, event.call.duration, failed)
        else:
            return False
        return True

    def _keep_head(self, text: str) -> None:
        """Keep the start of what was printed since the last call: its first `PRINT_LINES`
        lines (a line still open when the call came is continued here as a line of its own),
        each cut at `PRINT_CHARS` characters, so a long gap costs no more than a short one."""
        if len(self._head) >= PRINT_LINES and not self._open_line:
            return
        parts = (text[:-1] if text.endswith("\n") else text).split("\n")
        if self._open_line and self._head:
            self._head[-1] = (self._head[-1] + parts.pop(0))[: PRINT_CHARS + 1]
        room = PRINT_LINES - len(self._head)
        self._head += [part[: PRINT_CHARS + 1] for part in parts[:room]]

    def placed(self, record: TraceRecord) -> TraceRecord:
        """``record`` with where the cell's output fell among its calls (``printed``) and, on
        a call the cell printed just before, how much and its first lines (``printed_since``,
        ``printed_first``), when the cell printed anything: the calls' records are copied,
        not changed."""
        with self._lock:
            lines, printed, gaps = self._lines, list(self._printed), self._gaps.copy()
        if not lines:
            return record
        ids = [call_id for call_id, _ in printed]

        def before(call_id: int) -> int:
            at = bisect.bisect_right(ids, call_id)
            return printed[at - 1][1] if at else 0

        calls = [
            {**call, "printed": before(call["call_id"]), **_gap_keys(gaps, call["call_id"])}
            for call in record["calls"]
        ]
        return {**record, "calls": calls, "printed": lines}  # type: ignore[typeddict-item]

    def record(self) -> TraceRecord:
        from jupyter_sandbox._shared._scrub import known, mask_record  # a run exists

        with self._lock:
            calls = [_live_call(c) for c in self._recent]
            started, failed = self._started, self._failed
            queued = sum(call.status == "queued" for call in self._open.values())
            running = self._started - self._finished - queued  # only calls holding a slot
            tools = self._stats.rows()
        calls = mask_record(calls, known())
        span = max([time.monotonic() - self._t0] + [c["end"] or c["start"] for c in calls])
        noun = "call" if started == 1 else "calls"
        counts = [f"{running} running"] + [f"{queued} queued"] * bool(queued)
        counts += [f"{failed} failed"] * bool(failed)
        counts += [f"showing the last {len(calls)}"] * (started > len(calls))
        summary = f"orchestrate running: {started} tool {noun} ({', '.join(counts)})"
        return self.placed(
            {
                "version": RECORD_VERSION,
                "kind": "orchestrate",
                "code": "",
                "status": "running",
                "value": None,
                "stdout": "",
                "error": None,
                "sandbox_traceback": None,
                "duration": span,
                "calls": calls,
                "tools": tools,
                "live": {
                    "summary": summary,
                    "calls": started,
                    "running": running,
                    "queued": queued,
                    "failed": failed,
                },
            }
        )


PRINT_LINES = 2
"""Lines of each stretch of output a trace shows where it was printed: what the cell was
doing; the cell's output below the trace has all of it."""

PRINT_CHARS = 120
"""Characters of each of those lines a record keeps."""


class _Gaps:
    """What the cell printed just before each call: ``(lines, first lines)`` by call id, for
    the first and the latest `KEEP_EDGE` calls the cell printed before (what a long trace's
    record keeps of its calls), so a run that prints between a million calls stays bounded."""

    def __init__(self) -> None:
        self.first: dict[int, tuple[int, tuple[str, ...]]] = {}
        self.latest: deque[tuple[int, int, tuple[str, ...]]] = deque(maxlen=KEEP_EDGE)

    def add(self, call_id: int, lines: int, head: list[str]) -> None:
        if len(self.first) < KEEP_EDGE:
            self.first[call_id] = (lines, tuple(head))
        else:
            self.latest.append((call_id, lines, tuple(head)))

    def copy(self) -> dict[int, tuple[int, tuple[str, ...]]]:
        return {**self.first, **{call_id: (n, head) for call_id, n, head in self.latest}}


def _gap_keys(gaps: dict[int, tuple[int, tuple[str, ...]]], call_id: int) -> dict[str, object]:
    """The record keys of what was printed just before call ``call_id`` (none: nothing)."""
    if call_id not in gaps:
        return {}
    lines, head = gaps[call_id]
    return {"printed_since": lines, "printed_first": [fmt.clip(line, PRINT_CHARS) for line in head]}


def _live_call(call: ToolCall) -> CallRecord:
    record = call.to_record()
    traceback = record.get("host_traceback")
    if traceback and len(traceback) > TRACEBACK_TAIL:
        record["host_traceback"] = "\u2026" + traceback[-TRACEBACK_TAIL:]
    return record


class LiveRun:
    """`%%sandbox` while it runs: the image build (steps, current line, log tail), then the run."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._t0 = time.monotonic()
        self._built_at = self._t0
        self._log: deque[str] = deque(maxlen=LOG_TAIL)
        self._build: BuildRecord | None = None
        self._run: _RunState = {
            "name": "?",
            "image": "?",
            "error": None,
            "exit_code": None,
            "attempts": 0,
            "cached": False,
            "outputs": {},
            "inputs": {},
        }
        self._headline = "sandbox: starting"

    def on_event(self, event: Event) -> bool:
        with self._lock:
            return self._apply(event)

    def _apply(self, event: Event) -> bool:
        """The line under the step is the step's latest whole output line; a finished build's
        error is the record's (renderers show it once, in the error's place); a cached image
        has no steps: renderers draw no progress for it."""
        if isinstance(event, BuildStarted):
            self._built_at = time.monotonic()
            self._build = _build(event.tag, total_steps=event.total_steps, running=True)
            self._run["image"] = event.tag
            self._headline = f"building image {event.tag}"
        elif isinstance(event, BuildStep) and self._build is not None:
            self._build["steps"].append(event.text)
            self._build["total_steps"] = event.total
            self._build["line"] = ""
            self._log.append(f"step {event.index} of {event.total}: {event.text}")
        elif isinstance(event, BuildLog) and self._build is not None:
            self._log.append(fmt.plain(event.line))
            self._build["line"] = event.line
        elif isinstance(event, BuildFinished):
            build = self._build or _build(event.tag, total_steps=0, running=False)
            build["cached"] = event.cached
            build["seconds"] = event.seconds
            build["error"] = event.error
            build["running"] = False
            build["line"] = ""
            self._build = build
            self._run["image"] = event.tag
            self._headline = f"image {event.tag}: {fmt.build_state(build)}"
        elif isinstance(event, RunStarted):
            self._run["name"] = event.name
            self._run["image"] = event.image
            self._run["attempts"] = event.attempt
            self._run["inputs"] = event.inputs
            # A retry says which attempt it is; a first (often only) run says nothing of it.
            again = f" (attempt {event.attempt})" if event.attempt > 1 else ""
            self._headline = f"running {event.name} in {event.image}{again}"
        elif isinstance(event, RunFinished):
            outputs: dict[str, TypedValue] = {
                name: {"type": type(value).__name__, "preview": preview(value)}
                for name, value in event.outputs.items()
            }
            self._run["exit_code"] = event.exit_code
            self._run["error"] = event.error
            self._run["cached"] = event.cached
            self._run["outputs"] = outputs
            self._headline = _run_line(event)
        else:
            return False
        return True

    def record(self) -> RunRecord:
        with self._lock:
            build = None if self._build is None else self._build.copy()
            if build is not None:
                # its own list: a record is worded (`summarised`) and sent later, and steps
                # appended meanwhile made its build line say "step 1 of 6" beside step 4
                build["steps"] = list(build["steps"])
                build["log"] = "\n".join(self._log)
            run = self._run.copy()
            headline = self._headline
        now = time.monotonic()
        if build is not None and build.get("running"):
            build["seconds"] = now - self._built_at
        duration = now - self._t0
        return {
            "version": RECORD_VERSION,
            "kind": "sandbox",
            "name": run["name"],
            "image": run["image"],
            "error": run["error"],
            "exit_code": run["exit_code"],
            "attempts": run["attempts"],
            "cached": run["cached"],
            "outputs": run["outputs"],
            "inputs": run["inputs"],
            "status": "running",
            "duration": duration,
            "build": build,
            "stdout": "",
            "stderr": "",
            "live": {"summary": headline},
        }

    def placed(self, record: RunRecord) -> RunRecord:
        """A run's record as it is: its output is its own (see `LiveTrace.placed`)."""
        return record


class _RunState(TypedDict):
    """The run's part of a live `RunRecord`, as its events arrive."""

    name: str
    image: str
    error: str | None
    exit_code: int | None
    attempts: int
    cached: bool
    outputs: dict[str, TypedValue]
    inputs: dict[str, TypedValue]


def _build(tag: str, *, total_steps: int, running: bool) -> BuildRecord:
    """A build record as `BuildInfo.to_record` makes it, plus the live keys ``running`` and
    ``line`` (the current output line)."""
    return {
        "tag": tag,
        "cached": False,
        "seconds": 0.0,
        "steps": [],
        "total_steps": total_steps,
        "log": "",
        "error": None,
        "running": running,
        "line": "",
    }


def _run_line(event: RunFinished) -> str:
    verdict = "failed" if event.error or event.exit_code not in (0, None) else "finished"
    cached = ", cached result" if event.cached else ""
    error = f": {event.error}" if event.error else ""
    return (
        f"{event.name} {verdict} in {fmt.seconds(event.seconds)} "
        f"(exit {event.exit_code}{cached}){error}"
    )

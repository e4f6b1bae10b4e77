"""`CodeGenView`: a code generation in a cell, one block per iteration.

Each iteration shows, as Markdown (which JupyterLab, Notebook 7, VS Code and nbconvert draw
with no kernel; the text beside it for the rest): its plan (the first), the code (the first
iteration's whole, later ones as the diff from the last), the packages the image installs and
what was refused; then the build and the test run through an ordinary `SandboxView` (its
live steps and the run's record); then each test's pass or fail and the diagnosis that went
back to the model. The saved notebook thus shows every iteration and why the next exists.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from jupyter_sandbox._shared._events import Event, IterationFinished, IterationStarted, Output

from ._route import CellRoute
from ._views import SandboxView

_BACKTICKS = re.compile(r"`{3,}")
MESSAGE_LINES = 12
"""Lines of a failed test's message shown under it (the run's record holds all of pytest's)."""


class CodeGenView:
    """Same contract as the other views: ``on_event`` from any thread, created on the cell's;
    the agent emits `IterationStarted` on the cell's thread, so each iteration's
    `SandboxView` pins its output to this cell."""

    def __init__(self, quiet: bool = False) -> None:
        self.quiet = quiet
        self._route = CellRoute()
        self._run: SandboxView | None = None
        self._max = 0

    def on_event(self, event: Event) -> None:
        if isinstance(event, IterationStarted):
            self._max = event.max_iterations
            if not self.quiet:
                self._route.show(started_bundle(event))
            self._run = None if event.replayed else SandboxView(quiet=self.quiet)
        elif isinstance(event, IterationFinished):
            if self._run is not None and event.run is not None:
                self._run.finish(event.run)
            self._run = None
            if not self.quiet:
                self._route.show(finished_bundle(event, self._max))
        elif self._run is not None:
            self._run.on_event(event)
        elif isinstance(event, Output):
            self._route.write(event.stream, event.text)

    def finish(self, record: Mapping[str, Any]) -> None:
        """The generation's end: what passed (the tests, beside the code the cell inserts)."""
        if not self.quiet:
            self._route.show(result_bundle(record))


def result_bundle(record: Mapping[str, Any]) -> dict[str, Any]:
    iterations = record.get("iterations") or []
    if not record.get("success"):
        head = f"**No passing tests after {len(iterations)} iteration(s)**"
        markdown = f"{head}\n\n{record.get('error') or ''}".strip()
        return {"text/markdown": markdown, "text/plain": _plain(markdown)}
    how = " (the cached result: the model was not asked)" if record.get("cached") else ""
    parts = [f"**Tests passed after {len(iterations)} iteration(s){how}**"]
    packages = ", ".join(record.get("packages") or []) or "none"
    parts.append(f"Packages: {packages}")
    if record.get("tests"):
        parts.append("The tests that passed:\n\n" + fenced(str(record["tests"]), "python"))
    markdown = "\n\n".join(parts)
    return {"text/markdown": markdown, "text/plain": _plain(markdown)}


def fenced(text: str, language: str) -> str:
    fence = "`" * max([3, *(len(m) + 1 for m in _BACKTICKS.findall(text))])
    return f"{fence}{language}\n{text.rstrip()}\n{fence}"


def started_bundle(event: IterationStarted) -> dict[str, Any]:
    title = f"Iteration {event.number} of {event.max_iterations}"
    if event.replayed:
        title += " (from the journal: the model was not asked again)"
    parts = [f"**{title}**"]
    if event.plan:
        parts.append(f"Plan: {event.plan}")
    if event.number == 1:
        parts.append(fenced(event.code, "python"))
        parts.append("The tests:\n\n" + fenced(event.tests, "python"))
    elif event.diff:
        parts.append("The code's changes:\n\n" + fenced(event.diff, "diff"))
    else:
        parts.append("The code is unchanged; the tests now:\n\n" + fenced(event.tests, "python"))
    packages = ", ".join(event.packages) or "none"
    line = f"Packages: {packages}"
    if event.system_packages:
        line += f"; system packages: {', '.join(event.system_packages)}"
    parts.append(line)
    markdown = "\n\n".join(parts)
    return {"text/markdown": markdown, "text/plain": _plain(markdown)}


def finished_bundle(event: IterationFinished, max_iterations: int) -> dict[str, Any]:
    record: Mapping[str, Any] = event.record
    rows = []
    for outcome in record.get("outcomes") or []:
        mark = "✔" if outcome.get("outcome") == "passed" else "✘"
        rows.append(f"- {mark} `{outcome.get('name')}` {outcome.get('outcome')}")
        message = str(outcome.get("message") or "").strip()
        if message and outcome.get("outcome") != "passed":
            tail = "\n".join(message.splitlines()[-MESSAGE_LINES:])
            rows.append("\n" + _indent(fenced(tail, "text")))
    parts = [f"**Iteration {event.number}: {'tests passed' if event.success else 'failed'}**"]
    if rows:
        parts.append("\n".join(rows))
    for note in record.get("notes") or []:
        parts.append(f"Note: {note}")
    diagnosis = record.get("diagnosis")
    if isinstance(diagnosis, Mapping):
        then = (
            "no iterations left"
            if event.number >= max_iterations
            else "this goes back to the model"
        )
        parts.append(
            f"Diagnosis: **{diagnosis.get('error_type')} error**: {diagnosis.get('summary')} "
            f"({then})"
        )
    markdown = "\n\n".join(parts)
    return {"text/markdown": markdown, "text/plain": _plain(markdown)}


def _indent(text: str) -> str:
    return "\n".join(f"  {line}" for line in text.splitlines())


def _plain(markdown: str) -> str:
    return markdown.replace("**", "")

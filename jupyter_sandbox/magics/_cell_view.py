"""The view every ``%%orchestrate`` cell shows its run in (`CellView`, driven by `show_run`), the
presenter that shows an orchestrator's calls the same way (`OrchestratorViews`), and which
notebook a kernel runs (`notebook_scope`): what ``%%orchestrate``, the durable line magics
and ``%mcp_serve`` share, so none of them imports another to show a run.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING

from IPython.core.interactiveshell import InteractiveShell

from .._shared._errors import LimitExceeded, OrchestrationError
from .._shared._events import EventCallback
from ..orchestration import OrchestrationResult, Orchestrator, result_of
from ._cells import naming_cells

if TYPE_CHECKING:
    from ..records import TraceRecord


def notebook_scope(shell: InteractiveShell) -> str:
    """Which notebook this kernel runs: what sessions and stored runs are kept under. Jupyter
    Server tells the kernel its notebook's path (``JPY_SESSION_NAME``; ipykernel also sets
    ``__session__``); a kernel started otherwise is ``"default"``."""
    named = os.environ.get("JPY_SESSION_NAME") or shell.user_ns.get("__session__")
    return str(named) if named else "default"


class CellView:
    """One run's view in the cell, as ``%%orchestrate`` shows it: live while it runs, then
    its record (paused runs show their pending calls; a raised error is in the cell's error
    output, so the record does not repeat it). ``quiet``: prints only, no record. It is what
    an orchestrator's call shows too (`Orchestrator`), so both look and save alike."""

    def __init__(
        self, *, quiet: bool = False, resumable: bool = False, caller: str | None = None
    ) -> None:
        from ..display import OrchestrateView  # the views: loaded by the first cell that runs

        self.view = OrchestrateView(quiet=quiet)
        self.quiet = quiet
        self.resumable = resumable
        self.caller = caller
        """The orchestrator call shown (``sum_squares(1)``), its record's title; None: a cell."""
        self.record: TraceRecord | None = None
        """The record shown, once finished."""
        self.on_event: EventCallback = naming_cells(self.view.on_event)

    def finish(
        self, result: OrchestrationResult, *, raised: bool, error: BaseException | None = None
    ) -> None:
        if self.quiet:  # a quiet view shows no record: skip previewing every call
            return
        record = result.to_record()
        if raised:
            record["raised"] = True
        advice = resume_advice(result, error) if self.resumable else None
        if advice is not None:
            record["advice"] = advice
        if self.caller is not None:
            record["caller"] = {"call": self.caller, "calls": 1}
        self.record = record
        self.view.finish(record)

    def recount(self, calls: int) -> None:
        """Say that the cell called this orchestrator ``calls`` times (this call the first)."""
        if self.record is not None and self.caller is not None:
            self.record = {**self.record, "caller": {"call": self.caller, "calls": calls}}
            self.view.redraw(self.record)


def resume_advice(result: OrchestrationResult, error: BaseException | None = None) -> str | None:
    """The line after an interrupt or an error that says how to go on, when ``--resume``
    saves something: the tool calls that finished are not made again. Not after the
    tool-call limit (``error``): a resumed run counts its answered calls again and stops
    at the same place; the error's own advice (``--max-calls``) is the way on."""
    if result.status not in ("error", "interrupted"):
        return None
    if isinstance(error, LimitExceeded) and error.limit == "calls":
        return None
    done = sum(call.status == "ok" for call in result.trace)
    if not done:
        return None
    calls = "call that finished is" if done == 1 else f"{done:,} calls that finished are"
    return (
        "to go on, run this cell again with %%orchestrate --resume (after fixing it, if it "
        f"needs a fix): the {calls} answered from the last run, not made again"
    )


def show_run(
    run: Callable[[EventCallback], OrchestrationResult],
    *,
    quiet: bool = False,
    code: str | None = None,
    resumable: bool = False,
) -> OrchestrationResult:
    """Run ``run`` with a live view, as ``%%orchestrate`` shows a cell (`CellView`).
    ``code`` replaces the record's code (the cell as written); ``resumable``: the cell can be
    run again with ``--resume`` (its record then says so after a failure)."""
    view = CellView(quiet=quiet, resumable=resumable)
    try:
        result = run(view.on_event)
    except OrchestrationError as exc:
        failed = result_of(exc)
        if failed is not None:
            if code is not None:
                failed.code = code
            view.finish(failed, raised=True, error=exc)
        raise
    if code is not None:
        result.code = code
    view.finish(result, raised=False)
    return result


class OrchestratorViews:
    """The presenter ``%load_ext`` installs for orchestrators (`_orchestrator.presenter`):
    a `CellView` per call, quiet unless the orchestrator's ``show`` asks otherwise or the
    call is its first in the running cell, so a loop of a thousand calls prints what they
    print but shows one record, not a thousand. That record is titled by its call and, when
    the cell ends (`cell_ended`, IPython's ``post_execute``), says how many calls it stands
    for: one redraw per orchestrator and cell, however long the loop."""

    def __init__(self, shell: InteractiveShell) -> None:
        self.shell = shell
        self._cell: object = None
        self._seen: dict[int, _Seen] = {}

    def __call__(self, orchestrator: Orchestrator, call: str) -> CellView:
        cell = self.shell.execution_count
        if cell != self._cell:
            self._cell, self._seen = cell, {}
        show = orchestrator.show
        seen = self._seen.get(id(orchestrator))
        if seen is not None:
            seen.calls += 1
            return CellView(quiet=not show, caller=call)
        view = CellView(quiet=not (show or show is None), caller=call)
        self._seen[id(orchestrator)] = _Seen(orchestrator, view if show is None else None)
        return view

    def cell_ended(self) -> None:
        """Redraw each first call's record the cell called again with the count of its calls."""
        seen, self._seen, self._cell = self._seen, {}, None
        for each in seen.values():
            if each.first is not None and each.calls > 1:
                each.first.recount(each.calls)


class _Seen:
    """An orchestrator a cell called: how often, and the view of the first call when it is
    the only one shown (``show=None``). Holds the orchestrator, so its id stays its own."""

    def __init__(self, orchestrator: Orchestrator, first: CellView | None) -> None:
        self.orchestrator = orchestrator
        self.first = first
        self.calls = 1

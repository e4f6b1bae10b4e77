"""The one protocol through which features plug into a run: `Feature`.

The run loop (`_driver.Driver`) knows Monty, tools, limits, events and interrupts, nothing
else. Everything that watches or answers a run's calls is a `Feature` in the list the driver
is given, asked at fixed points of the run in list order:

==================  ====================================================================
``attach``          the driver exists (a feature notes the run's secrets, its voice)
``begin``           a worker is checked out: load state into it, or return the snapshot the
                    run starts from instead of the code's first line (a restored run)
``declarations``    what the type check reads besides the stubs and the code
``sent_inputs``     the inputs crossed into Monty (which of them are handles)
``rebind``          a call's arguments, before the tool sees them (handles bound again)
``call_started``    a tool call is in the trace: answer it without its tool (a replay, the
                    cache, a refused approval) by returning an `Answer`, else None
``checkpoint``      the run asks for a snapshot at this call (a gated call does)
``call_answered``   the tool returned this value (before the trace bounds the arguments)
``call_finished``   the call's record is complete (``sent``: the value as Monty got it, None
                    for a failure)
``complete``        the code's value, before the run returns it
``paused``          the run stops at a gated call no one can answer now
``end``             the run is over, whatever its outcome (from whichever thread ends it)
==================  ====================================================================

A plain run has no features, and its loop no branch for any of them. The features are:
`_replay.Replay` (``--resume`` journal and the cache answering calls), `_memo`'s journal
(`_memo.Journaling`), `durable.SessionLink`, `durable.DurableFeature` (the store's
records and checkpoints) and `durable.Restored` (the same, for a run that starts from its
snapshot), `_approval.Gate` (approval gates).
`plug` builds the list from what a run was given, in the order that keeps each one's
contract: answers before gates before checkpoints; a restore before a session's load.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .._shared._events import ToolCall

if TYPE_CHECKING:
    import pydantic_monty as pm

    from ._driver import Driver
    from ._tool import Tool


@dataclass(frozen=True, slots=True)
class Answer:
    """A call answered without its tool: ``value``, or ``error`` raised in the code."""

    value: Any = None
    error: BaseException | None = None


class Paused(Exception):
    """Ends a durable run's loop at a gated call no one can answer now: the run pauses."""

    def __init__(self, call: ToolCall) -> None:
        super().__init__(call.tool)
        self.call = call


class Feature:
    """A feature of a run; every point does nothing unless a feature overrides it (see the
    module's table for when each is called)."""

    def attach(self, run: Driver) -> None:
        """The run exists."""

    def begin(
        self, run: Driver, worker: pm.MontySession, stubs: str | None
    ) -> pm.SyncSnapshot | None:
        """A snapshot to start the run from instead of the code (the rest are not asked)."""
        return None

    def declarations(self) -> tuple[str, ...]:
        """What the type check reads besides the stubs and the code (a session's earlier
        cells' declarations): part of the key a passed check is remembered by."""
        return ()

    def sent_inputs(self, inputs: Mapping[str, Any], sent: Mapping[str, Any]) -> None:
        """The inputs as given and as Monty got them."""

    def rebind(self, value: Any) -> Any:
        """A call's arguments with the handles this feature knows bound again."""
        return value

    def call_started(
        self, run: Driver, snap: pm.FunctionSnapshot, call: ToolCall, number: int, tool: Tool
    ) -> Answer | None:
        """Answer call ``number`` without its tool (the rest are not asked), or None."""
        return None

    def checkpoint(
        self,
        run: Driver,
        snap: pm.FunctionSnapshot,
        number: int,
        *,
        required: bool,
        approval: dict[str, Any] | None,
    ) -> None:
        """Keep a snapshot of the run stopped at call ``number``."""

    def call_answered(self, call: ToolCall, value: Any) -> None:
        """The tool (or an answer) gave ``value`` for ``call``."""

    def call_finished(self, call: ToolCall, number: int, sent: Any) -> None:
        """``call`` ended; ``sent`` is its value as Monty got it (None when it failed)."""

    def complete(self, run: Driver, worker: pm.MontySession, value: Any) -> Any:
        """The code's value, as the run returns it."""
        return value

    def paused(self, run: Driver, call: ToolCall) -> None:
        """The run pauses at gated ``call``."""

    def end(self, run: Driver) -> None:
        """The run is over (``run.result`` says how)."""

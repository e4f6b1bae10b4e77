"""What the engines report while they work: pass ``on_event`` a callable taking an `Event`.

``orchestrate(code, on_event=print)`` prints each event as it happens; `display/` turns the
same events into widgets, HTML or text. An orchestration sends `Output`, `CallStarted` and
`CallFinished` (each holding the run's `ToolCall`); a container run sends `BuildStarted`,
`BuildStep`, `BuildLog` and `BuildFinished` for its image, then `RunStarted`, `Output` and
`RunFinished` per attempt; `CodeModeAgent` wraps each attempt's events in `AttemptStarted` and
`AttemptFinished`; `AutoCoderAgent` wraps each iteration's in `IterationStarted` and
`IterationFinished`. Events are frozen, except `ToolCall`, which the engine fills in when the
call ends.

The classes are defined in a private module; this is their public home (their ``__module__``
says so).
"""

from __future__ import annotations

from ._shared._events import (
    AttemptFinished,
    AttemptStarted,
    BuildFinished,
    BuildLog,
    BuildStarted,
    BuildStep,
    CallFinished,
    CallStarted,
    Event,
    EventCallback,
    IterationFinished,
    IterationStarted,
    Output,
    RunFinished,
    RunStarted,
    Stream,
    ToolCall,
)
from ._shared._public import publish

__all__ = [
    "AttemptFinished",
    "AttemptStarted",
    "BuildFinished",
    "BuildLog",
    "BuildStarted",
    "BuildStep",
    "CallFinished",
    "CallStarted",
    "Event",
    "EventCallback",
    "IterationFinished",
    "IterationStarted",
    "Output",
    "RunFinished",
    "RunStarted",
    "Stream",
    "ToolCall",
]

publish(__name__, globals(), __all__)

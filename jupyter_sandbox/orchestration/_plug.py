"""Which features a run gets (`_hooks`), from what it was given, in the order they are asked.

The order keeps each feature's contract: a replay or the cache answers a call before a gate
asks about it (a call answered from a record is not gated again); a gate checkpoints before
the durable store's own once-a-second checkpoint (a call checkpoints once); the durable
store begins a restored run before a session would load its state into the worker (a
restored run's snapshot holds it already); the journal is written last.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from .._shared._events import ToolCall
from ._approval import Gate, Policy, govern
from ._hooks import Feature
from ._memo import Journal, Journaling
from ._replay import Answers, Replay
from ._tool import Tool

if TYPE_CHECKING:  # a run without a store never loads the durable subsystem (nor sqlite3)
    from .durable import Durable, Restore, SessionLink


def plug(
    tools: Mapping[str, Tool],
    *,
    journal: Journal | None = None,
    answers: Answers | None = None,
    session: SessionLink | None = None,
    durable: Durable | None = None,
    restore: Restore | None = None,
    approver: Callable[[ToolCall], bool] | None = None,
    policy: Policy | None = None,
) -> list[Feature]:
    """The features of a run: ``answers`` (a previous run's calls, a cache) answer its calls
    for as long as it repeats them; a gate for its gated tools (or the person's answer a
    restored run carries); a durable run writes its calls and checkpoints to a store
    (`_durable`), a restored one starts from a snapshot; ``session`` is the session
    (``--session``) the cell continues and leaves its state in; its calls become
    ``journal`` when it ends. None of them: a plain run. ``policy`` is how it answers gated
    calls (`_approval.govern`, from ``approver`` and the run it is nested in, when not given):
    its maker hands it down (`_approval.hand_down`) to the runs nested in its tools."""
    features: list[Feature] = []
    if answers is not None and answers.active:
        features.append(Replay(answers))
    if policy is None:
        policy = govern(tools, approver, durable=durable is not None)
    if (restore is not None and restore.decision is not None) or policy.gated:
        features.append(Gate(policy, restore))
    if durable is not None:
        from .durable import DurableFeature, Restored

        features.append(DurableFeature(durable) if restore is None else Restored(durable, restore))
    if session is not None:
        features.append(session)
    if journal is not None:
        features.append(Journaling(journal))
    return features

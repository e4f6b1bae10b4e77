"""`RunOptions`: the parameters `orchestrate` and `orchestrate_async` share, as one typed value.

Both functions take the same twenty keyword arguments and build one `RunOptions` from their
``locals()`` first thing: a parameter one of them gains and the other lacks (or this class
lacks) fails the first call with a ``TypeError``, and the code that turns them into a
`Driver` reads typed, immutable fields instead of string keys.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .._events import EventCallback, ToolCall
from ._keep import Keep
from ._limits import Limits
from ._memo import Journal, ToolCache
from ._registry import Tools

if TYPE_CHECKING:  # named only: the durable subsystem loads when a run has a store
    from .durable import Store


@dataclass(frozen=True, slots=True)
class RunOptions:
    """One call's arguments to `orchestrate` / `orchestrate_async` (see `orchestrate` for
    what each means). No defaults here: the functions' signatures hold them."""

    code: str
    tools: Tools
    inputs: Mapping[str, Any] | None
    limits: Limits | None
    timeout: float | None
    max_memory: int | None
    max_calls: int | None
    max_result: int | None
    max_output: int | None
    type_check: bool
    on_event: EventCallback | None
    journal: Journal | None
    resume: bool
    cache: ToolCache | None
    session: str | None
    scope: str
    store: Store | str | os.PathLike[str] | None
    run_id: str | None
    approver: Callable[[ToolCall], bool] | None
    cell: str | None
    keep: Keep | None

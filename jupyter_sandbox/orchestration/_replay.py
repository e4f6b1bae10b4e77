"""Answers a call without calling its tool: from the run being resumed or forked, or the cache.

A run's calls are numbered in the order the code makes them (the *index*; Monty's ``call_id``
is the worker's own and is not stable across a restore). Call *i* is answered from the record
with index *i* while the code repeats the earlier run: same tool, same arguments. A record
that had failed or never finished is made again and the replay goes on past it; from the
first call the code makes differently, tools are called again (see `_memo.Journal`). A fork
also answers one index with a value of the user's choosing (`fixed`).

`Replay` is the run's feature (`_hooks`) that asks `lookup` at each call and reports each
value a tool returned with `remember` (the cache keeps it); a run with nothing to replay and no
cache has no `Replay`, and pays nothing. `_memo.Journaling` keeps the run's calls for the next.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .._shared._events import ToolCall
from .._shared._scrub import note
from ._hooks import Answer, Feature
from ._memo import Recorded, ToolCache, same
from ._sandbox_tool import secret_values

if TYPE_CHECKING:
    import pydantic_monty as pm

    from ._driver import Driver
    from ._tool import Tool


class Answers:
    """What a run can be answered with instead of calling tools."""

    def __init__(
        self,
        records: Mapping[int, Recorded] | None = None,
        cache: ToolCache | None = None,
        *,
        fixed: Mapping[int, Any] | None = None,
    ) -> None:
        self._records = dict(records or {})
        self._fixed = dict(fixed or {})
        self.cache = cache
        self.active = bool(self._records or self._fixed) or cache is not None

    def lookup(self, index: int, call: ToolCall) -> tuple[bool, Any]:
        """Whether call number ``index`` is answered without its tool, and with what. Marks
        ``call`` replayed (and gives it the container runs that answered it) when it is."""
        if index in self._fixed:
            call.replayed = True
            return True, self._fixed[index]
        if self._records:
            old = self._records.get(index)
            if old is not None and (
                old.tool != call.tool
                or not same(old.args, call.args)
                or not same(old.kwargs, call.kwargs)
            ):
                self._records = {}  # the run took another path: call tools from here on
            elif old is not None and old.status == "ok":
                call.replayed = True
                call.children = list(old.children)  # the container run that answered it
                return True, old.result
            # else it failed or never finished: made again (or taken from the cache), and the
            # calls after it are still answered
        if self.cache is not None:
            key = ToolCache.key(call.tool, call.args, call.kwargs)
            found, value = self.cache.get(key) if key is not None else (False, None)
            call.replayed = found
            return found, value
        return False, None

    def remember(self, call: ToolCall, value: Any) -> None:
        """A tool returned ``value`` for ``call``: the cache keeps it."""
        if self.cache is not None and not call.replayed:
            key = ToolCache.key(call.tool, call.args, call.kwargs)
            if key is not None:
                self.cache.put(key, value)


class Replay(Feature):
    """Answers a run's calls from ``answers`` (a run resumed or forked, the cache) while it
    repeats them, and gives the cache the values its tools return."""

    def __init__(self, answers: Answers) -> None:
        self.answers = answers

    def attach(self, run: Driver) -> None:
        # the calls it answers may hold a sandbox tool's secrets returned elsewhere
        note(secret_values(run.tools.values()), run.scrub)

    def call_started(
        self, run: Driver, snap: pm.FunctionSnapshot, call: ToolCall, number: int, tool: Tool
    ) -> Answer | None:
        found, value = self.answers.lookup(number, call)
        return Answer(value) if found else None

    def call_answered(self, call: ToolCall, value: Any) -> None:
        self.answers.remember(call, value)  # before the trace bounds them: keyed by the args

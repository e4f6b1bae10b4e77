"""`RunSpec`: one orchestration run asked for, as one frozen, validated value.

Every door (`orchestrate`, `orchestrate_async`, `resume_run`, `fork_run`, an `Orchestrator`'s
call, `CodeModeAgent`, MCP's ``run_code``, the ``%%orchestrate`` magic) builds one and hands
it to `_plan.plan`, the one place a `Driver` is assembled: a parameter given to a door is a
field here, and the plan reads it by name. Bad values fail here, before anything runs, with
one line that says what to pass instead.

Durability is three small choices: ``store`` (None: nothing is written), ``session`` and
``resume``: False (a new run), True (take up this cell's last unfinished run, as
``--resume`` does), `TakeUp` (continue one stored run, `resume_run`) or `Fork` (run a stored
run's code again with one call's value replaced, `fork_run`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .._shared._errors import SandboxConfigError
from .._shared._events import EventCallback, ToolCall
from ._keep import Keep
from ._limits import Limits
from ._memo import Journal, ToolCache
from ._tool import Tool

if TYPE_CHECKING:  # named only: the durable subsystem loads when a run has a store
    from .durable import Store

DEFAULT_LIMITS = Limits()
"""What a run is bounded by when its door is given no ``limits``."""

FLAT_LIMITS = ("timeout", "max_memory", "max_calls", "max_result", "max_output")
"""The limit keywords the doors once took one by one; `refuse_flat` names their one spelling."""


def refuse_flat(door: str, given: Mapping[str, object]) -> None:
    """A ``TypeError`` for keywords ``door`` does not take: a limit's says ``limits=Limits(...)``
    (one spelling for every limit), any other is Python's own complaint."""
    if not given:
        return
    name = next(iter(given))
    if name in FLAT_LIMITS:
        raise TypeError(
            f"{door}() takes limits=Limits({name}=...), not {name}=: every limit is a "
            "field of Limits"
        )
    raise TypeError(f"{door}() got an unexpected keyword argument {name!r}")


@dataclass(frozen=True, slots=True)
class TakeUp:
    """Continue stored run ``run_id`` (`resume_run`): ``approve`` answers the gated call a
    paused run stopped at (``reason`` is the refusal's message), ``expect`` is the digest of
    the call being approved."""

    run_id: str
    approve: bool | None = None
    reason: str | None = None
    expect: str | None = None

    def __post_init__(self) -> None:
        _typed("run_id", self.run_id, str)
        _typed("approve", self.approve, bool, optional=True)
        _typed("reason", self.reason, str, optional=True)
        _typed("expect", self.expect, str, optional=True)


@dataclass(frozen=True, slots=True)
class Fork:
    """Run stored run ``run_id``'s code again as a new run, its call numbered ``call_index``
    (the trace's ``#``) answered with ``value`` (`fork_run`)."""

    run_id: str
    call_index: int
    value: Any = None

    def __post_init__(self) -> None:
        _typed("run_id", self.run_id, str)


@dataclass(frozen=True, slots=True)
class RunSpec:
    """One run: what to run (``code``, ``tools`` by name, ``inputs`` as globals), its bounds
    (``limits``, ``keep``), how it is watched (``on_event``) and answered (``approver`` for
    gated calls, ``journal``/``cache`` for repeated calls), and where it is kept (``store``,
    ``session``, ``scope``, ``cell``, ``run_id``, ``resume``). See `orchestrate` for what each
    does."""

    code: str
    tools: Mapping[str, Tool]
    inputs: Mapping[str, Any]
    limits: Limits = DEFAULT_LIMITS
    keep: Keep | None = None
    type_check: bool = True
    on_event: EventCallback | None = None
    approver: Callable[[ToolCall], bool] | None = None
    journal: Journal | None = None
    cache: ToolCache | None = None
    store: Store | str | os.PathLike[str] | None = None
    session: str | None = None
    scope: str = "default"
    cell: str | None = None
    run_id: str | None = None
    resume: bool | TakeUp | Fork = False

    def __post_init__(self) -> None:
        """One line per bad field, naming it and what it takes. Every run is checked, so the
        fields are read in one loop (`_KINDS`) and a helper is called only for a bad one."""
        for name, kind, optional in _KINDS:
            value = getattr(self, name)
            if not ((optional and value is None) or isinstance(value, kind)):
                _typed(name, value, kind, optional=optional)
        for name in ("on_event", "approver"):
            value = getattr(self, name)
            if value is not None and not callable(value):
                raise SandboxConfigError(
                    f"{name} takes a function or None, got {type(value).__name__}", parameter=name
                )
        for key, one in self.tools.items():
            if not isinstance(one, Tool):
                raise SandboxConfigError(
                    f"tools: {key!r} is a {type(one).__name__}, not a Tool; resolve it "
                    "with resolve_tools (or pass the function to orchestrate)",
                    parameter="tools",
                )
        for key in self.inputs:
            if not isinstance(key, str):
                raise SandboxConfigError("inputs: names must be str", parameter="inputs")
        if self.store is not None and not isinstance(self.store, (str, os.PathLike)):
            from .durable import Store  # only a store given as one loads the subsystem

            if not isinstance(self.store, Store):
                raise SandboxConfigError(
                    f"store takes a Store or its path, got {type(self.store).__name__}",
                    parameter="store",
                )
        if isinstance(self.resume, (TakeUp, Fork)) and self.store is None:
            raise SandboxConfigError(
                "store: a stored run is taken up from a store; pass store=", parameter="store"
            )

    def called(self, inputs: Mapping[str, Any], on_event: EventCallback | None) -> RunSpec:
        """This spec with one call's ``inputs`` and view (``on_event``): what a reusable
        orchestrator runs at each call. The other fields are this spec's, checked when it was
        made, so only the two given are checked here (a call pays for its own fields only)."""
        for key in inputs:
            if not isinstance(key, str):
                raise SandboxConfigError("inputs: names must be str", parameter="inputs")
        if on_event is not None and not callable(on_event):
            raise SandboxConfigError(
                f"on_event takes a function or None, got {type(on_event).__name__}",
                parameter="on_event",
            )
        spec = object.__new__(RunSpec)
        for name in _FIELDS:
            _set(spec, name, getattr(self, name))
        _set(spec, "inputs", inputs)
        _set(spec, "on_event", on_event)
        return spec


_set = object.__setattr__
"""How `RunSpec.called` fills a frozen copy without checking its fields again."""

_KINDS: tuple[tuple[str, type | tuple[type, ...], bool], ...] = (
    ("code", str, False),
    ("tools", Mapping, False),
    ("inputs", Mapping, False),
    ("limits", Limits, False),
    ("keep", Keep, True),
    ("type_check", bool, False),
    ("journal", Journal, True),
    ("cache", ToolCache, True),
    ("session", str, True),
    ("scope", str, False),
    ("cell", str, True),
    ("run_id", str, True),
    ("resume", (bool, TakeUp, Fork), False),
)
"""`RunSpec`'s fields checked by kind: name, what it takes, whether None is allowed."""

_FIELDS = tuple(RunSpec.__slots__)
"""Every field of `RunSpec`, in order (what `RunSpec.called` copies)."""


def _typed(
    name: str, value: object, kind: type | tuple[type, ...], *, optional: bool = False
) -> None:
    """`SandboxConfigError` naming ``name`` unless ``value`` is a ``kind`` (or None when
    ``optional``)."""
    if (optional and value is None) or isinstance(value, kind):
        return
    kinds = kind if isinstance(kind, tuple) else (kind,)
    wanted = " or ".join(k.__name__ for k in kinds) + (" or None" if optional else "")
    raise SandboxConfigError(
        f"{name} takes a {wanted}, got {type(value).__name__}: {value!r:.60}", parameter=name
    )

"""What a person approves: a gated call's arguments whole, and a digest that seals them.

A panel that cuts an argument hides part of what Approve does (a list of 13 paths cut after
the first shows none of ``/home/alice/.ssh``), so a paused run's record carries each pending
call's arguments as their full ``repr`` (`shown`), up to `APPROVAL_CHARS` characters per
call; an argument past its share is cut, and the record says by how much (``cut``), so the
panel can say exactly what it does not show. Small arguments are never the ones cut: the
budget is shared out smallest first (`_shares`).

The *digest* (`digest`) is a short hash of the call as it will be made: its tool and the
canonical text of each argument (sets sorted: their order differs between processes). It
is computed when the run pauses (kept in the store with the call, and in the record) and
again when the approved call is about to be made, from the objects it will get: an approval
that names a digest (``%orchestrate_approve RUN --expect DIGEST``, which the panel's
Approve sends) is refused when they differ, so what runs is what was shown, whatever
happened in between (a handle bound after a restart to a notebook variable that now holds
something else). A call too big to show whole, or one binding notebook variables after a
restart (not what the record showed), is approved only with its digest (`needs_digest`).

A gate is the tool's wherever it is called from. A run nested in a tool (an `Orchestrator`'s
body, a sync or async tool that calls ``orchestrate``/``orchestrate_async``) answers its gated
calls by the `Policy` of the run whose tool it runs in when it has no approver of its own: it
asks that run's approver; when that run would pause for a person instead, the nested call is
refused (``PermissionError``, one line: a run inside a tool cannot pause, the tool is waiting
for it; pausing the calling run at its tool call instead would need that call checkpointed
before it started); with neither, it is refused the same way. The policy is found through
the run whose tool is executing (`_driver.running`: a context variable the run's thread, and
the tasks its async tools run in, carry), so concurrent runs never see each other's
approver; a thread a tool starts on its own carries none, and its runs fail closed. An
approver of the nested run's own (a tool author's) answers for its own tools, but never
loosens a run above it: a tool that an enclosing run gates is asked there too
(`Policy.answer`). What a run above gates is a function, not a name: a nested run's tool
whose function is the gated one under wrappers (``tool(fn)`` again with ``approve=False``, a
``functools.partial``, a ``functools.wraps`` wrapper: `_same`) is gated as the original
(`Policy.held`). So is a gated `Tool` that a tool's own Python calls, by name or through a
handle the code passed it (`direct`, from ``Tool.__call__``): outside any run it is the
notebook's own call and just runs.

Why this module is not in ``durable/``: approvals are not durable runs' alone. A run without
a store gates its calls too, answered inline by ``approver=`` (`Gate` fails such a run
without one, or refuses the call in a run nested in a tool); only pausing needs the store,
and `Gate` reaches it through the run (``run.checkpoint``), never by import, so a gated run
without a store loads no SQLite.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import weakref
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .._shared._errors import OrchestrationError
from .._shared._events import ToolCall
from .._shared._grammar import DIGEST_CHARS
from .._shared._scrub import masked
from ._failures import describe
from ._hooks import Answer, Feature, Paused
from ._values import DEPTH_CEILING

if TYPE_CHECKING:
    import pydantic_monty as pm

    from ._driver import Driver
    from ._tool import Tool
    from .durable import Restore

APPROVAL_CHARS = 100_000
"""Characters of a pending call's arguments (their reprs, all together) its record carries."""


def full_repr(value: Any) -> str:
    """``repr(value)`` whole; never raises (a user object's ``__repr__`` may), except
    ``KeyboardInterrupt``."""
    try:
        return repr(value)
    except KeyboardInterrupt:
        raise
    except BaseException as exc:
        return f"<{type(value).__name__} (repr failed: {type(exc).__name__})>"


def _canonical(value: Any, depth: int = 0) -> str:
    """The text a digest hashes for ``value``: its repr, with set members sorted (a set's
    order differs between processes: the same call must hash alike after a restart)."""
    kind = type(value)
    if depth < DEPTH_CEILING:
        if kind is list or kind is tuple:
            inner = ", ".join(_canonical(item, depth + 1) for item in value)
            return f"{kind.__name__}[{inner}]"
        if kind is dict:
            pairs = (
                f"{_canonical(k, depth + 1)}: {_canonical(v, depth + 1)}" for k, v in value.items()
            )
            return "dict{" + ", ".join(pairs) + "}"
        if kind is set or kind is frozenset:
            return (
                f"{kind.__name__}{{{', '.join(sorted(_canonical(m, depth + 1) for m in value))}}}"
            )
    return full_repr(value)


def digest(
    tool: str,
    args: tuple[Any, ...] | list[Any],
    kwargs: Mapping[str, Any],
    secrets: tuple[str, ...] = (),
) -> str:
    """The call's digest: `DIGEST_CHARS` hex digits of the SHA-256 of its canonical text,
    each of ``secrets`` masked in it first (a digest in a saved notebook must not let anyone
    test guesses of a secret the call holds, which its record masks)."""
    hashed = hashlib.sha256(tool.encode())
    pieces = [("a", _canonical(arg)) for arg in args]
    pieces += [(f"k{key}=", _canonical(value)) for key, value in kwargs.items()]
    for mark, text in pieces:
        shown = str(masked(text, secrets)) if secrets else text
        hashed.update(f"\0{mark}".encode() + shown.encode("utf-8", "surrogatepass"))
    return hashed.hexdigest()[:DIGEST_CHARS]


@dataclass
class Shown:
    """A pending call as its record carries it: each argument's repr (cut past its share),
    how long each cut one is whole (positionals by index, as text, keywords by name)."""

    args: list[str]
    kwargs: dict[str, str]
    cut: dict[str, int] = field(default_factory=dict)


def shown(
    args: tuple[Any, ...] | list[Any], kwargs: Mapping[str, Any], budget: int = APPROVAL_CHARS
) -> Shown:
    """The arguments' reprs, together at most ``budget`` characters (`_shares`)."""
    texts = {str(i): full_repr(a) for i, a in enumerate(args)}
    texts.update({key: full_repr(value) for key, value in kwargs.items()})
    shares = _shares({key: len(text) for key, text in texts.items()}, budget)
    kept = {key: text[: shares[key]] for key, text in texts.items()}
    cut = {key: len(text) for key, text in texts.items() if shares[key] < len(text)}
    return Shown([kept[str(i)] for i in range(len(args))], {k: kept[k] for k in kwargs}, cut)


def _shares(lengths: Mapping[str, int], budget: int) -> dict[str, int]:
    """Each argument's share of ``budget``: smallest first, each gets all it needs up to an
    even share of what is left, so only the largest are cut (and a ``force=True`` beside a
    huge list is always whole)."""
    shares, left = {}, budget
    order = sorted(lengths, key=lambda key: lengths[key])
    for at, key in enumerate(order):
        shares[key] = min(lengths[key], left // (len(order) - at))
        left -= shares[key]
    return shares


def handles(value: Any, depth: int = 0) -> Iterator[Any]:
    """Each object in ``value`` that is not plain data, walking lists, tuples and dicts."""
    kind = type(value)
    if kind is list or kind is tuple:
        if depth < DEPTH_CEILING:
            for item in value:
                yield from handles(item, depth + 1)
    elif kind is dict:
        if depth < DEPTH_CEILING:
            for item in value.values():
                yield from handles(item, depth + 1)
    elif kind not in (str, bytes, int, float, bool, type(None), set, frozenset):
        yield value


def sealed(
    tool: str,
    args: tuple[Any, ...] | list[Any],
    kwargs: Mapping[str, Any],
    secrets: tuple[str, ...] = (),
) -> dict[str, Any]:
    """What the store keeps beside a gated call (`Durable.checkpoint`): its ``digest``, and
    ``chars``, how long its arguments' reprs are together (over `APPROVAL_CHARS`: not shown
    whole, so approved only with the digest)."""
    chars = sum(len(full_repr(a)) for a in args) + sum(len(full_repr(v)) for v in kwargs.values())
    return {"digest": digest(tool, args, kwargs, secrets), "chars": chars}


def differs(run_id: str, call: Any, expected: str, now: str) -> str:
    """Why an approval naming digest ``expected`` was not applied: the call is ``now``."""
    return (
        f"run {run_id}: call #{call.call_id} {call.tool}() is not the call approved (digest "
        f"{expected}): its arguments are now as shown above, digest {now}; nothing was made "
        f"and the run waits again: resume_run({run_id!r}, approve=True, expect={now!r}) "
        "approves it"
    )


@dataclass(frozen=True, slots=True, eq=False)
class Policy:
    """How a run answers its gated calls, and what the runs nested in its tools inherit
    (see the module): its ``approver``, whether it pauses for a person (``durable``: it has
    a store), its ``tools`` (what it gates) and the ``outer`` policy of the run it is
    nested in."""

    approver: Callable[[ToolCall], bool] | None
    durable: bool
    tools: Mapping[str, Tool]
    outer: Policy | None

    @property
    def gated(self) -> bool:
        """Whether the run needs a `Gate`: it has a gated tool of its own, or a tool whose
        function a run it is nested in gates (`held`)."""
        if any(tool.approve is not False for tool in self.tools.values()):
            return True
        outer = self.outer
        return outer is not None and any(
            _same(own.func, tool.func)
            for policy in (outer, *outer._above())
            for own in policy.tools.values()
            if own.approve is not False
            for tool in self.tools.values()
        )

    def held(self, tool: Tool, call: ToolCall) -> bool:
        """Whether a run this one is nested in gates ``call`` (`gates`): an ungated copy of
        a gated function (``tool(fn)``, a ``functools.partial``, another name) in a nested run
        is gated as the original is."""
        outer = self.outer
        return outer is not None and outer.gates(tool, call)

    def _above(self) -> Iterator[Policy]:
        outer = self.outer
        while outer is not None:
            yield outer
            outer = outer.outer

    def gates(self, tool: Tool, call: ToolCall) -> bool:
        """Whether this run or one it is nested in gates ``call`` to ``tool`` itself (the same
        function among its own gated tools, however wrapped: `_same`)."""
        return any(
            own.approve is not False
            and _same(own.func, tool.func)
            and own.gated(call.args, call.kwargs)
            for policy in (self, *self._above())
            for own in policy.tools.values()
        )

    def answer(
        self, run: Driver, call: ToolCall, tool: Tool, *, nested: bool = False
    ) -> str | None:
        """None when gated ``call`` may run, else why not (``PermissionError`` in the code);
        raises `Paused` (the run waits for a person) or `OrchestrationError` (no one can
        answer). In order: the run's own approver (then, if it approved, the runs above that
        gate the tool too); else the nearest run above with an approver; else the run pauses
        (a nested one, which cannot, is refused); else it fails. ``nested``: asked for a run
        nested in this one's tool."""
        if self.approver is not None:
            run.pending.flush()  # the approver may take a while (a person)
            try:
                approved, reason = bool(self.approver(call)), None
            except Exception as exc:
                approved, reason = False, f"the approver failed: {describe(exc)}"
            if not approved:
                return reason or f"{call.tool}() was rejected"
            outer = self.outer
            if outer is None or not outer.gates(tool, call):
                return None
            return outer.answer(run, call, tool, nested=True)
        asking = next((above for above in self._above() if above.approver is not None), None)
        if asking is not None:
            return asking.answer(run, call, tool, nested=True)
        if self.durable and not nested:
            raise Paused(call)
        if nested or run.parent is not None:  # in a tool: refused, the calling run goes on
            why = (
                "cannot pause for a person inside a tool (the calling run waits for it)"
                if self.durable or any(above.durable for above in self._above())
                else "the run it is nested in has no approver"
            )
            return (
                f"{call.tool}() needs approval (its tool has approve=) and {why}: call it from "
                "the cell's own code, or pass approver=fn to the run that calls the tool"
            )
        raise OrchestrationError(
            f"{call.tool}() needs approval (its tool has approve=): pass approver=fn to the "
            "orchestrate() that runs it to answer it inline, or store= to pause the run until "
            "resume_run answers it"
        )


def _root(func: Any) -> Any:
    """The function under ``func``'s wrappers: a `Tool`'s function, a ``functools.partial``'s,
    a ``functools.wraps`` wrapper's ``__wrapped__`` (at most `DEPTH_CEILING` of them)."""
    from ._tool import Tool  # here: the tool module is imported by what imports this one

    for _ in range(DEPTH_CEILING):
        if isinstance(func, (Tool, functools.partial)):
            func = func.func
        else:
            inner = getattr(func, "__wrapped__", None)
            if inner is None:
                return func
            func = inner
    return func


def _same(gated: Any, other: Any) -> bool:
    """Whether ``other`` calls the function ``gated`` wraps (`_root`); a bound method is the
    same as another of the same function and object (each attribute access makes a new one)."""
    gated, other = _root(gated), _root(other)
    if gated is other:
        return True
    return inspect.ismethod(gated) and inspect.ismethod(other) and gated == other


_handed: weakref.WeakKeyDictionary[Driver, Policy] = weakref.WeakKeyDictionary()
"""The policy of each live run that has one to hand down (`hand_down`)."""


def govern(
    tools: Mapping[str, Tool], approver: Callable[[ToolCall], bool] | None, *, durable: bool
) -> Policy:
    """The policy of a run about to be made here, nested under the run whose tool is
    executing (if any)."""
    return Policy(approver, durable, tools, enclosing())


def enclosing() -> Policy | None:
    """The policy of the nearest run this code runs under (in one of its tools) that has
    one, else None."""
    from ._driver import running  # here: the driver imports what imports this module

    run = running()
    while run is not None:
        policy = _handed.get(run)
        if policy is not None:
            return policy
        run = run.parent
    return None


def direct(tool: Tool, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """Raise ``PermissionError`` unless a gated ``tool`` that a run's tool calls as Python (a
    `Tool` object called directly: by name in the tool's code, or a handle the code passed it)
    may run: it is asked as a call from a run nested in that tool would be (`Policy.answer`;
    with no one to ask, refused). Called outside any run (the notebook's own call) it runs."""
    from ._driver import running  # here: the driver imports what imports this module

    run = running()
    if run is None or not tool.gated(args, kwargs):
        return
    call = ToolCall(0, tool.key, args, dict(kwargs), 0.0)
    policy = enclosing() or Policy(None, False, {}, None)
    refusal = policy.answer(run, call, tool, nested=True)
    if refusal is not None:
        raise PermissionError(refusal)


def hand_down(run: Driver, policy: Policy) -> Driver:
    """Make ``policy`` the one the runs nested in ``run``'s tools inherit (`enclosing`),
    unless it says nothing the runs above it do not (no approver, store or gated tool)."""
    if policy.approver is not None or policy.durable or policy.gated:
        _handed[run] = policy
    return run


class Gate(Feature):
    """Approval gates, a feature of a run with a gated tool or a person's answer to carry
    (`_hooks`): a gated call checkpoints (a durable run), then runs, is refused
    (``PermissionError`` in the code) or pauses the run (`Paused`).

    The answer is, in order: the person's that a resumed run carries for the call it stopped
    at (it stands even if the tool registered now is not gated; a rejected call is never
    made), else the run's `Policy` (its approver, one that raises rejects; the runs it is
    nested in; a durable run pauses; any other run fails)."""

    def __init__(self, policy: Policy, restore: Restore | None) -> None:
        self.policy = policy
        self.restore = restore
        self.durable = policy.durable
        self._decision = restore.decision if restore is not None else None
        """A person's answer to the gated call a restored run stopped at (used once)."""

    def call_started(
        self, run: Driver, snap: pm.FunctionSnapshot, call: ToolCall, number: int, tool: Tool
    ) -> Answer | None:
        gated = (
            tool.approve is not False and tool.gated(call.args, call.kwargs)
        ) or self.policy.held(tool, call)
        answered = self._answered(number)
        if not (gated or answered):
            return None
        if self.durable:  # a gated call waits for a person: worth a checkpoint
            approval = sealed(call.tool, call.args, call.kwargs, run.scrub.secrets)
            run.checkpoint(snap, number, required=True, approval=approval)
        refusal = self._approval(run, call, tool, answered)
        return None if refusal is None else Answer(error=PermissionError(refusal))

    def _answered(self, number: int) -> bool:
        """Whether call ``number`` is the one a person answered (a resumed run's stop)."""
        restore = self.restore
        return self._decision is not None and restore is not None and number == restore.index

    def _approval(self, run: Driver, call: ToolCall, tool: Tool, answered: bool) -> str | None:
        """None when the gated ``call`` may run, else why not (see the class)."""
        if answered and self._decision is not None and self.restore is not None:
            (approved, reason), self._decision = self._decision, None
            expect = self.restore.expect
            if approved and expect is not None:
                now = digest(call.tool, call.args, call.kwargs, run.scrub.secrets)
                if now != expect:  # not the call the person saw: it waits for them again
                    run.result.refused = differs(self.restore.run_id, call, expect, now)
                    raise Paused(call)
            return None if approved else reason or f"{call.tool}() was rejected"
        return self.policy.answer(run, call, tool)

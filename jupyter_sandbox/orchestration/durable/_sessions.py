"""Sessions: variables, functions and classes kept from one cell to the next of the same name.

A cell runs in a worker checked out for it alone, as every cell does; a session cell starts
by loading the state the session's last cell left (``MontySession.load_session``) and ends
by dumping it (``dump()``). Holding a worker per session between cells would starve the pool
(two workers on two cores), and a dump is what survives a kernel restart (through the store).

Monty's dump restores more than the globals, and two of those things must not carry over:

- **limits**: a dump restores the limits of the checkout that first made the session, so
  ``--timeout 1`` in the first cell would bind every later one. Before loading, we put the
  cell's own limits into the dump.
- **the type check**: a dump restores its stubs (the tools and inputs of its first cell) and
  Monty appends only the snippets it type-checked itself; the driver checks each cell in a
  feed of its own and runs the code unchecked (`Driver._checked_apart`), so Monty would learn
  nothing of the session's names. We keep the session's declarations ourselves, in the same
  field of the dump: its functions, classes and imports as written, and each variable as its
  runtime type (``n: int``; ``Any`` for what the checker cannot name), written when a cell
  completes. Before loading, the type-check state becomes those declarations followed by
  this cell's stubs (later declarations win: this cell's inputs over older ones). Names the
  cell binds itself are ``Any`` to the checker, so ``n = 1`` then ``n = "one"`` passes, as in
  any notebook; ``add(s, 1)`` with ``s = "text"`` from an earlier cell is rejected. Raw code
  would not do: the checker takes ``n = 1`` in it as ``Literal[1]``.

Both are two fields of the dump's CBOR (`_cbor`), replaced in place; the rest is copied byte
for byte. A run's snapshot (``snapshot.dump()``, what a durable run resumes from) has the
same limits inside its REPL, followed by the executor's state: `with_limits` rewrites those
too, so a resumed run keeps the limits it is given now, not those of the run that paused.
The dump format is pydantic-monty's own and version-bound (a dump loads only into the same
Monty version): `_FORMAT` names the one this code knows, and any other is refused.

A cell that fails leaves its session as it was before the cell. A state holding a secret a
sandbox tool returned is kept in the kernel only, never in the store (`_scrub`).

**Handles.** A host object (an opaque handle: an input's DataFrame, a client a tool returned)
is not part of a dump: a later cell's code holds a reference to it by the uuid it was sent in
with, and hands tools a `pydantic_monty.MontyClassProxy` with that uuid (as in a durable
restore, `_rebind`). So the in-memory state keeps the objects themselves by uuid, and the
next cell's tool arguments and value get them back (`SessionRebinder`). The map is bounded by
the dump: an object whose uuid's 16 bytes are no longer in the new dump is dropped when the
cell saves (Monty's heap may keep an unreachable one until its own collection runs; never
more than the dump can hold). ``%orchestrate_reset`` drops the state, and the objects with it.
Each handle's origin (an input's name, path and type, or the tool that returned it) is also
written into the dump, as a comment line after the declarations, so the store keeps it: after
a kernel restart a handle that came from an input is bound again to the input of that name
the cell is given (``--in df``, same type), and any other is refused in one line naming the
variable or tool it came from.
"""

from __future__ import annotations

import ast
import json
import threading
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import pydantic_monty as pm

from ..._shared._errors import OrchestrationError
from ..._shared._events import ToolCall
from ..._shared._scrub import in_dump, known
from .._hooks import Feature
from .._limits import Limits
from .._registry import Tool
from . import _cbor
from ._durable import current
from ._rebind import (
    Origin,
    SessionRebinder,
    defined_classes,
    input_handles,
    result_handles,
    statements,
)

if TYPE_CHECKING:
    from .._driver import Driver

_FORMAT = b"MONTY\x00\x0e\x00"
"""How a pydantic-monty 1.4.0 session dump starts: magic and format version."""
_HEAP_LIMITS = ("heap", "tracker", "limits")
_LIMITS = ("state", "Idle", *_HEAP_LIMITS)
_SNAPSHOT_LIMITS = ("state", "Suspended", "FunctionCall", "snapshot", "repl", *_HEAP_LIMITS)
"""Where a snapshot stopped at a function call (every checkpoint is one) keeps them."""
_TYPE_CHECK = ("type_check",)
_TRACKER = _cbor.encode("tracker") + b"\xa4" + _cbor.encode("limits")
"""The resource tracker (a map of four entries) and its first key, ``limits``."""
_AFTER = (
    *("total_execution_time", "feed_execution_time", "recursion_limit_override"),
    *("purple_count", "allocations_since_gc", "timezone_utc", "decimal_contexts", "globals"),
)
"""The entries a dump holds after the limits, to its last byte: the rest of the tracker, the
rest of the heap, then the session's globals."""
_SNAPSHOT_AFTER = (*_AFTER, "executor", "vm_state")
"""The same in a snapshot: its REPL ends with the globals, then come the executor's parts."""
_NAMES = "_jupyter_sandbox_names"
_HEADER = "from typing import Any\nfrom collections.abc import Callable\n"
"""What the session's declarations use (the cell's stubs import the same again)."""
_DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Import, ast.ImportFrom)
_HANDLES = "# jupyter_sandbox handles: "
"""The comment line that keeps the session's handles' origins (JSON) in its declarations."""
_DATA = {"int", "float", "complex", "bool", "str", "bytes", "list", "dict", "tuple", "set"}
"""Runtime types the checker is told by name (their items stay unknown to it)."""


@dataclass(frozen=True)
class SessionState:
    """A session between cells: Monty's dump (carrying the session's declarations for the
    type check) and its variables' type names, for listing."""

    dump: bytes
    names: dict[str, str]
    objects: Mapping[str, Any] = field(default_factory=dict)
    """The host objects behind the handles the session's cells sent in, by uuid (this kernel
    only: after a restart, `SessionRebinder` binds them by origin)."""

    @property
    def size(self) -> int:
        """Bytes of the dump."""
        return len(self.dump)


class SessionStore(Protocol):
    """What sessions need of the store (`jupyter_sandbox.Store`)."""

    def save_session(self, scope: str, name: str, dump: bytes, names: dict[str, str]) -> None: ...

    def load_session(self, scope: str, name: str) -> bytes | None: ...

    def drop_session(self, scope: str, name: str) -> bool: ...


class Sessions:
    """The kernel's sessions by (scope, name), in memory; a store, when given, keeps them past
    the kernel. Thread-safe: cells of other notebooks' runs may save at once. What it keeps is
    the durable state's (`_durable.Process.sessions`), so a test's fresh state (the
    ``durable_process`` fixture) starts with none, as a new kernel does."""

    def __init__(self) -> None:
        self._lock = threading.Lock()

    @property
    def _kept(self) -> dict[tuple[str, str], SessionState]:
        return current().sessions

    def open(self, name: str, *, scope: str, store: SessionStore | None) -> SessionLink:
        """The link one cell uses: the state it starts from (this kernel's, else the store's,
        else none: a new session)."""
        with self._lock:
            state = self._kept.get((scope, name))
        if state is None and store is not None:
            dump = store.load_session(scope, name)
            if dump is not None:
                state = SessionState(dump, {})
        return SessionLink(name, scope, state, self, store)

    def keep(self, scope: str, name: str, state: SessionState) -> None:
        with self._lock:
            self._kept[(scope, name)] = state

    def listed(self, scope: str) -> dict[str, SessionState]:
        """This kernel's sessions of ``scope``, by name."""
        with self._lock:
            return {name: s for (where, name), s in self._kept.items() if where == scope}

    def drop(self, scope: str, name: str, store: SessionStore | None = None) -> bool:
        """Forget a session here and in ``store``; whether there was one."""
        with self._lock:
            found = self._kept.pop((scope, name), None) is not None
        if store is not None:
            found = store.drop_session(scope, name) or found
        return found


sessions = Sessions()
"""The process's sessions: what ``orchestrate(..., session=NAME)`` continues."""


class SessionLink(Feature):
    """One cell's use of a session, a feature of its run (`_hooks`): `load` it into the
    cell's worker before the code runs, `save` it after the code completed (kept in memory
    and in the store at once)."""

    def __init__(
        self,
        name: str,
        scope: str,
        state: SessionState | None,
        owner: Sessions,
        store: SessionStore | None,
    ) -> None:
        self.name = name
        self.scope = scope
        self.state = state
        self._owner = owner
        self._store = store
        self._origins: dict[str, Origin] = {}
        """The origins of the handles the session holds: its earlier cells' and this one's."""
        self._objects: dict[str, Any] = {}
        """The objects behind them, by uuid, as far as this kernel still has them."""
        self._rebinder: SessionRebinder | None = None

    def load(self, session: pm.MontySession, code: str, limits: Limits, stubs: str | None) -> None:
        """Restore the session into a fresh checkout for ``code``, with this cell's ``limits``
        and type check (``stubs``; None: the cell is not checked)."""
        if self.state is None:
            return
        dump = self.state.dump
        context, imports = _context(dump, self.name)
        self._origins = _origins(context)
        self._objects = dict(self.state.objects)
        if self._origins:
            self._rebinder = SessionRebinder(
                self.name, self._origins, {}, defined_classes(context, code), self._objects
            )
        check = None
        if stubs is not None:
            check = _check_state(_HEADER + _loosened(context, _bound(code)) + stubs, imports)
        dump = _replace(dump, _TYPE_CHECK, _cbor.encode(check))
        session.load_session(with_limits(dump, limits))

    def begin(self, run: Driver, worker: pm.MontySession, stubs: str | None) -> None:
        self.load(worker, run.code, run.limits, stubs)

    def declarations(self) -> tuple[str, ...]:
        if self.state is None:
            return ()
        return _context(self.state.dump, self.name)  # the declarations `load` uses

    def call_finished(self, call: ToolCall, number: int, sent: Any) -> None:
        if call.error is None:  # kept for the session's next cell
            self.sent_result(call.call_id, call.tool, sent)

    def complete(self, run: Driver, worker: pm.MontySession, value: Any) -> Any:
        value = self.rebind(value)  # a handle an earlier cell sent, as its object
        self.save(worker, run.code, run.tools, run.inputs)
        return value

    def sent_inputs(self, inputs: Mapping[str, Any], converted: Mapping[str, Any]) -> None:
        """Note the handles among the cell's inputs (as `to_sandbox` converted them); a later
        cell gets them back. ``inputs`` are also what this cell's stand-ins bind to by name."""
        if self._rebinder is not None:
            self._rebinder.given = inputs
        self._keep(input_handles(converted))

    def sent_result(self, call_id: int, tool: str, converted: Any) -> None:
        """Note the handles in a tool's result (as converted)."""
        self._keep(result_handles(call_id, tool, converted))

    def _keep(self, found: Any) -> None:
        for handle, origin in found:
            key = str(handle.id)
            self._origins[key] = origin
            self._objects[key] = handle.value

    def rebind(self, value: Any) -> Any:
        """``value`` (a tool's arguments, the cell's value) with each handle an earlier cell
        sent in as its object; `OrchestrationError` for one lost in a kernel restart."""
        return value if self._rebinder is None else self._rebinder.rebind(value)

    def save(
        self,
        session: pm.MontySession,
        code: str,
        tools: Mapping[str, Tool],
        inputs: Mapping[str, Any],
    ) -> None:
        """Keep the session as the completed cell left it: its dump, the declarations the
        next cell's type check starts from, and its variables' types."""
        dump = session.dump()
        previous, _ = _context(self.state.dump, self.name) if self.state else ("", "")
        rebound = _bound(code)
        # definitions (def, class, import) by the names they bind; a later one replaces
        kept: dict[str, tuple[ast.stmt, str]] = {}
        variables = set(inputs) | rebound
        for statement, source in _sources(previous):
            names = _names(statement)
            if isinstance(statement, ast.AnnAssign) or names & rebound:
                variables |= names  # a variable's declaration is redone below
            else:
                kept |= dict.fromkeys(names, (statement, source))
        for statement, source in _sources(code):
            if isinstance(statement, _DEFINITIONS):
                kept |= dict.fromkeys(_names(statement), (statement, source))
        types = _types(session, [*kept, *sorted(variables - set(kept))])
        classes = {n for n, (statement, _) in kept.items() if isinstance(statement, ast.ClassDef)}
        sources = dict.fromkeys(src for n, (_, src) in kept.items() if n in types)  # in order
        imports = "".join(
            f"{src}\n"
            for n, (st, src) in kept.items()
            if isinstance(st, ast.Import | ast.ImportFrom)
        )
        declared = [f"{n}: {_annotation(t, classes)}" for n, t in types.items() if n not in kept]
        context = "".join(f"{line}\n" for line in [*sources, *declared])
        # the session's handles and this cell's (`load` is skipped by a restored run)
        origins = {**_origins(previous), **self._origins}
        objects = {**(self.state.objects if self.state else {}), **self._objects}
        held = {k: o for k, o in origins.items() if uuid.UUID(k).bytes in dump}
        if held:
            context += f"{_HANDLES}{json.dumps(held)}\n"
        dump = _replace(dump, _TYPE_CHECK, _cbor.encode(_check_state(context, imports)))
        objects = {k: objects[k] for k in held if k in objects}
        state = SessionState(dump, types, objects)
        self.state = state
        self._owner.keep(self.scope, self.name, state)
        if self._store is not None and in_dump(state.dump, known()):
            # A secret a sandbox tool returned stays off disk (`_scrub`): this kernel keeps
            # the state, a new kernel finds none rather than an older one.
            self._store.drop_session(self.scope, self.name)
        elif self._store is not None:
            self._store.save_session(self.scope, self.name, state.dump, state.names)


def _check_state(committed: str, imports: str) -> dict[str, Any]:
    """Monty's type-check state with ``committed`` as what the checker knows (the session's
    declarations, then the cell's stubs) and ``imports`` as the modules it imported."""
    return {
        "committed_stubs": committed,
        "pending_snippet": None,
        "config": {"format": "Json", "color": False},  # the driver's type_check_format
        "committed_imports": imports,
        "pending_imports": "",
        "asked_modules": [],
    }


def _context(dump: bytes, name: str) -> tuple[str, str]:
    """The session's declarations and imports, as `save` left them in the dump."""
    if not dump.startswith(_FORMAT):
        raise OrchestrationError(
            f"session {name!r} was saved by another version of pydantic-monty and cannot be "
            f"loaded: drop it with Store.drop_session (its scope, {name!r}) and rebuild it"
        )
    start, _ = _cbor.span(dump, len(_FORMAT), _TYPE_CHECK)
    if dump[start] == 0xF6:  # null: a dump `save` never wrote
        return "", ""
    committed = _cbor.decode_text(dump, _cbor.span(dump, start, ("committed_stubs",))[0]) or ""
    imports = _cbor.decode_text(dump, _cbor.span(dump, start, ("committed_imports",))[0]) or ""
    return committed, imports


def _origins(context: str) -> dict[str, Origin]:
    """The handles' origins `save` wrote into the session's declarations, by uuid."""
    start = context.rfind(_HANDLES)
    if start < 0:
        return {}
    line = context[start + len(_HANDLES) :].partition("\n")[0]
    found = json.loads(line)
    return dict(found) if isinstance(found, dict) else {}


def _loosened(context: str, rebound: set[str]) -> str:
    """The session's declarations for a cell that binds ``rebound``: those names are ``Any``
    to the checker, so the cell may give them a value of another type (``n = 1`` then
    ``n = "one"``, a function redefined), as any notebook cell may."""
    out = []
    for statement, source in _sources(context):
        names = _names(statement)
        if names & rebound:
            out += [f"{n}: Any" for n in sorted(names)]
        else:
            out.append(source)
    return "".join(f"{line}\n" for line in out)


def _annotation(type_name: str, classes: set[str]) -> str:
    """What the checker is told a variable holds: its type for plain data and the session's
    own classes, a callable for functions, else ``Any``."""
    if type_name in _DATA or type_name in classes:
        return type_name
    if type_name == "NoneType":
        return "None"
    if type_name in ("function", "builtin_function_or_method"):
        return "Callable[..., Any]"
    return "Any"


def with_limits(dump: bytes, limits: Limits) -> bytes:
    """A session dump, or a snapshot stopped at a call, with ``limits`` in place of the
    limits it was dumped with (Monty restores a dump's own); `OrchestrationError` for a dump
    whose format this code does not know."""
    if not dump.startswith(_FORMAT):
        raise OrchestrationError(
            "the saved state was dumped by another version of pydantic-monty and cannot be "
            "loaded: run the cell again from the start"
        )
    try:
        start, end = _limits(dump)
    except (KeyError, ValueError, IndexError) as error:
        raise OrchestrationError(
            f"the saved state has no limits where this pydantic-monty's dumps keep them "
            f"({error!r}): run the cell again from the start"
        ) from None
    old = _cbor.decode_simple_map(dump, start)
    seconds, fraction = divmod(limits.timeout, 1)
    new = {
        **old,
        "max_feed_duration": {"secs": int(seconds), "nanos": int(fraction * 1e9)},
        "max_memory": limits.max_memory * 2**20,
        "max_suspensions": 2 * limits.max_calls + 1000,  # as the driver's checkout
        "max_recursion_depth": limits.max_stack_depth,
    }
    return dump[:start] + _cbor.encode(new) + dump[end:]


def _limits(dump: bytes) -> tuple[int, int]:
    """Where the dump's limits are. They come after the heap, which may be megabytes of
    items: walking to them costs a second per 100,000 values. So we look for them from the
    end and accept a place only if exactly what a session dump (or a snapshot) holds after
    them follows, to the last byte (a look-alike inside a value cannot be followed by that);
    else we walk."""
    state = _cbor.find(dump, len(_FORMAT), ("state",))
    idle = _cbor.first_key(dump, state) == "Idle"
    after, path = (_AFTER, _LIMITS) if idle else (_SNAPSHOT_AFTER, _SNAPSHOT_LIMITS)
    end = len(dump)
    while (found := dump.rfind(_TRACKER, len(_FORMAT), end)) >= 0:
        start = found + len(_TRACKER)
        try:
            stop = _cbor.skip(dump, start)
            if _cbor.keys_follow(dump, stop, after) == len(dump):
                return start, stop
        except (ValueError, IndexError):
            pass
        end = found
    return _cbor.span(dump, len(_FORMAT), path)


def _replace(dump: bytes, path: tuple[str, ...], encoded: bytes) -> bytes:
    start, end = _cbor.span(dump, len(_FORMAT), path)
    return dump[:start] + encoded + dump[end:]


def _sources(code: str) -> list[tuple[ast.stmt, str]]:
    """Each top-level statement of ``code`` with its source."""
    return [
        (statement, ast.get_source_segment(code, statement) or ast.unparse(statement))
        for statement in statements(code)
    ]


def _names(statement: ast.stmt) -> set[str]:
    """The names a top-level statement may bind (a branch not taken may skip some)."""
    if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return {statement.name}
    if isinstance(statement, ast.Import | ast.ImportFrom):
        return {(a.asname or a.name).split(".")[0] for a in statement.names if a.name != "*"}
    names = set()
    for node in ast.walk(statement):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
    return names


def _bound(code: str) -> set[str]:
    """The names the top level of ``code`` may bind."""
    return {name for statement in statements(code) for name in _names(statement)}


def _types(session: pm.MontySession, names: list[str]) -> dict[str, str]:
    """The type name of each of ``names`` the session holds, read by one more feed after the
    dump was taken (so it leaves no trace in the session)."""
    if not names:
        return {}
    pairs = ", ".join(f"({n!r}, lambda: {n})" for n in names)
    code = (
        f"{_NAMES} = {{}}\n"
        f"for {_NAMES}_n, {_NAMES}_get in ({pairs},):\n"
        "    try:\n"
        f"        {_NAMES}[{_NAMES}_n] = type({_NAMES}_get()).__name__\n"
        "    except Exception:\n"
        "        pass\n"
        f"{_NAMES}"
    )
    try:
        found = session.feed_run(code, skip_type_check=True)
    except pm.MontyError:  # listing is a convenience: the session itself is kept
        return {}
    return dict(found) if isinstance(found, dict) else {}

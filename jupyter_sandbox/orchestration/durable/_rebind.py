"""Opaque handles across a restart: each one a durable run sends into Monty is named, so that a
restored run can bind it again.

Monty keeps a host object in a snapshot only as a reference, the uuid of the
`pydantic_monty.ClassInstance` that carried it in. After ``load_snapshot`` the object is gone,
and the sandbox's reference to it reaches the host as a `pydantic_monty.MontyClassProxy` with
that same ``id`` (measured on pydantic-monty 1.4.0;
`tests/orchestration/durable/test_handles.py` checks it).
So a durable run records, for each handle it sends in, its uuid and where it came from (its
*origin*), in the store with the call records:

- **an input**: the input's name (the notebook variable), the path inside it when the handle
  sat in a container input (``frames[0]``), and its type. On restore it is bound again from
  the input of that name given to the resumed run (``--resume`` with ``--in df``, or
  ``resume_run(..., inputs={"df": df})``), which must have the same type.
- **a tool's result**: the call's number and tool. That object cannot be had again: a call
  that completed is not made again after a restore (that is what a durable run promises), so
  a restored run that hands it to a tool fails with `StoreError` naming the call, and says
  how to go on (fork the run at that call, giving the object as its result).

Each input a restored run's handles came from is checked before the run is taken up (given,
of the same type, with the item at the path), so a run that lacks one is left as it was: a
paused run stays paused, to be approved again once the variable is defined. The objects are
looked up when the code hands a handle to a tool (or returns it).

A ``--session`` cell meets the same stand-ins: a handle an earlier cell of the session sent in
comes back from the session's dump. `SessionRebinder` binds it to the object itself while the
kernel that sent it lives (``objects``, kept by `_sessions`), else by origin as above, and says
what to do in a session's words (`OrchestrationError`, no run to fork).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from typing import Any

import pydantic_monty as pm

from ..._shared._errors import OrchestrationError, SandboxError, StoreError
from .._values import DEPTH_CEILING, HandleMarker

Origin = dict[str, Any]
"""Where a handle came from, as the store keeps it (builtin data only): ``type`` always, then
``input`` and ``path`` for an input, or ``call`` and ``tool`` for a tool's result."""
Path = tuple[str | int, ...]


def statements(code: str) -> list[ast.stmt]:
    """Top-level statements of ``code`` (top-level ``await`` allowed, as in a cell); none when
    it does not parse."""
    try:
        tree = compile(code, "<cell>", "exec", ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    except SyntaxError:
        return []
    assert isinstance(tree, ast.Module)
    return tree.body


def defined_classes(*sources: str) -> frozenset[str]:
    """The classes ``sources`` define, at any depth (`Rebinder.classes`). Parsed, not matched
    by pattern: ``class`` inside a string or a comment defines nothing."""
    body = [statement for code in sources for statement in statements(code)]
    return frozenset(
        node.name for node in ast.walk(ast.Module(body, [])) if isinstance(node, ast.ClassDef)
    )


def type_of(value: object) -> str:
    """The name a handle's type is kept under (``module.QualName``, never a repr)."""
    kind = type(value)
    return f"{kind.__module__}.{kind.__qualname__}"


def sent(converted: Any) -> Iterator[tuple[Path, pm.ClassInstance]]:
    """Each handle in a value as `_values.to_sandbox` converted it, with its path: the keys
    and indexes of the dicts, lists and tuples it sits in (`to_sandbox` makes nothing else a
    container). A container shared in several places is walked once."""
    seen: set[int] = set()
    stack: list[tuple[Path, Any]] = [((), converted)]
    while stack:
        path, item = stack.pop()
        kind = type(item)
        if kind is pm.ClassInstance:
            yield path, item
        elif (kind is dict or kind is list or kind is tuple) and len(path) <= DEPTH_CEILING:
            if id(item) in seen:
                continue
            seen.add(id(item))
            pairs = item.items() if kind is dict else enumerate(item)
            stack.extend(((*path, key), child) for key, child in pairs)


def input_handles(converted: Mapping[str, Any]) -> Iterator[tuple[pm.ClassInstance, Origin]]:
    """The handles among a run's inputs (as converted), with their origins."""
    for name, value in converted.items():
        for path, handle in sent(value):
            yield handle, {"type": type_of(handle.value), "input": name, "path": list(path)}


def result_handles(
    call_id: int, tool: str, converted: Any
) -> Iterator[tuple[pm.ClassInstance, Origin]]:
    """The handles in a call's result (as converted), with their origins: the call is named
    by its number in the trace (``#``, Monty's call id), which `fork_run` takes."""
    for _, handle in sent(converted):
        yield handle, {"type": type_of(handle.value), "call": call_id, "tool": tool}


def label(origin: Origin) -> str:
    """An input's name as the notebook writes it, with the path inside it (``frames[0]``)."""
    return str(origin["input"]) + "".join(f"[{key!r}]" for key in origin["path"])


_ADVICE = {
    "with resume=False": ("resume", "with resume=False"),
    "with inputs=": ("inputs", "inputs="),
}
"""The Python advice this module's refusals end with -> the parameter it names and its hint."""


class Rebinder:
    """Puts the objects back into the arguments a restored run's code passes a tool: each
    `MontyClassProxy` (and each checkpointed argument kept as a `HandleMarker` with an
    ``id``) whose uuid has an origin becomes the object it names now."""

    error: type[SandboxError] = StoreError

    def __init__(
        self,
        run_id: str,
        origins: Mapping[str, Origin],
        given: Mapping[str, Any],
        classes: frozenset[str],
        objects: Mapping[str, Any] | None = None,
    ) -> None:
        self.run_id = run_id
        self.origins = origins
        self.given = given
        """The inputs given to the resumed run, by name (the notebook's variables)."""
        self.classes = classes
        """Classes the code defines: their instances come back as stand-ins in any run, so
        such a stand-in is no lost host object; it is passed on as it is."""
        self.objects = objects or {}
        """Objects still alive in this process, by uuid: bound before any origin is asked."""
        self.bound: dict[int, tuple[str, Any]] = {}
        """The uuid each object bound so far was bound for, with the object, by ``id`` (what
        a paused call's record names: which notebook variable a handle is bound to)."""

    def check(self) -> None:
        """`StoreError` unless each input the run's handles came from is given, as it was."""
        for uuid, origin in self.origins.items():
            if "input" in origin and uuid not in self.objects:
                self._input(origin)

    def rebind(self, value: Any, depth: int = 0) -> Any:
        """``value`` with each handle it holds bound again (the same object when it holds
        none); `StoreError` when one cannot be."""
        kind = type(value)
        if kind is pm.MontyClassProxy:
            uuid = str(value.id)
            if uuid in self.objects:
                return self.objects[uuid]
            return value if value.name in self.classes else self._bound(uuid, value.name)
        if kind is HandleMarker:
            uuid = value.get("id")
            if uuid in self.objects:
                return self.objects[uuid]
            return self._bound(uuid, value["handle"])
        if depth >= DEPTH_CEILING or not (kind is tuple or kind is list or kind is dict):
            return value
        if kind is dict:
            pairs = {k: self.rebind(v, depth + 1) for k, v in value.items()}
            changed = any(pairs[k] is not v for k, v in value.items())
            return pairs if changed else value
        items = [self.rebind(item, depth + 1) for item in value]
        changed = any(new is not old for new, old in zip(items, value, strict=True))
        return kind(items) if changed else value

    def _bound(self, uuid: str | None, kind: str) -> Any:
        origin = self.origins.get(uuid) if uuid is not None else None
        if origin is None:
            raise self.error(self._lost(kind))
        if "call" in origin:
            raise self._refusal(self._from_call(origin))
        found = self._input(origin)
        if uuid is not None:
            self.bound[id(found)] = (uuid, found)
        return found

    def _input(self, origin: Origin) -> Any:
        name, wanted = str(origin["input"]), str(origin["type"])
        if name not in self.given:
            raise self._refusal(self._missing(name, wanted))
        value = self.given[name]
        try:
            for key in origin["path"]:
                value = value[key]
        except (LookupError, TypeError):
            found = "something without that item"
        else:
            if type_of(value) == wanted:
                return value
            found = f"a {type_of(value)}"
        raise self.error(self._wrong(label(origin), wanted, found))

    def _refusal(self, message: str) -> Exception:
        """``message`` as `error`, carrying the parameter its advice names (`_ADVICE`), so a
        magic can say its option instead (`SandboxError.hint`)."""
        for phrase, (parameter, hint) in _ADVICE.items():
            if phrase in message:
                return self.error(message, parameter=parameter, hint=hint)
        return self.error(message)

    # what to say: a durable run's words; a session's are `SessionRebinder`'s

    def _lost(self, kind: str) -> str:
        return (
            f"run {self.run_id} passes a tool an object ({kind}) it held before it was "
            "restored, and the store does not know where it came from (objects live only "
            "in the process that made them): run the cell again from the start"
        )

    def _from_call(self, origin: Origin) -> str:
        number, tool = origin["call"], origin["tool"]
        return (
            f"run {self.run_id} needs the object ({origin['type']}) that call #{number} "
            f"({tool}()) returned, which did not survive the restart and is not made "
            f"again: fork_run({self.run_id!r}, {number}, value=...) continues from that "
            "call with an object you give, or run the code again with resume=False"
        )

    def _missing(self, name: str, kind: str) -> str:
        return missing_input(self.run_id, name, kind)

    def _wrong(self, name: str, kind: str, found: str) -> str:
        return wrong_input(self.run_id, name, kind, found)


class SessionRebinder(Rebinder):
    """The same for a ``--session`` cell: the objects the session's earlier cells sent into
    Monty are bound while this kernel lives (``objects``); after a restart, a handle that came
    from an input is bound by name to the input of that name this cell is given, and any other
    is refused in one `OrchestrationError` line naming where it came from."""

    error = OrchestrationError

    def _lost(self, kind: str) -> str:
        return (
            f"session {self.run_id!r} passes a tool an object ({kind}) an earlier cell held, "
            "which did not survive the kernel restart: make it again in this cell"
        )

    def _from_call(self, origin: Origin) -> str:
        return (
            f"session {self.run_id!r} passes a tool the object ({origin['type']}) that "
            f"{origin['tool']}() returned in an earlier cell, which did not survive the "
            "kernel restart: call the tool again in this cell"
        )

    def _missing(self, name: str, kind: str) -> str:
        return (
            f"session {self.run_id!r} passes a tool notebook variable `{name}` (a {kind} "
            "handle an earlier cell was given), which did not survive the kernel restart: "
            f"give {name!r} to this cell again with inputs="
        )

    def _wrong(self, name: str, kind: str, found: str) -> str:
        return (
            f"session {self.run_id!r} needs `{name}` to be a {kind}, as an earlier cell was "
            f"given it, but it is {found} now: give it a {kind}"
        )


def missing_input(run_id: str, name: str, kind: str) -> str:
    """What to say when a run needs an input that is not given (an object: not stored)."""
    return (
        f"run {run_id} needs notebook variable `{name}` (a {kind} handle) to continue: "
        f"define it and run again (from Python: inputs={{{name!r}: ...}})"
    )


def wrong_input(run_id: str, name: str, kind: str, found: str) -> str:
    """What to say when an input given again is not of the type the run was given."""
    return (
        f"run {run_id} needs `{name}` to be a {kind}, as when the run began, but it is "
        f"{found} now: give it a {kind} and run again"
    )


def stored_origins(records: Mapping[int, Mapping[str, Any]]) -> dict[str, Origin]:
    """The origins a stored run's records keep (each record's ``handles``), by uuid."""
    found: dict[str, Origin] = {}
    for record in records.values():
        handles = record.get("handles")
        if handles:
            found.update(handles)
    return found

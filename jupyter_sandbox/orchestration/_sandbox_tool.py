"""A sandbox used as a tool: orchestration code calls it like a function, and it runs in its
container with those inputs.

This is why the two engines belong together: model-written control flow runs in Monty, heavy
work runs in containers. The call is async on the host (a run takes seconds), so
``asyncio.gather`` over several sandbox calls runs them side by side, up to ``concurrency``
containers at once; the container run's record is kept inside the call in the trace. When the
orchestration stops (an interrupt, a limit), its pending calls are cancelled, and cancelling a
run stops and removes its container.
"""

from __future__ import annotations

import asyncio
import datetime
import inspect
import os
import threading
import time
import weakref
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

from .._shared import _defaults as default
from .._shared import _otel
from .._shared._errors import ContainerError, SandboxConfigError
from .._shared._events import ToolCall
from .._shared._scrub import note
from .._shared._threads import in_thread
from ..records import RunRecord
from ._tool import Approve, Tool

DEFAULT_CONCURRENCY = default.TOOL_CONCURRENCY
"""Containers one sandbox tool runs at once when the code fans out."""


class SandboxLike(Protocol):
    """What a sandbox offers (`jupyter_sandbox.sandbox.Sandbox`): kept structural so this
    engine does not import the Docker side until a sandbox is actually made a tool."""

    name: str
    inputs: Mapping[str, str | None]
    outputs: Mapping[str, str | None]
    secrets: Sequence[str]

    def execute(self, inputs: Mapping[str, Any], *, cancel: threading.Event) -> Any: ...


def is_sandbox(obj: object) -> bool:
    return all(hasattr(obj, a) for a in ("execute", "execute_async", "inputs", "outputs"))


class SandboxTool(Tool):
    """A `Tool` whose calls are container runs."""

    def __init__(
        self,
        sandbox: SandboxLike,
        name: str | None = None,
        *,
        concurrency: int | None = None,
        approve: Approve = False,
    ) -> None:
        limit = DEFAULT_CONCURRENCY if concurrency is None else concurrency
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise SandboxConfigError(f"concurrency must be a positive integer, got {limit!r}")
        self.sandbox = sandbox
        self._limit = limit
        # One semaphore per event loop: calls come from the background tool loop, or from the
        # caller's own loop with orchestrate_async, and an asyncio semaphore serves one loop.
        self._slots: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = (
            weakref.WeakKeyDictionary()
        )
        signature = _signature(sandbox)

        async def run(*args: Any, **kwargs: Any) -> Any:
            return await self._run(None, args, kwargs)

        # What stubs and help() read: the sandbox's declared inputs and outputs.
        run.__name__ = run.__qualname__ = name or sandbox.name.replace("-", "_")
        run.__doc__ = f"Runs the sandbox {sandbox.name!r} in a container."
        run.__signature__ = signature  # type: ignore[attr-defined]
        run.__annotations__ = {p.name: p.annotation for p in signature.parameters.values()}
        run.__annotations__["return"] = signature.return_annotation
        super().__init__(run, name, approve=approve)

    def invoke(self, call: ToolCall, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        # traced: the container run's spans nest under the call's (`_otel`)
        return _otel.within(call, self._run, call, args, kwargs)

    async def _run(
        self, call: ToolCall | None, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        inputs = bind_inputs(self.name, list(self.sandbox.inputs), args, kwargs)
        if call is not None:  # from orchestration code (the notebook may name its own paths)
            _check_paths(self.name, self.sandbox.inputs, inputs)
        loop = asyncio.get_running_loop()
        slots = self._slots.get(loop)
        if slots is None:
            slots = self._slots[loop] = asyncio.Semaphore(self._limit)
        await self._take_slot(slots, call)
        try:
            run = await self._execute(call, inputs)
        finally:
            slots.release()
        _keep(call, run.to_record())
        if call is not None and any(kind == "outputs" for kind, _ in run.hidden):
            # The code gets the real value; what the orchestration shows masks it (`_scrub`).
            note(secret_values([self]))
        return run.value

    @staticmethod
    async def _take_slot(slots: asyncio.Semaphore, call: ToolCall | None) -> None:
        """Wait for one of the tool's ``concurrency`` slots. A call that waits is ``queued``
        meanwhile and records how long it waited: that time is not the container's, and the
        trace counts as running only the calls that hold a slot."""
        if call is None or not slots.locked():
            await slots.acquire()
            return
        call.queued = None
        try:
            await slots.acquire()
        finally:  # cancelled while waiting too: it waited that long
            call.queued = time.perf_counter() - call.origin - call.start

    async def _execute(self, call: ToolCall | None, inputs: dict[str, Any]) -> Any:
        """One container run on a worker thread, its record kept in ``call`` whatever the
        outcome: a failure's, and a cancelled run's (the orchestration stopped: the container
        is stopped and removed before the cancellation goes on). ``execute_async`` would drop
        the cancelled run's record."""
        cancel = threading.Event()
        work = asyncio.ensure_future(in_thread(self.sandbox.execute, inputs, cancel=cancel))
        try:
            return await asyncio.shield(work)
        except asyncio.CancelledError:
            cancel.set()
            try:
                _keep(call, (await work).to_record())  # it finished as it was cancelled
            except ContainerError as err:  # SandboxCancelled, once the container is removed
                _keep(call, err.record)
            raise
        except ContainerError as err:
            _keep(call, err.record)
            raise


def secret_values(tools: Iterable[Tool]) -> tuple[str, ...]:
    """The values of the secrets the sandbox tools among ``tools`` pass their containers, read
    from the environment as the sandbox reads them for a run."""
    return tuple(
        value
        for tool in tools
        if isinstance(tool, SandboxTool)
        for name in tool.sandbox.secrets
        if (value := os.environ.get(name))
    )


def _keep(call: ToolCall | None, record: RunRecord | None) -> None:
    """Nest a container run's record in the call that ran it (the trace shows it there)."""
    if call is not None and record is not None:
        call.children.append(record.copy())


def bind_inputs(
    name: str, declared: Sequence[str], args: tuple[Any, ...], kwargs: Mapping[str, Any]
) -> dict[str, Any]:
    """A sandbox call's arguments as its inputs: positional ones in declared order, then by
    name. A call that does not fit is one `TypeError` line naming the inputs, the same from
    orchestration code and from the notebook (``inspect``'s "too many positional arguments"
    would not say which inputs there are)."""
    inputs = dict(zip(declared, args, strict=False))
    problems = [f"{len(args)} given by position"] if len(args) > len(declared) else []
    problems += [f"{key!r} given twice" for key in kwargs if key in inputs]
    problems += [f"no input named {key!r}" for key in kwargs if key not in declared]
    inputs.update(kwargs)
    problems += [f"{key!r} missing" for key in declared if key not in inputs]
    if problems:
        takes = ", ".join(declared) if declared else "no inputs"
        raise TypeError(
            f"{name}() takes {takes} (by position in that order, or by name): "
            + "; ".join(problems)
        )
    return inputs


def _check_paths(name: str, declared: Mapping[str, str | None], inputs: Mapping[str, Any]) -> None:
    """A `File`/`Dir` input takes a `File`/`Dir` the host made (a handle the code got from a
    tool or an input), never a path the code wrote: ``create()`` reads a ``str`` there as a
    host path, so ``await cat(json.loads('"/etc/shadow"'))`` (``Any`` passes the type check)
    handed orchestration code every host file the kernel can read. A `TypeError` line, as for
    any call that does not fit."""
    from ..sandbox import Dir, File  # the Docker side: only sandbox tools get here

    for key, tag in declared.items():
        kind = File if tag == "file" else Dir if tag == "dir" else None
        if kind is not None and not isinstance(inputs[key], kind):
            raise TypeError(
                f"{name}() input {key!r} takes a {kind.__name__} from a tool or an input, not a "
                f"{type(inputs[key]).__name__}: orchestration code cannot name host paths"
            )


def _python_type(tag: str | None) -> Any:
    """The annotation the type checker sees for a sandbox type tag."""
    if tag in ("file", "dir"):
        from ..sandbox import Dir, File  # the Docker side, imported only for sandbox tools

        return File if tag == "file" else Dir
    simple: dict[str | None, Any] = {
        "int": int,
        "float": float,
        "str": str,
        "bool": bool,
        "bytes": bytes,
        "none": None,
        "datetime": datetime.datetime,
        "date": datetime.date,
        "timedelta": datetime.timedelta,
    }
    return simple.get(tag, Any)


def _signature(sandbox: SandboxLike) -> inspect.Signature:
    params = [
        inspect.Parameter(
            name, inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=_python_type(tag)
        )
        for name, tag in sandbox.inputs.items()
    ]
    outs = tuple(_python_type(tag) for tag in sandbox.outputs.values())
    returns: Any = (
        None if not outs else outs[0] if len(outs) == 1 else tuple.__class_getitem__(outs)
    )
    return inspect.Signature(params, return_annotation=returns)

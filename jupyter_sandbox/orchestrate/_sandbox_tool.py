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
import weakref
from collections.abc import Awaitable, Mapping
from typing import Any, Protocol

from .._errors import ContainerError, SandboxConfigError
from .._events import ToolCall
from ._tools import Tool

DEFAULT_CONCURRENCY = 4
"""Containers one sandbox tool runs at once when the code fans out."""


class SandboxLike(Protocol):
    """What a sandbox offers (`jupyter_sandbox.sandbox.Sandbox`): kept structural so this
    engine does not import the Docker side until a sandbox is actually made a tool."""

    name: str
    inputs: Mapping[str, str | None]
    outputs: Mapping[str, str | None]

    def execute_async(self, inputs: Mapping[str, Any]) -> Awaitable[Any]: ...


def is_sandbox(obj: object) -> bool:
    return all(hasattr(obj, a) for a in ("execute", "execute_async", "inputs", "outputs"))


class SandboxTool(Tool):
    """A `Tool` whose calls are container runs."""

    def __init__(
        self, sandbox: SandboxLike, name: str | None = None, *, concurrency: int | None = None
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
        super().__init__(run, name)

    def invoke(self, call: ToolCall, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        return self._run(call, args, kwargs)

    async def _run(
        self, call: ToolCall | None, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        signature = self.signature
        assert signature is not None
        try:
            inputs = dict(signature.bind(*args, **kwargs).arguments)
        except TypeError as exc:
            raise TypeError(f"{self.name}(): {exc}") from None

        loop = asyncio.get_running_loop()
        slots = self._slots.get(loop)
        if slots is None:
            slots = self._slots[loop] = asyncio.Semaphore(self._limit)
        async with slots:
            try:
                run = await self.sandbox.execute_async(inputs)
            except ContainerError as err:
                if call is not None and err.record is not None:
                    call.children.append(dict(err.record))
                raise
        if call is not None:
            call.children.append(run.to_record())
        return run.value


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

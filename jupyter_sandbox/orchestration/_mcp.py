"""An MCP server's tools as tools: ``tools_from_mcp("python my_server.py")`` or
``tools_from_mcp(url=...)`` (stdio or streamable HTTP, with the official ``mcp`` SDK, an
optional extra imported only here).

Each of the server's tools becomes an async `MCPTool`: its stub is written from the tool's
JSON schemas (`_json_schema`), so the type check covers its arguments and its result; its
calls are traced, cached, journaled and gated (``approve=``) like any ``@tool``'s. The
connection lives on one daemon thread's event loop shared by every server (an MCP session is
bound to the loop that opened it, while calls come from the tool loop of a sync run or from
the caller's loop of `orchestrate_async`); a call is a future on that loop, so cancelling the
call (a stopped run) cancels the request. A server that dies ends its connection: the call in
flight and every later one raise ``ConnectionError``, and its process is reaped.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import inspect
import json
import keyword
import os
import re
import shlex
import sys
import threading
import weakref
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TextIO

from .._errors import SandboxConfigError
from . import _registry
from ._json_schema import UNSET, annotation, signature, wrapped_result
from ._tool import Approve, Tool

if TYPE_CHECKING:
    import mcp
    import mcp.types

CONNECT_SECONDS = 30.0
"""How long `tools_from_mcp` waits for a server to start and list its tools."""
_CLOSE_SECONDS = 10.0
"""How long closing waits for the SDK to stop a server process (it terminates, then kills)."""
_EXTRA = "pip install 'jupyter-sandbox[mcp]'"


class _Loop:
    """The MCP connections' event loop, on a daemon thread started when first needed."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None

    def get(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                threading.Thread(target=loop.run_forever, name="mcp-loop", daemon=True).start()
                self._loop = loop
            return self._loop


_loop = _Loop()
_open: weakref.WeakSet[_Connection] = weakref.WeakSet()
"""Connections not closed yet: `atexit` closes them, so no server process outlives Python."""


class _Connection:
    """One MCP client session, held open by a task on the MCP loop until `close`."""

    def __init__(self, label: str, server: Any) -> None:
        self.label = label
        self._server = server
        self._client: mcp.Client | None = None
        self._closing: asyncio.Event | None = None
        self._held: concurrent.futures.Future[None] | None = None
        self._ended = threading.Event()
        """Set once the session is closed and a stdio server's process stopped."""
        self.gone: str | None = None
        """Why calls fail at once: the server died, or the connection was closed."""

    def open(self, timeout: float) -> list[mcp.types.Tool]:
        """Start the server (or reach it) and list its tools, or raise `SandboxConfigError`."""
        listed: concurrent.futures.Future[list[mcp.types.Tool]] = concurrent.futures.Future()
        self._held = asyncio.run_coroutine_threadsafe(self._hold(listed), _loop.get())
        try:
            tools = listed.result(timeout)
        except concurrent.futures.TimeoutError:
            self.close()
            raise SandboxConfigError(
                f"MCP server {self.label}: no tool list after {timeout:g} s; is it an MCP server?"
            ) from None
        except Exception as exc:
            self.close()
            raise SandboxConfigError(
                f"MCP server {self.label} could not start: {_cause(exc)}"
            ) from None
        _open.add(self)
        return tools

    async def _hold(self, listed: concurrent.futures.Future[list[mcp.types.Tool]]) -> None:
        from mcp import Client

        self._closing = asyncio.Event()
        try:
            async with Client(self._server) as client:
                tools, cursor = [], None
                while True:  # every page (a server may paginate its listing)
                    page = await client.list_tools(cursor=cursor)
                    tools += page.tools
                    cursor = page.next_cursor
                    if not cursor:
                        break
                self._client = client
                listed.set_result(tools)
                await self._closing.wait()
        except BaseException as exc:
            if not listed.done():
                listed.set_exception(exc)
            if not isinstance(exc, Exception):
                raise
        finally:
            self._client = None
            self.gone = self.gone or "the connection is closed"
            self._ended.set()

    async def call(self, name: str, arguments: dict[str, Any]) -> mcp.types.CallToolResult:
        """The server's answer to one call, awaited from any event loop."""
        client = self._client
        if client is None or self.gone:
            raise ConnectionError(f"MCP server {self.label}: {self.gone or 'not connected'}")
        future = asyncio.run_coroutine_threadsafe(client.call_tool(name, arguments), _loop.get())
        try:
            return await asyncio.wrap_future(future)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if _transport_lost(exc):
                self.gone = f"the server is gone ({_cause(exc)}); call tools_from_mcp again"
                self.close(wait=False)
                raise ConnectionError(f"MCP server {self.label}: {self.gone}") from None
            raise

    def close(self, *, wait: bool = True) -> None:
        """End the session; the SDK stops a stdio server's process (and reaps it). A
        connection still starting (a server that never answers) is cancelled."""
        self.gone = self.gone or "the connection is closed"
        _open.discard(self)
        held = self._held
        if held is None:
            return
        if self._client is None:
            held.cancel()
        elif self._closing is not None:
            _loop.get().call_soon_threadsafe(self._closing.set)
        if wait and self._closing is not None and not self._ended.wait(_CLOSE_SECONDS):
            held.cancel()


@atexit.register
def _close_all() -> None:
    for connection in list(_open):
        connection.close()


def _transport_lost(exc: BaseException) -> bool:
    """Whether ``exc`` says the connection broke (not that the tool or the request failed)."""
    from mcp import MCPError
    from mcp.types import CONNECTION_CLOSED

    if isinstance(exc, MCPError):
        return exc.code == CONNECTION_CLOSED
    return isinstance(exc, OSError) or type(exc).__module__.startswith(("httpx", "anyio"))


def _cause(exc: BaseException) -> str:
    """One line for an exception from the SDK or its transport (a group's first leaf)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


class MCPTool(Tool):
    """A `Tool` that calls one tool of an MCP server. Async: the code awaits it (and may
    ``gather`` several); its value is the tool's structured result as data, or its text."""

    def __init__(
        self,
        connection: _Connection,
        remote: mcp.types.Tool,
        name: str,
        *,
        approve: Approve = False,
    ) -> None:
        self.connection = connection
        self.remote_name = remote.name
        self.input_schema: dict[str, Any] = dict(remote.input_schema or {})
        self.output_schema: dict[str, Any] | None = remote.output_schema
        self._wrapped = wrapped_result(self.output_schema)
        params = signature(self.input_schema)
        returns = self._returns()
        if params is None:  # names Python cannot spell: any keywords, the server checks them
            kwargs = inspect.Parameter("arguments", inspect.Parameter.VAR_KEYWORD, annotation=Any)
            params = inspect.Signature([kwargs])
        self._params = params.replace(return_annotation=returns)

        async def call(*args: Any, **kwargs: Any) -> Any:
            return await self._call(args, kwargs)

        call.__name__ = call.__qualname__ = name
        call.__doc__ = remote.description or f"The tool {remote.name!r} of {connection.label}."
        call.__signature__ = self._params  # type: ignore[attr-defined]
        call.__annotations__ = {p.name: p.annotation for p in self._params.parameters.values()}
        call.__annotations__["return"] = returns
        super().__init__(call, name, approve=approve)

    def _returns(self) -> Any:
        schema = self.output_schema
        if schema is None:
            return Any
        if self._wrapped:
            return annotation(schema["properties"]["result"], schema)
        return annotation(schema)

    async def _call(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        try:
            bound = self._params.bind(*args, **kwargs)
        except TypeError as exc:
            raise TypeError(f"{self.name}(): {exc}") from None
        arguments: dict[str, Any] = {}
        for key, value in bound.arguments.items():
            if self._params.parameters[key].kind is inspect.Parameter.VAR_KEYWORD:
                arguments.update(value)
            elif value is not UNSET:
                arguments[key] = value
        _check_json(self.name, arguments)
        result = await self.connection.call(self.remote_name, arguments)
        return self._value(result)

    def _value(self, result: mcp.types.CallToolResult) -> Any:
        if result.is_error:
            raise RuntimeError(f"{self.name}() failed on {self.connection.label}: {_text(result)}")
        data = result.structured_content
        if data is not None:  # the SDK checked it against the output schema (or its absence)
            return data["result"] if self._wrapped and isinstance(data, dict) else data
        blocks = [b.text if b.type == "text" else b.model_dump(mode="json") for b in result.content]
        return blocks[0] if len(blocks) == 1 else blocks


def _text(result: mcp.types.CallToolResult) -> str:
    return " ".join(b.text for b in result.content if b.type == "text") or "(no message)"


def _check_json(name: str, arguments: Mapping[str, Any]) -> None:
    """An MCP call's arguments go out as JSON: anything else (a handle, a set) is refused
    here, in the caller's words, not deep in the SDK's serializer."""
    for key, value in arguments.items():
        try:
            json.dumps(value, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise TypeError(
                f"{name}() argument {key!r} is not JSON data ({type(value).__name__}): an MCP "
                f"tool takes str, int, float, bool, None, lists and dicts ({exc})"
            ) from None


class MCPTools(Mapping[str, MCPTool]):
    """The tools of one MCP server by name, as `tools_from_mcp` made them: pass it as
    ``tools=``, or use the registry it filled; `close` ends the connection (and a stdio
    server's process) and unregisters them. A context manager."""

    def __init__(self, connection: _Connection, tools: Mapping[str, MCPTool]) -> None:
        self.connection = connection
        self._tools = dict(tools)
        self.registered = False

    def __getitem__(self, name: str) -> MCPTool:
        return self._tools[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._tools)

    def __len__(self) -> int:
        return len(self._tools)

    def close(self) -> None:
        if self.registered:
            for name, tool in self._tools.items():
                if _registry.current().get(name) is tool:
                    _registry.current().unregister(name)
            self.registered = False
        self.connection.close()

    def __enter__(self) -> MCPTools:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = f" ({self.connection.gone})" if self.connection.gone else ""
        return f"<MCP tools of {self.connection.label}{state}: {', '.join(self._tools)}>"


def tools_from_mcp(
    command: str | Sequence[str] | None = None,
    *,
    url: str | None = None,
    headers: Mapping[str, str] | None = None,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
    approve: Approve | Mapping[str, Approve] = False,
    only: Iterable[str] | None = None,
    prefix: str = "",
    register: bool = True,
    timeout: float = CONNECT_SECONDS,
) -> MCPTools:
    """The tools of an MCP server, as tools orchestration code may call.

    ``command`` starts a server that speaks MCP over stdio (``"python my_server.py"``, split
    as a shell would, or a list of arguments; ``env`` and ``cwd`` for its process); ``url``
    reaches one over streamable HTTP (``headers`` sent with each request, e.g. a token).
    Each tool is an async function with the stub its JSON schemas declare, under its own
    name made a Python identifier (``prefix`` before it); ``only`` keeps the named ones.
    ``approve`` gates calls as ``@tool(approve=...)`` does, for every tool or per tool name
    (a mapping). ``register=True`` adds them to the notebook's tools (``%%orchestrate``
    without ``--tools`` sees them); `MCPTools.close` removes them again.

    A failed call raises inside the code, which may catch it: the tool's own error as
    ``RuntimeError``, a server that died as ``ConnectionError`` (its process is reaped), a
    result that breaks the tool's declared output schema as ``RuntimeError`` from the SDK's
    check. Needs the ``mcp`` extra (``pip install 'jupyter-sandbox[mcp]'``).
    """
    if (command is None) == (url is None):
        raise SandboxConfigError("tools_from_mcp() takes a server command or url=..., one of them")
    try:
        from mcp import StdioServerParameters, stdio_client
    except ImportError:
        raise SandboxConfigError(f"tools_from_mcp() needs the MCP SDK: {_EXTRA}") from None
    server: Any
    if command is not None:
        argv = shlex.split(command) if isinstance(command, str) else [str(a) for a in command]
        if not argv:
            raise SandboxConfigError("tools_from_mcp(): the server command is empty")
        server = stdio_client(
            StdioServerParameters(
                command=argv[0], args=argv[1:], env=dict(env) if env else None, cwd=cwd
            ),
            errlog=_errlog(),
        )
        label = repr(shlex.join(argv))
    else:
        assert url is not None
        if not re.match(r"https?://", url):
            raise SandboxConfigError(f"tools_from_mcp(url=...) takes an http(s) URL, got {url!r}")
        server = _http(url, headers)
        label = repr(url)
    connection = _Connection(label, server)
    listed = connection.open(timeout)
    wanted = None if only is None else set(only)
    tools: dict[str, MCPTool] = {}
    for remote in listed:
        if wanted is not None and remote.name not in wanted:
            continue
        name = _identifier(prefix + remote.name)
        gate = approve.get(remote.name, False) if isinstance(approve, Mapping) else approve
        tools[name] = MCPTool(connection, remote, name, approve=gate)
    made = MCPTools(connection, tools)
    if wanted is not None and (missing := wanted - {t.remote_name for t in tools.values()}):
        made.close()
        raise SandboxConfigError(
            f"MCP server {label} has no tool {', '.join(sorted(missing))}; it has "
            f"{', '.join(t.name for t in listed) or 'none'}"
        )
    if register:
        for tool in tools.values():
            _registry.current().register(tool)
        made.registered = True
    return made


@contextlib.asynccontextmanager
async def _http(url: str, headers: Mapping[str, str] | None) -> AsyncIterator[Any]:
    """The streamable HTTP transport, with ``headers`` on every request (its HTTP client
    closed with it: the SDK leaves a client it is given open)."""
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    timeout = httpx2.Timeout(30, read=300)  # the SDK's own: a response may stream for long
    async with (
        httpx2.AsyncClient(headers=dict(headers or {}), timeout=timeout) as client,
        streamable_http_client(url, http_client=client) as streams,
    ):
        yield streams


def _errlog() -> TextIO:
    """Where a stdio server's stderr goes: ours when it is a file, else the process's own (a
    kernel's ``sys.stderr`` is no file: the child cannot write to it)."""
    for stream in (sys.stderr, sys.__stderr__):
        try:
            if stream is not None and stream.fileno() >= 0:
                return stream
        except (AttributeError, OSError, ValueError):
            continue
    return open(os.devnull, "w")  # the child's, for its whole life


def _identifier(name: str) -> str:
    """An MCP tool name (``get-issue``, ``db.query``) as a Python name a stub can declare."""
    cleaned = re.sub(r"\W", "_", name).lstrip("_") or "tool"
    if cleaned[0].isdigit() or keyword.iskeyword(cleaned):
        cleaned = f"t_{cleaned}" if cleaned[0].isdigit() else f"{cleaned}_"
    return cleaned

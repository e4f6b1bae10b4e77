"""An MCP server's tools as tools: ``tools_from_mcp("python my_server.py")`` or
``tools_from_mcp(url=...)`` (stdio or streamable HTTP, with the official ``mcp`` SDK, an
optional extra imported only here).

Each of the server's tools becomes an async `MCPTool`: its stub is written from the tool's
JSON schemas (`_json_schema`), so the type check covers its arguments and its result; its
calls are traced, cached, journaled and gated (``approve=``) like any ``@tool``'s. The
connection lives on one daemon thread's event loop shared by every server (an MCP session is
bound to the loop that opened it, while calls come from the tool loop of a sync run or from
the caller's loop of `orchestrate_async`); a call is a future on that loop, so cancelling the
call (a stopped run) cancels the request, and a call that outlives ``call_timeout`` fails.
A server that dies ends its connection: the call in flight and every later one raise
``ConnectionError``, and its process is reaped. A stdio server runs in a session of its own
(the SDK starts it so), and on every way out, a close, a failed or interrupted connect, a
death, that whole process group is killed: what the server started dies with it.

A server is untrusted: its tool names, schemas and descriptions become stubs and a model's
prompt. Names are made Python names as the code spells them (NFKC-normalised, off the
builtins) and two tools that become one name are refused; schemas are typed within a budget;
the server is named in the tools' text by its program name (or ``name=``), never by its
command line, whose arguments may hold a token.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import difflib
import inspect
import json
import keyword
import math
import os
import re
import secrets
import shlex
import signal
import sys
import threading
import unicodedata
import urllib.parse
import weakref
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from .._shared import _defaults as default
from .._shared._errors import SandboxConfigError
from . import _registry
from ._json_schema import UNSET, Budget, annotation, signature, wrapped_result
from ._stubs import SHADOWING
from ._tool import Approve, Tool

if TYPE_CHECKING:
    import mcp
    import mcp.types

_CLOSE_SECONDS = 10.0
"""How long closing waits for the SDK to stop a server process (it terminates, then kills)."""
_EXTRA = "pip install 'jupyter-sandbox[mcp]'"
_HTTP_READ_SECONDS = 300.0
"""The SDK's own read timeout for streamable HTTP (a response may stream for long): the least
an HTTP read waits, a longer ``call_timeout`` raising it."""
_MARKER = "JUPYTER_SANDBOX_MCP_SERVER"
"""An environment variable a stdio server is started with, a token of its connection, by
which the connection finds the server's process among its own children."""


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

    def __init__(self, label: str, server: Any, call_timeout: float) -> None:
        self.label = label
        self._server = server
        self.call_timeout = call_timeout
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
        except BaseException:  # Ctrl-C while it starts: stop it starting, and the server
            self.close()
            raise
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
        """The server's answer to one call, awaited from any event loop; ``TimeoutError``
        after ``call_timeout`` seconds without one (the SDK tells the server to stop it)."""
        from mcp import MCPError
        from mcp.types import REQUEST_TIMEOUT

        client = self._client
        if client is None or self.gone:
            raise ConnectionError(f"MCP server {self.label}: {self.gone or 'not connected'}")
        calling = client.call_tool(name, arguments, read_timeout_seconds=self.call_timeout)
        future = asyncio.run_coroutine_threadsafe(calling, _loop.get())
        try:
            return await asyncio.wrap_future(future)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if isinstance(exc, MCPError) and exc.code == REQUEST_TIMEOUT:
                raise TimeoutError(
                    f"MCP server {self.label}: no answer from {name!r} in "
                    f"{self.call_timeout:g} s (tools_from_mcp(call_timeout=...) sets the bound)"
                ) from None
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
        budget = Budget()
        params = signature(self.input_schema, budget)
        returns = self._returns(budget)
        if params is None:  # names Python cannot spell: any keywords, the server checks them
            kwargs = inspect.Parameter("arguments", inspect.Parameter.VAR_KEYWORD, annotation=Any)
            params = inspect.Signature([kwargs])
        self._params = params.replace(return_annotation=returns)

        async def call(*args: Any, **kwargs: Any) -> Any:
            return await self._call(args, kwargs)

        call.__name__ = call.__qualname__ = name
        doc = [remote.description or f"The tool {remote.name!r} of {connection.label}."]
        if name.endswith("_") and name[:-1] in SHADOWING:
            doc.append(f"(Named {name}: {name[:-1]} is a Python builtin.)")
        if budget.spent:  # the types are a convenience: the server still checks the arguments
            doc.append("(Its schemas are too large to type in full: some parts are Any.)")
        call.__doc__ = "\n\n".join(doc)
        call.__signature__ = self._params  # type: ignore[attr-defined]
        call.__annotations__ = {p.name: p.annotation for p in self._params.parameters.values()}
        call.__annotations__["return"] = returns
        super().__init__(call, name, approve=approve)

    def _returns(self, budget: Budget) -> Any:
        schema = self.output_schema
        if schema is None:
            return Any
        if self._wrapped:
            return annotation(schema["properties"]["result"], schema, budget)
        return annotation(schema, budget=budget)

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
    name: str | None = None,
    approve: Approve | Mapping[str, Approve] = False,
    only: Iterable[str] | None = None,
    prefix: str = "",
    register: bool = True,
    timeout: float = default.MCP_CONNECT_TIMEOUT,
    call_timeout: float = default.MCP_CALL_TIMEOUT,
) -> MCPTools:
    """The tools of an MCP server, as tools orchestration code may call.

    ``command`` starts a server that speaks MCP over stdio (``"python my_server.py"``, split
    as a shell would, or a list of arguments; ``env`` and ``cwd`` for its process); ``url``
    reaches one over streamable HTTP (``headers`` sent with each request, e.g. a token).
    ``name`` names the server in the tools' descriptions and errors (by default its program's
    name, or the URL's host: never the arguments, which may hold a secret).
    Each tool is an async function with the stub its JSON schemas declare, under its own
    name made a Python identifier (``prefix`` before it; ``list`` and other builtins' names
    get a ``_`` after it); ``only`` keeps the named ones (the server's names).
    ``approve`` gates calls as ``@tool(approve=...)`` does, for every tool or per tool (a
    mapping keyed by the name the code calls or the server's). ``register=True`` adds them to
    the notebook's tools (``%%orchestrate`` without ``--tools`` sees them); `MCPTools.close`
    removes them again. ``timeout`` bounds the start, ``call_timeout`` each call (seconds).

    A failed call raises inside the code, which may catch it: the tool's own error as
    ``RuntimeError``, a server that died as ``ConnectionError`` (its process is reaped), no
    answer in ``call_timeout`` as ``TimeoutError``, a result that breaks the tool's declared
    output schema as ``RuntimeError`` from the SDK's check. Needs the ``mcp`` extra
    (``pip install 'jupyter-sandbox[mcp]'``).
    """
    if (command is None) == (url is None):
        raise SandboxConfigError("tools_from_mcp() takes a server command or url=..., one of them")
    for what, seconds in (("timeout", timeout), ("call_timeout", call_timeout)):
        if (
            isinstance(seconds, bool)
            or not isinstance(seconds, int | float)
            or not (0 < seconds < math.inf)
        ):
            raise SandboxConfigError(
                f"{what} must be a positive number of seconds, got {seconds!r}", parameter=what
            )
    try:
        from mcp import StdioServerParameters
    except ImportError:
        raise SandboxConfigError(f"tools_from_mcp() needs the MCP SDK: {_EXTRA}") from None
    server: Any
    if command is not None:
        argv = shlex.split(command) if isinstance(command, str) else [str(a) for a in command]
        if not argv:
            raise SandboxConfigError("tools_from_mcp(): the server command is empty")
        params = StdioServerParameters(
            command=argv[0], args=argv[1:], env=dict(env) if env else None, cwd=cwd
        )
        server = _stdio(params, _errlog())
        label = repr(name or Path(argv[0]).name)
    else:
        assert url is not None
        if not re.match(r"https?://", url):
            raise SandboxConfigError(f"tools_from_mcp(url=...) takes an http(s) URL, got {url!r}")
        server = _http(url, headers, call_timeout)
        label = repr(name or _host(url))
    connection = _Connection(label, server, float(call_timeout))
    listed = connection.open(timeout)
    try:
        made = MCPTools(connection, _made(connection, listed, approve, only, prefix))
    except BaseException:
        connection.close()
        raise
    if register:
        for tool in made.values():
            _registry.current().register(tool)
        made.registered = True
    return made


def _made(
    connection: _Connection,
    listed: list[mcp.types.Tool],
    approve: Approve | Mapping[str, Approve],
    only: Iterable[str] | None,
    prefix: str,
) -> dict[str, MCPTool]:
    """The tools `tools_from_mcp` keeps of a server's listing, by the names the code calls,
    gated; a `SandboxConfigError` for a name ``only`` or ``approve`` cannot place, or two
    tools the code would call by one name (one would silently replace the other)."""
    label = connection.label
    wanted = None if only is None else set(only)
    kept = [r for r in listed if wanted is None or r.name in wanted]
    if wanted is not None and (missing := wanted - {r.name for r in kept}):
        raise SandboxConfigError(
            f"MCP server {label} has no tool {', '.join(sorted(missing))}; it has "
            f"{', '.join(r.name for r in listed) or 'none'}"
        )
    named: dict[str, mcp.types.Tool] = {}
    for remote in kept:
        code_name = _identifier(prefix + remote.name)
        if (other := named.setdefault(code_name, remote)) is not remote:
            raise SandboxConfigError(
                f"MCP server {label} has two tools the code would call {code_name}: "
                f"{other.name!r} and {remote.name!r} (Python reads names NFKC-normalised); "
                "keep one with only=[...]"
            )
    gates = _gates(label, approve, listed, prefix)
    return {
        code_name: MCPTool(connection, remote, code_name, approve=gates.get(id(remote), False))
        for code_name, remote in named.items()
    }


def _gates(
    label: str,
    approve: Approve | Mapping[str, Approve],
    listed: list[mcp.types.Tool],
    prefix: str,
) -> dict[int, Approve]:
    """Each listed tool's gate, by the tool's id: ``approve`` for all of them, or a mapping's
    value for the tool its key names, by the name the code calls (with or without
    ``prefix``) or the server's. A key naming no tool, or naming one tool twice, is refused:
    a gate that silently gates nothing lets the call through."""
    if not isinstance(approve, Mapping):
        return {id(remote): approve for remote in listed}
    aliases: dict[str, set[int]] = {}
    for remote in listed:
        for alias in (remote.name, _identifier(remote.name), _identifier(prefix + remote.name)):
            aliases.setdefault(alias, set()).add(id(remote))
    gates: dict[int, Approve] = {}
    keys: dict[int, str] = {}
    for key, gate in approve.items():
        found = aliases.get(key, set())
        if len(found) != 1:
            names = sorted({_identifier(prefix + r.name) for r in listed})
            could = difflib.get_close_matches(str(key), list(aliases), n=3) or names
            problem = "no tool" if not found else "more than one tool"
            raise SandboxConfigError(
                f"tools_from_mcp(approve=...): MCP server {label} has {problem} {key!r}; "
                f"it could be {', '.join(could) or 'none'}",
                parameter="approve",
            )
        (tool_id,) = found
        if tool_id in keys:
            raise SandboxConfigError(
                f"tools_from_mcp(approve=...) names one tool twice: {keys[tool_id]!r} and "
                f"{key!r}; keep one",
                parameter="approve",
            )
        keys[tool_id] = key
        gates[tool_id] = gate
    return gates


@contextlib.asynccontextmanager
async def _stdio(params: Any, errlog: TextIO) -> AsyncIterator[Any]:
    """The SDK's stdio transport, which starts the server in a session of its own, with that
    process group killed as soon as the server exits and when the transport ends, however it
    ends. The SDK kills the group only when the server did not exit by itself (its stdin
    closed), so a server that exits or dies left what it started running; and a child that
    holds the server's stdout keeps the SDK from seeing it die (every call would hang): the
    child killed, the pipe closes and the calls fail as for any server that died."""
    from mcp import stdio_client

    token = secrets.token_hex(16)
    marked = params.model_copy(update={"env": {**(params.env or {}), _MARKER: token}})
    group: int | None = None
    try:
        async with stdio_client(marked, errlog=errlog) as streams:
            server = _child_with(token)
            group = None if server is None else _group(server)
            with _on_exit(server, lambda: _kill_group(group)):
                yield streams
    finally:
        _kill_group(group)


def _child_with(token: str) -> int | None:
    """The pid of our child started with ``token`` in its environment, or None where
    ``/proc`` cannot tell."""
    mine = str(os.getpid())
    needle = f"{_MARKER}={token}".encode()
    with contextlib.suppress(OSError):
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                parent = (entry / "stat").read_text().rsplit(")", 1)[1].split()[1]
                if parent == mine and needle in (entry / "environ").read_bytes().split(b"\0"):
                    return int(entry.name)
            except (OSError, IndexError):
                continue
    return None


def _group(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:
        return None


def _kill_group(group: int | None) -> None:
    """Kill a server's process group: Linux gives no new process a pid that is still a group's
    id, so the group is the server's while any of it lives (and else empty: nothing to kill)."""
    if group is not None and group != os.getpgrp():
        with contextlib.suppress(OSError):
            os.killpg(group, signal.SIGKILL)


@contextlib.contextmanager
def _on_exit(pid: int | None, then: Callable[[], None]) -> Iterator[None]:
    """Call ``then`` on the running loop when process ``pid`` exits, while in the block (a
    pidfd read by the loop: no polling; nothing where the system has none)."""
    try:
        handle = os.pidfd_open(pid) if pid is not None else None
    except (AttributeError, OSError):
        handle = None
    if handle is None:
        yield
        return
    loop = asyncio.get_running_loop()

    def exited() -> None:  # once: a pidfd stays readable
        loop.remove_reader(handle)
        then()

    loop.add_reader(handle, exited)
    try:
        yield
    finally:
        loop.remove_reader(handle)
        os.close(handle)


def _host(url: str) -> str:
    """A URL's host and port: what names an HTTP server (its path or query may hold a token)."""
    parts = urllib.parse.urlsplit(url)
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.hostname or 'server'}{port}"


@contextlib.asynccontextmanager
async def _http(
    url: str, headers: Mapping[str, str] | None, call_timeout: float
) -> AsyncIterator[Any]:
    """The streamable HTTP transport, with ``headers`` on every request (its HTTP client
    closed with it: the SDK leaves a client it is given open)."""
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    timeout = httpx2.Timeout(30, read=max(_HTTP_READ_SECONDS, call_timeout))
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
    """An MCP tool name (``get-issue``, ``db.query``) as the Python name the code calls:
    NFKC-normalised as Python reads identifiers (a fullwidth ``delete`` is ``delete``), off
    the keywords and the names the stubs leave to Python (`SHADOWING`: ``list`` is ``list_``)."""
    cleaned = re.sub(r"\W", "_", unicodedata.normalize("NFKC", name)).lstrip("_") or "tool"
    if not cleaned.isidentifier() and not cleaned[0].isdigit():  # a word character no name takes
        cleaned = re.sub(r"[^0-9A-Za-z_]", "_", cleaned).lstrip("_") or "tool"
    if cleaned[0].isdigit():
        cleaned = f"t_{cleaned}"
    if keyword.iskeyword(cleaned) or cleaned in SHADOWING:
        cleaned = f"{cleaned}_"
    return cleaned

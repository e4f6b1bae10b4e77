"""The notebook as an MCP server (``%mcp_serve``): one tool, ``run_code``, that runs the code
an MCP client sends against the notebook's tools, with the notebook's limits, store and
approval gates.

Served over streamable HTTP (the official ``mcp`` SDK, the ``mcp`` extra, on uvicorn) on
loopback only, on a thread of its own with its own event loop; every request carries
``Authorization: Bearer <token>`` (a fresh random token, compared in constant time) or is
answered 401 before the SDK sees it. The tool's description is the header below and the
stubs of the notebook's tools as they are when a client lists its tools.

A run that reaches a gated call with no approver pauses in the store: the answer is
"paused, run id X" and the call waits for a person (``%orchestrate_approve X --expect DIGEST``
in the notebook: no panel there showed the call, so the person approves the digest that
``%orchestrate_pending`` shows beside it; such runs are stored under an `mcp_cell` key).
``run_code(run_id=X)`` then answers how the run stands: still paused, or how it ended (its
value, when the approval was given in this process: `mcp_outcomes`).
"""

from __future__ import annotations

import asyncio
import atexit
import functools
import hashlib
import hmac
import json
import math
import os
import secrets
import socket
import threading
from collections import OrderedDict
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._shared._errors import OrchestrationError, SandboxConfigError
from .._shared._scrub import mask_record
from ._result import OrchestrationResult, result_of
from ._values import DEPTH_CEILING, as_seen, is_data_namedtuple, is_host_object

if TYPE_CHECKING:
    import mcp.types

HEADER = (
    "Run Python code in the notebook's sandbox (Monty: a subset of Python, no imports but "
    "asyncio, json and a few more; no files, no network). The code can call only the "
    "functions below, the notebook's tools (await the async ones; asyncio.gather runs them "
    "side by side). The value of the last expression is the answer, with what it printed. "
    "A call that needs a person's approval pauses the run: the answer says 'paused, run id "
    "X'; call run_code again with run_id='X' to learn how it ended once the person answered. "
    "The code is type-checked against these declarations before it runs:\n\n"
)
_STOP_SECONDS = 10.0
_START_SECONDS = 30.0
CONNECTIONS_CEILING = 64
"""Connections held at once. Past it a new connection takes the place of the one that has
waited longest for its request's headers (what a flood of half-open connections fills the
slots with; a client with the token sends its headers as it connects), or is closed at once
when every held connection is being answered: a flood costs the kernel at most this many
sockets, and the notebook's own client still gets in."""
HEADER_SECONDS = 10.0
"""How long a connection has to send a request's headers, from when it connected (or got
its last answer): one that trickles them a byte at a time (slowloris) is closed then,
however often it sends."""
_KEPT = 64
"""Outcomes of approved runs kept for the clients that ask (least recently added out)."""

MCP_CELL = "mcp:"
"""How the cell key of a run an MCP client started begins (`mcp_cell`)."""


def mcp_cell(code: str) -> str:
    """The cell key a client's run of ``code`` is stored under: marked as a client's, so
    approving its gated call asks for the digest (`durable.CallNow.needs_digest`)."""
    return MCP_CELL + hashlib.sha256(code.encode()).hexdigest()[:16]


Run = Callable[[str], OrchestrationResult]
"""Runs code the way the notebook would (its tools, limits, store); may raise an
`OrchestrationError`."""


class _Outcomes:
    """How runs answered in this process ended, by run id: what ``run_code(run_id=...)``
    tells a client after a person approved or rejected the call its run paused at."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ended: OrderedDict[str, dict[str, Any]] = OrderedDict()

    def remember(self, run_id: str, ended: OrchestrationResult | OrchestrationError) -> None:
        with self._lock:
            self._ended[run_id] = answer(ended)
            while len(self._ended) > _KEPT:
                self._ended.popitem(last=False)

    def get(self, run_id: str) -> dict[str, Any] | None:
        with self._lock:
            return self._ended.get(run_id)


mcp_outcomes = _Outcomes()
"""The process's: ``%orchestrate_approve`` and ``%orchestrate_reject`` fill it."""


def answer(ended: OrchestrationResult | OrchestrationError) -> dict[str, Any]:
    """A run's result or failure as the structured answer a client gets (JSON data only),
    a sandbox tool's secrets masked in it as in what a cell shows (`_scrub`)."""
    if isinstance(ended, OrchestrationError):
        result = result_of(ended)
        found: dict[str, Any] = {
            "status": "failed",
            "error": f"{type(ended).__name__}: {ended}",
            "stdout": "" if result is None else result.stdout,
            "run_id": None if result is None else result.run_id,
        }
        return mask_record(found, () if result is None else result.secrets)
    found = {"status": ended.status, "run_id": ended.run_id}
    if ended.status == "paused":
        call = ended.pending[0] if ended.pending else None
        waits = f"{call.tool}() waits" if call is not None else "a call waits"
        found["message"] = (
            f"paused, run id {ended.run_id}: {waits} for a person to approve it in the "
            f"notebook; call run_code with run_id={ended.run_id!r} to learn how it ended"
        )
    else:
        found["value"] = _data(ended.value)
    found["stdout"] = ended.stdout
    return mask_record(found, ended.secrets)


def _data(value: Any, depth: int = 0) -> Any:
    """``value`` as JSON data showing what the code could see of it, and nothing more: the
    client is not the notebook's owner, and a handle's host ``repr`` (a client object's
    ``api_key=...``) is what the handle keeps from the code. JSON's own types as they are
    (lists and tuples as lists, dicts with their keys as text), the rest (a handle, a set, a
    float that is nan or infinite, bytes, a date, an instance of a class the code defined)
    as the code would write it (`as_seen`): a run's value is whatever the code returned,
    and an answer that cannot be encoded would fail the client's call."""
    kind = type(value)
    if kind is str or kind is int or kind is bool or value is None:
        return value
    if kind is float and math.isfinite(value):
        return value
    if depth < DEPTH_CEILING:
        if kind is list or kind is tuple or is_data_namedtuple(value):
            return [_data(item, depth + 1) for item in value]
        if kind is dict and not any(map(is_host_object, value)):
            return {
                (k if type(k) is str else as_seen(k)): _data(v, depth + 1) for k, v in value.items()
            }
    return as_seen(value, depth)


@dataclass
class Serving:
    """A running server: where (``url``), its ``token`` (also in ``token_file``, when it was
    given a folder), and `stop`."""

    url: str
    token: str
    port: int
    _server: Any
    _thread: threading.Thread
    token_file: Path | None = None

    def __post_init__(self) -> None:
        atexit.register(self._forget_token)  # a kernel's exit stops serving too

    def stop(self) -> None:
        """Stop serving: the port is closed, the thread gone and the token file removed when
        this returns."""
        self._server.should_exit = True
        self._thread.join(_STOP_SECONDS)
        self._forget_token()
        atexit.unregister(self._forget_token)

    def _forget_token(self) -> None:
        if self.token_file is not None:
            self.token_file.unlink(missing_ok=True)

    @property
    def running(self) -> bool:
        return self._thread.is_alive()


def serve_mcp(
    run: Run,
    describe: Callable[[], str],
    status: Callable[[str], str | None],
    *,
    port: int = 0,
    token_folder: Path | None = None,
) -> Serving:
    """Serve ``run_code`` on ``127.0.0.1:port`` (0: a free port), described by ``describe()``
    (the tools' stubs); ``status(run_id)`` is a stored run's status (None: no such run).
    With ``token_folder``, the token is also written there (`write_token`), for a person to
    read without it being shown where it would be kept (a notebook's output is saved)."""
    try:
        import uvicorn
        from mcp.server import Server
    except ImportError:
        raise SandboxConfigError(
            "serving MCP needs the MCP SDK: pip install 'jupyter-sandbox[mcp]'"
        ) from None
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port < 65536:
        raise SandboxConfigError(f"port must be 0-65535, got {port!r}", parameter="port")
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind(("127.0.0.1", port))
        listener.listen()  # from here a client's connection waits, never refused
    except OSError as exc:
        listener.close()
        raise SandboxConfigError(f"port {port}: {exc.strerror}", parameter="port") from None
    port = listener.getsockname()[1]
    token = secrets.token_urlsafe(32)
    try:
        token_file = None if token_folder is None else write_token(token_folder, port, token)
    except OSError as exc:
        listener.close()
        raise SandboxConfigError(
            f"cannot write the MCP token into {token_folder}: {exc.strerror}"
        ) from None
    handlers = _Handlers(run, describe, status)
    server: Server[Any] = Server(
        "jupyter-sandbox notebook",
        on_list_tools=handlers.list_tools,
        on_call_tool=handlers.call_tool,
    )
    app = _guarded(server.streamable_http_app(host="127.0.0.1", stateless_http=True), token)
    web_class, http = _uvicorn_classes()
    # log_config=None: uvicorn's own would reset the logging of the whole kernel (dictConfig)
    config = uvicorn.Config(
        app, http=http, ws="none", log_config=None, log_level="warning", lifespan="on"
    )
    web = web_class(config)

    def main() -> None:
        try:
            asyncio.run(web.serve(sockets=[listener]))
        finally:
            listener.close()
            web.ready.set()

    thread = threading.Thread(target=main, name=f"mcp-serve:{port}", daemon=True)
    thread.start()
    web.ready.wait(_START_SECONDS)  # answering requests once this returns: the URL works
    serving = Serving(f"http://127.0.0.1:{port}/mcp", token, port, web, thread, token_file)
    if not web.started:
        serving.stop()
        raise SandboxConfigError("the MCP server did not start: see the kernel's log")
    return serving


def write_token(folder: Path, port: int, token: str) -> Path:
    """``token`` in ``folder/jupyter-sandbox-mcp-PORT.token``, readable by this user only
    (0600; the folder made 0700 if missing). Written under a fresh name, then renamed over
    whatever a killed kernel left at that name (a stale file, a link): what a client reads
    there is this server's token."""
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = folder / f"jupyter-sandbox-mcp-{port}.token"
    fresh = folder / f".{path.name}.{secrets.token_hex(8)}"
    fd = os.open(fresh, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(fd, "w") as out:
            out.write(token)
        os.replace(fresh, path)
    except BaseException:
        fresh.unlink(missing_ok=True)
        raise
    return path


@functools.cache
def _uvicorn_classes() -> tuple[type[Any], type[Any]]:
    """uvicorn's server that says when it answers (``ready``), and its HTTP/1.1 protocol
    bounded against unauthenticated floods (`CONNECTIONS_CEILING`, `HEADER_SECONDS`). Made on
    first use: uvicorn comes with the ``mcp`` extra."""
    import uvicorn
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class Web(uvicorn.Server):
        """Sets ``ready`` once it answers requests (or has failed to start: ``started``)."""

        def __init__(self, config: uvicorn.Config) -> None:
            super().__init__(config)
            self.ready = threading.Event()

        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets)
            self.ready.set()

    class Bounded(H11Protocol):
        """One connection; ``deadline`` is set while it has a request's headers to send,
        ``since`` when it started waiting for them."""

        deadline: asyncio.TimerHandle | None = None
        since = 0.0

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            if len(self.connections) > CONNECTIONS_CEILING:
                waiting = [
                    c for c in self.connections if isinstance(c, Bounded) and c.deadline is not None
                ]
                if not waiting:
                    transport.close()
                    return
                min(waiting, key=lambda c: c.since).drop()
            self.await_headers()

        def data_received(self, data: bytes) -> None:
            cycle = self.cycle
            super().data_received(data)
            if self.cycle is not cycle:  # a request's headers are in: it is being answered
                self.stop_waiting()

        def on_response_complete(self) -> None:
            cycle = self.cycle
            super().on_response_complete()
            if self.cycle is cycle and not self.transport.is_closing():
                self.await_headers()  # the next request's, while the rest of a body may trickle

        def connection_lost(self, exc: Exception | None) -> None:
            self.stop_waiting()
            super().connection_lost(exc)

        def await_headers(self) -> None:
            self.stop_waiting()
            self.since = self.loop.time()
            self.deadline = self.loop.call_later(HEADER_SECONDS, self.drop)

        def stop_waiting(self) -> None:
            if self.deadline is not None:
                self.deadline.cancel()
                self.deadline = None

        def drop(self) -> None:
            self.stop_waiting()
            self.transport.close()

    return Web, Bounded


def _guarded(app: Any, token: str) -> Callable[..., Awaitable[None]]:
    """``app`` behind the bearer token: any other HTTP request is 401 (nothing of it read)."""
    expected = f"Bearer {token}".encode()

    async def guarded(scope: MutableMapping[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            given = dict(scope.get("headers") or []).get(b"authorization", b"")
            if not hmac.compare_digest(given, expected):
                await send(
                    {
                        "type": "http.response.start",
                        "status": 401,
                        "headers": [
                            (b"content-type", b"text/plain"),
                            (b"www-authenticate", b"Bearer"),
                        ],
                    }
                )
                await send(
                    {"type": "http.response.body", "body": b"a valid bearer token is needed"}
                )
                return
        await app(scope, receive, send)

    return guarded


class _Handlers:
    """The MCP requests: list the one tool (described now), run its calls."""

    def __init__(
        self, run: Run, describe: Callable[[], str], status: Callable[[str], str | None]
    ) -> None:
        self.run = run
        self.describe = describe
        self.status = status

    async def list_tools(self, ctx: Any, params: Any) -> mcp.types.ListToolsResult:
        from mcp.types import ListToolsResult, Tool

        schema = {
            "type": "object",
            "properties": {
                "code": {"type": "string", "description": "the Python code to run"},
                "run_id": {
                    "type": "string",
                    "description": "a paused run's id, to ask how it ended",
                },
            },
        }
        tool = Tool(name="run_code", description=HEADER + self.describe(), input_schema=schema)
        return ListToolsResult(tools=[tool])

    async def call_tool(
        self, ctx: Any, params: mcp.types.CallToolRequestParams
    ) -> mcp.types.CallToolResult:
        from mcp.types import CallToolResult, TextContent

        arguments = params.arguments or {}
        code, run_id = arguments.get("code"), arguments.get("run_id")
        if params.name != "run_code":
            found = {"status": "failed", "error": f"no tool {params.name!r}: there is run_code"}
        elif isinstance(run_id, str) and code in (None, ""):
            found = self._ended(run_id)
        elif isinstance(code, str) and run_id is None:
            found = await asyncio.to_thread(self._run, code)
        else:
            found = {"status": "failed", "error": "run_code takes code='...', or run_id='...'"}
        text = found.get("message") or found.get("error") or json.dumps(found.get("value"))
        if found.get("stdout"):
            text = f"{text}\n--- printed ---\n{found['stdout']}"
        return CallToolResult(
            content=[TextContent(type="text", text=text)],
            structured_content=found,
            is_error=found["status"] == "failed",
        )

    def _run(self, code: str) -> dict[str, Any]:
        try:
            return answer(self.run(code))
        except OrchestrationError as exc:
            return answer(exc)
        except SandboxConfigError as exc:  # e.g. the notebook's store cannot be opened
            return {"status": "failed", "error": f"{type(exc).__name__}: {exc}"}

    def _ended(self, run_id: str) -> dict[str, Any]:
        status = self.status(run_id)
        if status is None:
            return {"status": "failed", "error": f"no run {run_id!r} in the notebook's store"}
        if status == "paused":
            return {
                "status": "paused",
                "run_id": run_id,
                "message": f"paused, run id {run_id}: still waiting for a person's approval",
            }
        known = mcp_outcomes.get(run_id)
        if known is not None:
            return known
        return {
            "status": status,
            "run_id": run_id,
            "message": f"run {run_id} is {status} (answered elsewhere: its value is unknown here)",
        }

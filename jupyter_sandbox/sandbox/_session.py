"""Interactive sessions: one container that keeps its Python state across cells.

A session is a container confined as a one-shot run's is (`_pool`: no network by default, a
uid of its own, no capabilities, a read-only root but ``/tmp``, its limits), whose program is
`_session_server`: it runs each cell sent to it in one namespace that lives as long as the
container. It starts from a waiting spare of the same image and limits where there is one
(`_pool.acquire`, then `_pool.hand_over`: the spare's waiter is handed the server, no exec),
else from a container made for it. Its requests and answers are frames on the container's
attach stream (`Channel`), the one connection a one-shot run uses too.

Nothing outlives the kernel unless asked: a session's container is one of the kernel's (its
labels name the kernel, so the watchdog and the reaper remove it as they remove runs, and the
pool's exit removes it). ``keep=True`` (`_kept`) makes one that outlives the kernel: created
for it, labelled for its notebook and user only, re-attached by a secret token kept in a
private file of the kernel's user.

A snapshot (`SandboxSession.snapshot`) is what the server sends back: a tar of the working
folder and the namespace, pickled inside the container, variable by variable. The kernel keeps
it as opaque bytes in a private file and only ever sends it to a session's container
(`fork`, a restore): it never unpickles it.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import hashlib
import hmac
import io
import itertools
import json
import os
import queue
import secrets
import tarfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._shared import _defaults as default
from .._shared._errors import (
    ContainerError,
    OutputLimitExceeded,
    SandboxConfigError,
    SessionCellError,
    SessionLost,
)
from .._shared._secrets import StreamMasker, mask
from . import _kept, _pool, _warm
from ._allowlist import Destination, allow_list
from ._attach import Attached
from ._client import client, engine_of
from ._io import PROGRAM, check_input
from ._isolation import GVISOR_STOPPED, Isolation
from ._plan import AllowList, Route, session_plan
from ._pool import ContainerSetup, Slot
from ._record import SandboxRun
from ._sandbox import create
from ._scripts import MARKER_START
from ._spec import Network, Resources, parse_size
from ._types import Dir, File

if TYPE_CHECKING:
    from docker import DockerClient

    from ._requests import RequestLog

_HERE = Path(__file__).parent
SERVER_FILE = "session.py"
SERVER_PACKAGES = ("cloudpickle",)
"""What a session's image adds to the asked-for packages: the server pickles the namespace with
cloudpickle (functions and classes defined in cells by value). A prebuilt ``image`` runs as
is: its snapshots fall back to plain pickle where it has no cloudpickle."""
INPUT_CEILING_BYTES = 256 * 2**20
"""The most bytes one `File` or `Dir` input of a session may hold: it crosses the session's
stream as one frame, held in memory on both sides."""
SESSION_IDLE = 30 * 60.0
"""Seconds a session may wait for its next cell (`%config SandboxMagics.session_idle`)."""
_UP_WAIT = 60.0
_POKE = 1.0
"""Seconds of quiet while waiting for an answer before the host pokes the container's script
(`Channel.poke`): if the server died (killed for memory), the script answers with its status."""
_INTERRUPT_GRACE = 5.0
"""Seconds a cell has to end after its interrupt before it is killed with its session."""
FRAME = b"\x1e"


@dataclass(frozen=True)
class SessionSpec:
    """What a session runs with: a later cell asking for another is refused (`difference`)."""

    image: str
    """The image's tag (``--image``, or the built environment's)."""
    packages: tuple[str, ...]
    setup: ContainerSetup
    """Resources, network and isolation (the timeout is the spares' key, never a cell's)."""
    prebuilt: bool = False
    """``image`` was asked for as is (``--image``), not built from ``packages``."""
    allowed: tuple[str, ...] = ()
    """An allow-list's entries (``--allow-net``), one host or network and port each; empty
    for ``none`` or ``bridge``. ``setup.network`` is then its proxy's network."""
    environment: tuple[tuple[str, str], ...] = ()
    """What the route adds to the session's variables (an allow-list's proxy variables)."""

    @property
    def reach(self) -> str:
        """What the session reaches, as a cell asks for it (``none``, ``bridge``, a list)."""
        return ", ".join(self.allowed) if self.allowed else self.setup.network

    def saved(self) -> dict[str, Any]:
        """What `session_spec` needs to find this environment again (a snapshot's side file:
        read back through the same checks as a cell's options, `from_saved`)."""
        res = self.setup.resources
        return {
            "packages": list(self.packages),
            "image": self.image if self.prebuilt else None,
            "resources": {
                "cpu": res.cpu,
                "memory": res.memory,
                "pids": res.pids,
                "disk": res.disk,
                "output": res.output,
            },
            "network": list(self.allowed) if self.allowed else self.setup.network,
            "isolation": self.setup.isolation,
        }

    def difference(self, other: SessionSpec) -> str | None:
        """One line naming what ``other`` asks for that this session does not have, or None."""
        for what, mine, theirs in (
            ("packages", sorted(self.packages), sorted(other.packages)),
            ("image", self.image, other.image),
            ("memory", self.setup.resources.memory, other.setup.resources.memory),
            ("cpus", self.setup.resources.cpu, other.setup.resources.cpu),
            ("network", self.reach, other.reach),
            ("isolation", self.setup.isolation, other.setup.isolation),
        ):
            if mine != theirs:
                return f"{what} {theirs!r} (the session has {mine!r})"
        return None


@dataclass
class CellResult:
    """One cell's answer: ``result`` is the last expression's description (``value`` when it
    was JSON data, its ``repr``, ``rich`` MIME forms), ``outputs`` the asked-for variables."""

    cell: int
    result: dict[str, Any] | None
    outputs: dict[str, Any]
    stdout: str = ""
    stderr: str = ""
    seconds: float = 0.0


class Channel:
    """Frames both ways on a session's attach stream: written by the caller, read by a thread
    of its own into a queue (a Ctrl-C in the kernel never lands in the middle of a frame)."""

    def __init__(self, attached: Attached, marker: bytes) -> None:
        self.attached = attached
        self.marker = marker
        self.messages: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self.ended = threading.Event()
        self.status: tuple[int, int] | None = None
        """The script's exit status and OOM kills, if it wrote them (the server died)."""
        self.write_lock = threading.Lock()
        self.stderr = b""
        """What the container wrote on its own stderr (the server's streams are its own)."""
        self._thread = threading.Thread(target=self._read, daemon=True, name="session-channel")
        self._thread.start()

    def send(self, message: Mapping[str, Any], blob: bytes | None = None) -> None:
        body = dict(message)
        if blob is not None:
            body["blob"] = len(blob)
        data = json.dumps(body).encode()
        with self.write_lock:
            self.attached.write(FRAME + b"%08x" % len(data) + data + (blob or b""))

    def poke(self) -> None:
        """The marker line and zero output names: the live server skips them (not a frame);
        a dead server's script reads them and writes its status line, then ends."""
        with contextlib.suppress(OSError), self.write_lock:
            self.attached.write(self.marker + b"\n0\n")

    def _read(self) -> None:
        """Frames into `messages`. A blob's bytes (a snapshot: a 100 MB frame) are gathered as
        a list of chunks, joined once: growing one bytes object chunk by chunk copied it
        quadratically (minutes for 100 MB)."""
        buffer = b""
        blob: dict[str, Any] | None = None
        parts: list[bytes] = []
        have = 0
        try:
            for out, err in self.attached:
                if out is None:
                    if err and len(self.stderr) < 8192:
                        self.stderr += err
                    continue
                if blob is not None:
                    parts.append(out)
                    have += len(out)
                else:
                    buffer += out
                while True:
                    if blob is not None:
                        size = int(blob["blob"])
                        if have < size:
                            break
                        joined = b"".join(parts)
                        blob["data"], buffer = joined[:size], joined[size:]
                        parts, have = [], 0
                        self.messages.put(blob)
                        blob = None
                        continue
                    start = buffer.find(FRAME)
                    if start < 0:
                        buffer = b""
                        break
                    buffer = buffer[start:]
                    if buffer.startswith(self.marker[: len(buffer)]) and len(buffer) < len(
                        self.marker
                    ):
                        break
                    if buffer.startswith(self.marker):
                        line, newline, _ = buffer[len(self.marker) :].partition(b"\n")
                        if not newline:
                            break
                        with contextlib.suppress(ValueError):
                            code, kills = line.split()[:2]
                            self.status = int(code), int(kills)
                        buffer = b""
                        break
                    if len(buffer) < 9:
                        break
                    digits = buffer[1:9]
                    if not all(c in b"0123456789abcdef" for c in digits):
                        buffer = buffer[1:]
                        continue
                    size = int(digits, 16)
                    if len(buffer) < 9 + size:
                        break
                    body, buffer = buffer[9 : 9 + size], buffer[9 + size :]
                    try:
                        message = json.loads(body)
                    except ValueError:
                        continue
                    if isinstance(message, dict) and "blob" in message:
                        blob = message
                        parts, have, buffer = [buffer], len(buffer), b""
                    elif isinstance(message, dict):
                        self.messages.put(message)
        except Exception:  # the stream broke: the session is lost
            pass
        finally:
            self.ended.set()
            self.messages.put(None)

    def close(self) -> None:
        self.attached.close()


@dataclass
class SandboxSession:
    """A running session: `run` cells in it, `snapshot` and `fork` it, `close` it (or use it
    as a context manager). Made by `create_session`."""

    name: str
    spec: SessionSpec
    slot: Slot
    channel: Channel
    token: str
    keep: bool = False
    started: float = field(default_factory=time.time)
    last_used: float = field(default_factory=time.time)
    cells: int = 0
    names: list[str] = field(default_factory=list)
    from_snapshot: str | None = None
    """``NAME@TAG`` it was started from, if any."""
    lost: str | None = None
    """Why the session ended under its user (None while it lives)."""
    timeout: float = default.SANDBOX_TIMEOUT
    idle: float = SESSION_IDLE
    env: dict[str, str] = field(default_factory=dict, repr=False)
    """Its ``env_vars`` and secrets, set in the server at its first hello."""
    secrets: tuple[str, ...] = field(default=(), repr=False)
    """The secrets' values: masked in everything the session sends back."""
    _current: int = 0
    """The id of the request under way (an interrupt names it)."""
    _address: str | None = None
    """Its container's address on its allow-list's network (`requests_since`), once asked."""
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _ids: Iterator[int] = field(default_factory=lambda: itertools.count(1))

    def __enter__(self) -> SandboxSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "lost" if self.lost else "kept" if self.keep else "live"
        return f"<SandboxSession {self.name!r} {self.spec.image} {state}, {self.cells} cells>"

    @property
    def container_id(self) -> str:
        return self.slot.container.id or ""

    # -- requests ------------------------------------------------------------------------

    def _request(
        self,
        op: str,
        body: Mapping[str, Any] | None = None,
        *,
        blob: bytes | None = None,
        on_stream: Callable[[str, str], None] | None = None,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        """Send one request and wait for its answer, forwarding its streams. Ctrl-C asks the
        session to interrupt the cell (its state stays); a second one, or the timeout and
        `_INTERRUPT_GRACE` after it, kills the session (`SessionLost`)."""
        if self.lost:
            raise SessionLost(f"session {self.name!r} is gone: {self.lost}", name=self.name)
        rid = next(self._ids)
        self._current = rid
        self._send({"op": op, "id": rid, **(body or {})}, blob)
        deadline = time.monotonic() + (timeout or self.timeout)
        interrupted_at: float | None = None
        while True:
            try:
                message = self._next(deadline, interrupted_at)
            except KeyboardInterrupt:
                if interrupted_at is not None:
                    self._lose("the cell was interrupted twice: the session was killed")
                    raise SessionLost(
                        f"session {self.name!r} was killed (a second interrupt); its state is"
                        " lost, the next cell starts it afresh",
                        name=self.name,
                    ) from None
                interrupted_at = time.monotonic()
                self._send({"op": "interrupt", "cell": rid})
                continue
            if message == "timeout":
                if interrupted_at is None:
                    interrupted_at = time.monotonic()
                    self._send({"op": "interrupt", "cell": rid})
                    deadline = interrupted_at + _INTERRUPT_GRACE
                    continue
                self._lose("a cell ran past its timeout and did not stop when interrupted")
                raise SessionLost(
                    f"session {self.name!r}: the cell ran past its timeout and was killed with"
                    " the session; its state is lost",
                    name=self.name,
                )
            if message is None:
                raise self._gone()
            assert isinstance(message, dict)
            if message.get("id") != rid:
                continue
            if "stream" in message:
                if on_stream is not None:
                    on_stream(str(message["stream"]), str(message.get("text", "")))
                continue
            if message.get("done") or "data" in message or "refused" in message:
                return message

    def _send(self, message: Mapping[str, Any], blob: bytes | None = None) -> None:
        """`Channel.send`; a stream that no longer takes it (the container went with its
        engine's restart, or was removed) is the session lost (`SessionLost`), as one that
        ended while we waited."""
        try:
            self.channel.send(message, blob)
        except OSError:
            raise self._gone() from None

    def _next(self, deadline: float, interrupted_at: float | None) -> dict[str, Any] | str | None:
        quiet_since = time.monotonic()
        while True:
            now = time.monotonic()
            if now >= deadline:
                return "timeout"
            try:
                return self.channel.messages.get(timeout=min(_POKE, deadline - now))
            except queue.Empty:
                if time.monotonic() - quiet_since >= _POKE:
                    self.channel.poke()
                    quiet_since = time.monotonic()

    def _gone(self) -> SessionLost:
        """The stream ended: say why (memory, or killed from outside) and mark it lost."""
        oom, code = False, None
        status = self.channel.status
        if status is not None:
            code = status[0]
            oom = code == 137 and status[1] > 0
        else:
            with contextlib.suppress(Exception):
                from ._death import death

                _pool.wait_gone(self.slot.container, time.monotonic() + 5)
                code, oom = death(client(), self.container_id, self.slot.born)
        res = self.spec.setup.resources
        if oom:
            why = f"it was killed for memory (its limit is {res.memory}; create it with more)"
        elif self.spec.setup.isolation == "gvisor" and code == GVISOR_STOPPED:
            why = (
                "gVisor's runtime stopped, most often because its processes reached the pids"
                f" limit ({res.pids}; create it with more)"
            )
        else:
            why = "its container was stopped from outside or its engine restarted"
        self._lose(why)
        return SessionLost(
            f"session {self.name!r} was lost: {why}; its variables and files are gone, the next"
            " cell starts it afresh",
            name=self.name,
            oom=oom,
        )

    def _lose(self, why: str) -> None:
        self.lost = why
        lost_sessions[self.name] = why
        _forget(self)
        self._remove()

    # -- the API ---------------------------------------------------------------------------

    def run(
        self,
        code: str,
        *,
        outputs: Sequence[str] = (),
        on_stream: Callable[[str, str], None] | None = None,
        timeout: float | None = None,
        **inputs: Any,
    ) -> Any:
        """Run ``code`` in the session with ``inputs`` bound as variables (JSON data, or a
        `File`/`Dir`: copied in, its path there the variable's value); the last
        expression's value (JSON data as itself, anything else as its repr), or with
        ``outputs`` a dict of those variables. `SessionCellError` if the code raised."""
        cell = self.execute(code, inputs, outputs=outputs, on_stream=on_stream, timeout=timeout)
        if outputs:
            return {name: _plain(cell.outputs.get(name)) for name in outputs}
        return None if cell.result is None else _plain(cell.result)

    def execute(
        self,
        code: str,
        inputs: Mapping[str, Any] | None = None,
        *,
        outputs: Sequence[str] = (),
        on_stream: Callable[[str, str], None] | None = None,
        timeout: float | None = None,
    ) -> CellResult:
        """`run`, returning the whole `CellResult` (what the magic shows)."""
        if not isinstance(code, str):
            raise SandboxConfigError("a session's code must be a str")
        values = dict(inputs or {})
        packed = {name: _packed(name, v) for name, v in values.items() if isinstance(v, File | Dir)}
        for name, value in values.items():
            if name in packed:
                continue
            try:
                json.dumps(value, allow_nan=False)
            except (TypeError, ValueError):
                raise SandboxConfigError(
                    f"input {name!r} ({type(value).__name__}) is not JSON data or a File or Dir:"
                    " a session takes str, numbers, bools, None, lists and dicts of them, and"
                    " files"
                ) from None
        printed: dict[str, list[str]] = {"stdout": [], "stderr": []}
        maskers = {name: StreamMasker(self.secrets) for name in printed}
        cap = parse_size(self.spec.setup.resources.output)
        written = [0]
        flooded = threading.Event()

        def stream(name: str, text: str) -> None:
            written[0] += len(text.encode())
            if written[0] > cap:  # the output cap: the cell is interrupted, the rest dropped
                if not flooded.is_set():
                    flooded.set()
                    self.channel.send({"op": "interrupt", "cell": self._current})
                return
            shown = maskers[name].feed_text(text) if name in maskers else text
            printed.setdefault(name, []).append(shown)
            if on_stream is not None and shown:
                on_stream(name, shown)

        started = time.monotonic()
        with self._lock:
            self._check_idle()
            for name, data in packed.items():  # each file's path in the session, as its value
                values[name] = self._put(name, data)
            answer = self._request(
                "run",
                {"code": code, "inputs": values, "outputs": list(outputs)},
                on_stream=stream,
                timeout=timeout,
            )
            self.last_used = time.time()
        for name, masker in maskers.items():
            stream(name, "")
            rest = masker.flush()
            if rest:
                printed[name].append(rest)
                if on_stream is not None:
                    on_stream(name, rest)
        if self.secrets:
            answer = _masked(answer, self.secrets)
        self.cells = int(answer.get("cells", self.cells + 1))
        if answer.get("exit"):
            self._lose("its code called exit()")
        error = answer.get("error")
        if flooded.is_set():
            raise OutputLimitExceeded(
                f"session {self.name!r}: the cell wrote more than its output cap"
                f" ({self.spec.setup.resources.output}) and was interrupted; the session stays"
            )
        if error:
            raise SessionCellError(
                f"{error.get('type')}: {error.get('message')}"
                f" (session {self.name!r}, cell {self.cells}; its state stays)",
                type_name=str(error.get("type")),
                traceback=str(error.get("traceback", "")),
            )
        missing = [n for n, v in (answer.get("outputs") or {}).items() if v.get("missing")]
        if missing:
            raise SandboxConfigError(
                f"output {missing[0]!r} is not a variable of session {self.name!r} after"
                " the cell: assign it in the cell"
            )
        return CellResult(
            cell=self.cells,
            result=answer.get("result"),
            outputs=answer.get("outputs") or {},
            stdout="".join(printed["stdout"]),
            stderr="".join(printed["stderr"]),
            seconds=time.monotonic() - started,
        )

    def _put(self, name: str, data: bytes) -> str:
        """Send input ``name``'s tar (`_packed`) to the session: its path there."""
        answer = self._request("put", {"name": name}, blob=data, timeout=max(self.timeout, 600))
        error = answer.get("error")
        if error or not isinstance(answer.get("path"), str):
            message = error.get("message") if error else "no path came back"
            raise ContainerError(f"session {self.name!r} could not take input {name!r}: {message}")
        return str(answer["path"])

    def requests_since(self, since: float) -> RequestLog | None:
        """What the session's code sent out from ``since`` (epoch seconds) on, from its
        allow-list's proxy log with its secrets masked (`_requests`): a cell's record keeps it,
        as a one-shot run's does. None without an allow-list (nothing went out)."""
        if not self.spec.allowed:
            return None
        from ._requests import RequestLog, address_of

        docker = client()
        route = _route(self.spec, docker)
        if self._address is None:
            self._address = address_of(docker, self.container_id, route.network)
        log = RequestLog()
        log.add(route.requests(since, time.time(), self._address, self.secrets) or [])
        return log

    def expired(self) -> bool:
        """Whether it waited longer than its idle time for this cell."""
        return bool(self.idle) and time.time() - self.last_used > self.idle

    def _check_idle(self) -> None:
        if self.expired():
            self._lose(f"it was idle for more than {self.idle:g} s")
            raise SessionLost(
                f"session {self.name!r} was stopped after {self.idle:g} s idle; the next cell"
                " starts it afresh",
                name=self.name,
            )

    def info(self) -> dict[str, Any]:
        """Name, image, started, last used, memory in use (bytes) and variable names."""
        with self._lock:
            answer = self._request("info", timeout=10)
        self.names = list(answer.get("names") or [])
        return {
            "name": self.name,
            "image": self.spec.image,
            "started": self.started,
            "last_used": self.last_used,
            "memory": answer.get("memory"),
            "names": self.names,
            "kept": self.keep,
            "cells": self.cells,
        }

    def snapshot(self, tag: str | None = None) -> Snapshot:
        """Save the session's files (``/tmp``) and Python state as ``NAME@TAG`` (default: the
        cell count). The variables that could not be pickled are named in ``unsaved``."""
        tag = tag or f"cell{self.cells}"
        _check_name(tag, "tag")
        with self._lock:
            answer = self._request("snapshot", timeout=max(self.timeout, 600))
        data = answer.get("data")
        if not isinstance(data, bytes):
            raise ContainerError(f"session {self.name!r} sent no snapshot")
        final = self._request_done(answer)
        snap = Snapshot(
            self.name,
            tag,
            _kept.store_snapshot(self.name, tag, data, self.spec.saved()),
            self.spec,
            saved=list(final.get("saved") or []),
            unsaved=dict(final.get("unsaved") or {}),
        )
        _snapshots[(self.name, tag)] = snap
        return snap

    def _request_done(self, blob_message: dict[str, Any]) -> dict[str, Any]:
        """The answer after a blob (the same request's ``done`` frame)."""
        rid = blob_message.get("id")
        while True:
            message = self.channel.messages.get(timeout=60)
            if message is None:
                raise self._gone()
            if message.get("id") == rid and message.get("done"):
                return message

    def restore(self, snap: Snapshot) -> dict[str, Any]:
        """Load ``snap`` into this session (its files and variables)."""
        data = snap.path.read_bytes()
        with self._lock:
            answer = self._request("restore", blob=data, timeout=max(self.timeout, 600))
        if answer.get("error"):
            raise ContainerError(
                f"session {self.name!r} could not restore {snap.name}@{snap.tag}:"
                f" {answer['error'].get('message')}"
            )
        self.cells = int(answer.get("cells", 0))
        self.from_snapshot = f"{snap.name}@{snap.tag}"
        return answer

    def fork(self, name: str, tag: str | None = None) -> SandboxSession:
        """A new session of the same environment starting from this one's snapshot ``tag``
        (a fresh snapshot when None): the two diverge from there."""
        snap = _snapshots.get((self.name, tag)) if tag else None
        if snap is None:
            snap = self.snapshot(tag)
        return start_session_from(name, snap)

    def as_tool_function(self) -> Callable[[str], Any]:
        """The session as one function of code (what ``tool(session)`` registers): each call
        runs its code in the session, one call at a time, and returns the last expression's
        value (JSON data as itself, else its repr) plus what it printed."""
        session = self

        def run_code(code: str) -> Any:
            cell = session.execute(code)
            value = None if cell.result is None else _plain(cell.result)
            if cell.stdout or cell.stderr:
                return {"value": value, "printed": cell.stdout + cell.stderr}
            return value

        run_code.__name__ = self.name
        run_code.__doc__ = (
            f"Run Python code in the sandbox session {self.name!r}: its variables, imports and"
            " files stay between calls. Returns the last expression's value (its repr when it"
            " is not JSON data), or {'value': ..., 'printed': ...} when the code printed."
        )
        return run_code

    def close(self) -> None:
        """Remove the session's container (a kept one too)."""
        _forget(self)
        if self.lost is None:
            self.lost = "it was closed"
        self._remove()

    def _remove(self) -> None:
        """Remove the container: off the caller's path, unless kept (no watchdog removes a
        kept one should the kernel die before the removal ran)."""
        self.channel.close()
        if self.keep:
            _pool.remove(self.slot)
            _kept.forget(self.name)
        else:
            _pool.remove_later(self.slot)


@dataclass(frozen=True)
class Snapshot:
    """A saved session: its files and namespace as opaque bytes in a private file."""

    name: str
    tag: str
    path: Path
    spec: SessionSpec
    saved: list[str] = field(default_factory=list)
    unsaved: dict[str, str] = field(default_factory=dict)


_sessions: dict[str, SandboxSession] = {}
_snapshots: dict[tuple[str, str], Snapshot] = {}
_registry_lock = threading.Lock()


lost_sessions: dict[str, str] = {}
"""Sessions of this kernel that were lost, and why: the next cell of one says so."""


def _forget(session: SandboxSession) -> None:
    with _registry_lock:
        if _sessions.get(session.name) is session:
            del _sessions[session.name]


def sessions() -> list[SandboxSession]:
    """The kernel's live sessions."""
    with _registry_lock:
        return list(_sessions.values())


def get_session(name: str) -> SandboxSession | None:
    with _registry_lock:
        return _sessions.get(name)


def snapshot_of(name: str, tag: str | None) -> Snapshot | None:
    """A snapshot of this kernel (``tag`` None: the latest), or one kept on disk for this
    notebook (`_kept`)."""
    if tag is None:
        found = [s for (n, _), s in _snapshots.items() if n == name]
        if found:
            return found[-1]
    elif (name, tag) in _snapshots:
        return _snapshots[(name, tag)]
    stored = _kept.stored_snapshot(name, tag)
    if stored is None:
        return None
    path, saved = stored
    try:
        spec = session_spec(
            packages=[str(p) for p in saved.get("packages") or []],
            resources=dict(saved.get("resources") or {}),
            network=_saved_network(saved.get("network", "none")),
            isolation=saved.get("isolation"),
            image=saved.get("image"),
        )
    except (SandboxConfigError, TypeError, ValueError):
        return None  # a side file that does not pass a cell's checks is no snapshot
    snap = Snapshot(name, path.stem.partition("@")[2], path, spec)
    _snapshots[(name, snap.tag)] = snap
    return snap


def _saved_network(saved: object) -> Network | list[str]:
    """A side file's network: a name or an allow-list's entries (checked as a cell's are)."""
    if isinstance(saved, list):
        return [str(entry) for entry in saved]
    return str(saved)  # type: ignore[return-value]  # `create` refuses any other name


def _check_name(name: object, what: str) -> str:
    if not isinstance(name, str) or not name.isidentifier():
        raise SandboxConfigError(
            f"a session's {what} must be a Python identifier (letters, digits, _), not {name!r}"
        )
    return name


def session_spec(
    *,
    packages: Sequence[str] | None = None,
    resources: Resources | Mapping[str, Any] | None = None,
    network: Network | Sequence[str] = "none",
    isolation: Isolation | None = None,
    image: str | None = None,
    docker: DockerClient | None = None,
    emit: Callable[[Any], None] | None = None,
) -> SessionSpec:
    """Check the environment asked for (as `create` checks a one-shot run's) and plan it as a
    one-shot run is planned (`_plan.session_plan`): the backend finds or builds its image, the
    network strategy gives its route (an allow-list's proxy started, its network joined)."""
    asked = tuple(packages or ())
    extra = () if image is not None else tuple(p for p in SERVER_PACKAGES if p not in asked)
    box = create(
        "session",
        code="pass",
        packages=[*asked, *extra] if image is None else None,
        resources=resources,
        network=network,
        isolation=isolation,
        image=image,
    )
    chosen = session_plan(box, (lambda: docker) if docker is not None else client)
    emitted = emit or (lambda _e: None)
    run = SandboxRun(name=box.name, image=box.image or box.image_spec.base)
    chosen.backend.prepare(run, emitted)  # ``run.image``: the built tag, or ``image`` as is
    route = chosen.backend.join(emitted)
    setup = _pool.keyed(chosen.docker, box._limits(route.network))
    allowed = () if isinstance(box.network, str) else _entries(box.network)
    return SessionSpec(
        run.image,
        asked,
        setup,
        prebuilt=image is not None,
        allowed=allowed,
        environment=tuple(sorted(route.environment.items())),
    )


def _entries(destinations: Sequence[Destination]) -> tuple[str, ...]:
    """An allow-list as entries `create` reads back (a snapshot's side file), one port each."""
    return tuple(part for destination in destinations for part in str(destination).split(","))


def create_session(
    name: str,
    *,
    packages: Sequence[str] | None = None,
    resources: Resources | Mapping[str, Any] | None = None,
    network: Network | Sequence[str] = "none",
    isolation: Isolation | None = None,
    image: str | None = None,
    keep: bool = False,
    idle: float = SESSION_IDLE,
    timeout: float | None = None,
    env_vars: Mapping[str, str] | None = None,
    secrets: Sequence[str] | None = None,
) -> SandboxSession:
    """Start a session ``name`` (a Python identifier) with the environment asked for: the
    packages, resources, network and isolation of a one-shot run, confined as one; its
    ``env_vars`` and ``secrets`` (host variables read now, masked in all it sends back).
    ``keep``: it outlives the kernel, and a new kernel of the same notebook re-attaches to it
    (`_kept`). ``idle``: seconds without a cell before it is stopped (0: never)."""
    _check_name(name, "name")
    if get_session(name) is not None:
        raise SandboxConfigError(
            f"session {name!r} is running already: use it, or stop it first (%sandbox_stop"
            f" {name}, or .close())"
        )
    spec = session_spec(
        packages=packages, resources=resources, network=network, isolation=isolation, image=image
    )
    env, masked = session_env(env_vars, secrets)
    return start_session(name, spec, keep=keep, idle=idle, timeout=timeout, env=env, masked=masked)


def start_session(
    name: str,
    spec: SessionSpec,
    *,
    keep: bool = False,
    idle: float = SESSION_IDLE,
    timeout: float | None = None,
    env: Mapping[str, str] | None = None,
    masked: tuple[str, ...] = (),
) -> SandboxSession:
    """A session of ``spec`` started now (``env``: its code's variables; ``masked``: the
    secrets' values among them): the ready one of ``spec`` if there is one (its
    server up, waiting for its first hello: `_prepare`), else from a waiting spare; a kept one
    is made for itself (labelled for its notebook, which a spare cannot be). Then the next
    ready one of ``spec`` is started in the background."""
    docker = client()
    spec = _joined(spec, docker)
    token = secrets.token_hex(32)
    ready = None if keep else _take_ready(spec)
    if ready is not None:
        slot, channel = ready
    else:
        if keep:
            slot = _kept.create(docker, spec.image, spec.setup, name, token)
        else:
            slot = _pool.acquire(
                docker, spec.image, spec.setup, _warm.spare_command(_lifetime(spec))
            )
            _pool.hand_over(docker, slot)
        try:
            channel = _launch(name, slot, docker)
        except BaseException:
            _pool.remove_later(slot)
            raise
    session = SandboxSession(
        name,
        spec,
        slot,
        channel,
        token,
        keep=keep,
        idle=idle,
        env={**(env or {}), **dict(spec.environment)},  # the route's last, as a run's
        secrets=masked,
    )
    try:
        greet(session, timeout=_warm.PROBE_WAIT if ready is not None else 30)
    except (ContainerError, OSError):
        session._remove()
        if ready is None:
            raise
        lost_sessions.pop(name, None)
        # the ready one died, was tampered with or stopped answering: never used, and the
        # session takes the ordinary path (a probed spare, or a container of its own)
        return start_session(
            name, spec, keep=keep, idle=idle, timeout=timeout, env=env, masked=masked
        )
    except BaseException:
        session._remove()
        raise
    if timeout is not None:
        session.timeout = float(timeout)
    with _registry_lock:
        _sessions[name] = session
    if not keep:
        _prepare_later(spec)
    return session


def _joined(spec: SessionSpec, docker: DockerClient) -> SessionSpec:
    """``spec`` with its route joined again, as each one-shot run joins its own: an
    allow-list's proxy that died since the spec was made (`session_spec`, once per kernel
    and environment) is replaced before the session's container needs it."""
    if not spec.allowed:
        return spec
    route = _route(spec, docker)
    environment = tuple(sorted(route.environment.items()))
    if (route.network, environment) == (spec.setup.network, spec.environment):
        return spec
    setup = dataclasses.replace(spec.setup, network=route.network)
    return dataclasses.replace(spec, setup=setup, environment=environment)


def _packed(name: str, value: File | Dir) -> bytes:
    """A `File` or `Dir` input as a tar of the one name ``name``: the file, or the folder's
    plain files and folders (its links and special files are left out: the code never
    reaches the host through one). At most `INPUT_CEILING_BYTES`, counted before reading."""
    check_input(name, "file" if isinstance(value, File) else "dir", value)
    path = Path(os.fspath(value)).resolve()  # the one the user named, as a one-shot run's
    try:
        files = [path] if path.is_file() else [p for p in path.rglob("*") if _plain_file(p)]
        size = sum(p.stat().st_size for p in files)
        if size > INPUT_CEILING_BYTES:
            raise SandboxConfigError(
                f"input {name!r} holds {size:,} bytes: a session takes at most"
                f" {INPUT_CEILING_BYTES:,} per File or Dir (it crosses in one piece); pass a"
                " smaller one, or run the cell without --session"
            )
        out = io.BytesIO()
        with tarfile.open(fileobj=out, mode="w") as tar:
            tar.add(path, arcname=name, recursive=False)
            for entry in sorted(path.rglob("*")) if path.is_dir() else ():
                if (entry.is_dir() and not entry.is_symlink()) or _plain_file(entry):
                    tar.add(entry, arcname=f"{name}/{entry.relative_to(path)}", recursive=False)
    except OSError as error:
        raise SandboxConfigError(
            f"input {name!r}: cannot read {error.filename or path}: {error.strerror or error}"
        ) from None
    return out.getvalue()


def _plain_file(path: Path) -> bool:
    """A regular file, not a link to one."""
    return path.is_file() and not path.is_symlink()


def _route(spec: SessionSpec, docker: DockerClient) -> Route:
    """The route of ``spec``'s allow-list: its proxy, started again if it died (`_egress`)."""
    return AllowList(allow_list(list(spec.allowed))).join(docker, lambda _event: None)


def _lifetime(spec: SessionSpec) -> int:
    return _pool.lifetime(spec.setup)


def _launch(name: str, slot: Slot, docker: DockerClient) -> Channel:
    """Hand the slot's waiter the server (starting a container made for it first) and wait
    until it is up: the channel to it."""
    if slot.attached is None:  # made for the session: start it and wait for its waiter
        slot.attached = Attached(docker, slot.container.id or "")
        slot.container.start()
        if not _warm.up(slot.attached, time.monotonic() + _UP_WAIT) or not _warm.probe(
            slot.attached
        ):
            raise ContainerError(f"session {name!r}: its container did not start its interpreter")
    (slot.program / SERVER_FILE).write_bytes((_HERE / "_session_server.py").read_bytes())
    marker = f"{MARKER_START}{secrets.token_hex(16)}\x1e".encode()
    env = {**_warm.START_ENV, "JSBX_SESSION_IDLE": str(READY_IDLE)}
    command = ["python3", f"{PROGRAM}/{SERVER_FILE}"]
    slot.attached.write(_warm.header(command, env, marker, [], keep_stdin=True))
    channel = Channel(slot.attached, marker)
    up = _first(channel, _UP_WAIT)
    if up is None or not up.get("up"):
        said = channel.stderr.decode(errors="replace").strip()[-500:]
        channel.close()
        raise ContainerError(f"session {name!r}: its server did not start: {said or up}")
    return channel


READY_IDLE = default.SPARE_IDLE
"""Seconds a ready session's server waits for its first hello before it ends (a spare's idle
time); the hello sets the session's own (`SandboxSession.idle`)."""
_ready: dict[SessionSpec, tuple[Slot, Channel, float]] = {}
"""One ready session per environment in use: its server up, nobody greeted it yet."""
_preparing: dict[SessionSpec, threading.Thread] = {}
_ready_lock = threading.Lock()


def _take_ready(spec: SessionSpec) -> tuple[Slot, Channel] | None:
    with _ready_lock:
        found = _ready.pop(spec, None)
    if found is None:
        return None
    slot, channel, born = found
    if channel.ended.is_set() or time.monotonic() - born > READY_IDLE - 30:
        channel.close()
        _pool.remove_later(slot)
        return None
    return slot, channel


def _prepare_later(spec: SessionSpec) -> None:
    """Start the next ready session of ``spec`` in the background, unless one waits or is
    being started: the next `start_session` of it then costs one hello."""
    with _ready_lock:
        if spec in _ready or spec in _preparing:
            return
        thread = threading.Thread(target=_prepare, args=(spec,), daemon=True, name="session-ready")
        _preparing[spec] = thread
    thread.start()


def _prepare(spec: SessionSpec) -> None:
    try:
        docker = client()
        slot = _pool.acquire(docker, spec.image, spec.setup, _warm.spare_command(_lifetime(spec)))
        _pool.hand_over(docker, slot)
        try:
            channel = _launch("(ready)", slot, docker)
        except BaseException:
            _pool.remove_later(slot)
            raise
        with _ready_lock:
            _ready[spec] = (slot, channel, time.monotonic())
    except Exception:  # an optimisation: the next start takes the ordinary path
        pass
    finally:
        with _ready_lock:
            _preparing.pop(spec, None)


def wait_ready() -> None:
    """Wait until no ready session is being started (tests, benchmarks)."""
    while True:
        with _ready_lock:
            threads = list(_preparing.values())
        if not threads:
            return
        for thread in threads:
            thread.join()


def discard_ready() -> None:
    """Remove the ready sessions (their containers), after those being started."""
    wait_ready()
    with _ready_lock:
        ready = list(_ready.values())
        _ready.clear()
    for slot, channel, _born in ready:
        channel.close()
        _pool.remove(slot)


def greet(session: SandboxSession, timeout: float = 30) -> int:
    """Say hello with the token and check the server proves it knows it (a container that
    merely carries our labels cannot); the server's cell count."""
    nonce = secrets.token_hex(16)
    hello: dict[str, Any] = {
        "token": session.token,
        "nonce": nonce,
        "idle": float(session.idle or 0),
        "env": session.env,
    }
    if session.idle:  # the server's own end comes a minute after the host's check
        hello["idle"] = float(session.idle) + 60
    answer = session._request("hello", hello, timeout=timeout)
    proof = hmac.new(session.token.encode(), nonce.encode(), hashlib.sha256).hexdigest()
    if answer.get("refused") or not hmac.compare_digest(str(answer.get("proof", "")), proof):
        why = answer.get("refused") or "its proof did not match"
        raise ContainerError(f"session {session.name!r} refused its token: {why}")
    session.cells = int(answer.get("cells", 0))
    return session.cells


def reattach_session(name: str, spec: SessionSpec) -> SandboxSession | None:
    """This notebook's kept session ``name``, attached again (a new kernel's first cell of
    it), or None when there is none we hold the token of (`_kept.find`)."""
    import tempfile

    docker = client()
    for row in _kept.find(docker):
        if row["name"] != name:
            continue
        container = docker.containers.get(row["Id"])
        slot = Slot(
            container,
            Path(tempfile.mkdtemp(prefix="jupyter-sandbox-kept-")),
            time.monotonic(),
            spec.setup,
            0,
        )
        slot.attached = Attached(docker, row["Id"])
        marker = f"{MARKER_START}{secrets.token_hex(16)}\x1e".encode()
        session = SandboxSession(
            name, spec, slot, Channel(slot.attached, marker), row["token"], keep=True
        )
        try:
            greet(session)
        except BaseException:
            session.channel.close()
            raise
        with _registry_lock:
            _sessions[name] = session
        return session
    return None


def _first(channel: Channel, wait: float) -> dict[str, Any] | None:
    try:
        return channel.messages.get(timeout=wait)
    except queue.Empty:
        return None


def start_session_from(name: str, snap: Snapshot, *, keep: bool = False) -> SandboxSession:
    """A new session of the snapshot's environment, its files and state restored."""
    _check_name(name, "name")
    if get_session(name) is not None:
        raise SandboxConfigError(f"session {name!r} is running already: stop it first")
    session = start_session(name, snap.spec, keep=keep)
    try:
        session.restore(snap)
    except BaseException:
        session.close()
        raise
    return session


def _masked(answer: dict[str, Any], secrets: tuple[str, ...]) -> dict[str, Any]:
    """``answer`` with every secret's value (in each of its spellings) masked."""
    masked: dict[str, Any] = json.loads(mask(json.dumps(answer), secrets))
    return masked


def session_env(
    env_vars: Mapping[str, str] | None = None, secrets: Sequence[str] | None = None
) -> tuple[dict[str, str], tuple[str, ...]]:
    """The environment a session's code gets (``env_vars``, and the ``secrets`` read from the
    host now, checked as a one-shot run's are) and the secrets' values, to mask."""
    box = create("session", code="pass", env_vars=env_vars, secrets=secrets)
    env = {k: v for k, v in box._environment().items() if _warm.START_ENV.get(k) != v}
    return env, tuple(env[name] for name in box.secrets)


def session_value(described: Mapping[str, Any] | None) -> Any:
    """A described value as the caller gets it: JSON data as itself, else its repr."""
    return _plain(described)


def _plain(described: Mapping[str, Any] | None) -> Any:
    if not described:
        return None
    if "value" in described:
        return described["value"]
    return described.get("repr")


def engine_supports_checkpoint(docker: DockerClient | None = None) -> bool:
    """Whether the engine can checkpoint a running container (``docker checkpoint``: an
    experimental Docker with CRIU); snapshots here never need it."""
    docker = docker or client()
    return bool(docker.info().get("ExperimentalBuild")) and engine_of(docker).name == "docker"


def set_session_notebook(scope: str) -> None:
    """Which notebook this kernel runs (`_kept`: what kept sessions and snapshots belong to)."""
    _kept.scope = scope


def close_sessions(*, kept: bool = False) -> None:
    """Remove this kernel's sessions (``kept``: the kept ones too) and the ready ones."""
    for session in sessions():
        if kept or not session.keep:
            session.close()
    discard_ready()


@atexit.register
def _shutdown() -> None:
    """Kernel exit: a kept session stays (that is what it is for); the others go with the
    pool's containers."""
    for session in sessions():
        if session.keep:
            with contextlib.suppress(Exception):
                session.channel.close()
            with _registry_lock:
                _sessions.pop(session.name, None)
            with _pool.current().lock:
                _pool.current().live.pop(session.container_id, None)

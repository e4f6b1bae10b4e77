"""One run in one container: live output, a wall-clock limit, outputs back, removal always.

The container comes from `_pool`: a spare waiting for the run (started ahead, confined, its
interpreter up and waiting on the attach stream: `_warm`), or, with none waiting, one made for
the run with the run as its own process (a start then an exec cost ~1.2x a ``docker run``).
Either way this module stages the run's files into its mounts, writes what the program needs
on the container's stdin, streams its output with secrets masked, enforces the timeout and the
output cap, detects an OOM kill, and hands the container back for removal on every path.

Outputs come back with the code's output (a second exec to tar them cost ~74 ms of a ~250 ms
warm run): the container's ``sh`` script (`_scripts`) runs the program and then writes a
marker of this run, the program's exit status (and, after a kill, the memory cgroup's OOM
kills) on a line, and after exit 0 a tar of ``/var/outputs`` on stdout, then the marker again
with tar's exit status and first message (`verdict`). The host streams stdout up to the marker
as the run's output, and feeds the tar to the same hostile-tar reader (`extract_outputs`),
entry by entry, with all its limits; a tar that left something out (an unreadable folder)
fails the run.

The status line is the end of the run: the engine reports a container's exit only after
tearing it down (network namespace, mounts), so the host returns when the line (and the tar)
came and the container is removed off its path. The script reads the marker (and a spare's
waiter the program and its environment: `_warm.header`; a made container's script the
environment: `script_input`) from stdin, written by the host (`_attach`): none of it is in
the container's configuration. If the script dies before its line (OOM, a kill from
outside), the engine's events say how it ended (`death`).

The program can read its marker (same uid: the script's memory, or its stdin) and print it:
then it supplies the status and the tar itself; it could exit with that status and write
those files anyway. The tar is read as hostile data either way.
"""

from __future__ import annotations

import _thread
import contextlib
import itertools
import os
import re
import secrets
import shlex
import shutil
import threading
import time
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._shared._errors import ContainerError, SandboxCancelled, SandboxTimeout
from .._shared._events import EventCallback, Output, Stream
from .._shared._otel import annotate
from .._shared._secrets import StreamMasker
from . import _pool, _warm
from ._attach import Attached
from ._death import SIGKILLED, death
from ._io import extract_outputs, overlap
from ._pool import ContainerSetup, Slot
from ._scripts import MARKER_START, OWN_SCRIPT, WRAPPER
from ._spec import parse_size

if TYPE_CHECKING:
    from docker import DockerClient

_POLL = 0.05
"""Seconds between looks at the cancel flag and the deadline."""
_ASK = 0.2
_ASK_CEILING = 0.8
"""The engine is asked whether the container still runs after `_ASK` s, then at doubling
intervals up to `_ASK_CEILING`: the stream says so for free (most runs end before the first
question), the question is only for a container that died without its stream ending."""
_TRAILING = 0.5
"""Seconds a run waits, after its status line, for the marker on stderr or the end of the
streams (a script killed between the two lines)."""
_STATUS_MAX = 64
"""Bytes the status line after the marker may take (two numbers)."""


def verdict(marker: bytes) -> bytes:
    """What comes between the outputs' tar and tar's verdict line (`_STATUS`)."""
    return marker + b"tar "


@dataclass
class RawRun:
    """What came out of a container, before outputs are decoded."""

    exit_code: int | None = None
    stdout: str = ""
    stderr: str = ""
    seconds: float = 0.0
    timed_out: bool = False
    oom_killed: bool = False
    flooded: bool = False
    outputs_error: ContainerError | None = None
    """Why ``/var/outputs`` could not be collected (a link out, past the disk limit...)."""
    address: str | None = None
    """The container's address on an allow-list's network: its proxy logs requests by it."""


@dataclass(frozen=True)
class _Collect:
    """Where a run's outputs go."""

    dest: Path
    names: Collection[str]
    limit: int
    deadline: float


def own_command(command: list[str], names: Collection[str], limits: ContainerSetup) -> list[str]:
    """``command`` wrapped in `OWN_SCRIPT`, as a container's own process (`script_input`
    gives it the marker and the environment)."""
    lifetime = str(_pool.lifetime(limits, spare=False))
    return ["sh", "-c", OWN_SCRIPT, WRAPPER, lifetime, str(len(names)), *names, *command]


def script_input(marker: bytes, env: Mapping[str, str]) -> bytes:
    """What `OWN_SCRIPT` reads on stdin: the marker's line, then one ``export`` per variable
    (each value single-quoted: any text without NUL, newlines included, means itself)."""
    exports = (f"export {name}={shlex.quote(value)}\n" for name, value in env.items())
    return marker + b"\n" + "".join(exports).encode()


class _Reader:
    """Drains a run's output stream into events and a capped transcript, secrets masked, and
    reads what follows the marker on stdout: the status line, then the outputs' tar.

    Each stream has its own `StreamMasker`, so a secret split across chunks is still masked;
    output that could be the start of the marker is held back until the next chunk tells.
    `close` releases what was held back and stops taking output (a background child may keep
    the stream open after the run ended). ``collected`` is set once the status line and the
    tar were read (or failed, or the stream ended, or the output passed the cap).
    """

    def __init__(
        self,
        stream: Any,
        on_event: EventCallback,
        cap: int,
        scrub: tuple[str, ...],
        marker: bytes = b"",
        collect: _Collect | None = None,
    ) -> None:
        self.stream = stream
        self.on_event = on_event
        self.cap = cap
        self.size = 0
        self.flooded = False
        self.parts: dict[Stream, list[str]] = {"stdout": [], "stderr": []}
        self.marker = marker
        self.collect = collect
        self.done = threading.Event()
        """Set when the stream ended or the output passed the cap."""
        self.collected = threading.Event()
        self.outputs_error: BaseException | None = None
        self.failure: BaseException | None = None
        """What broke the reader itself (an ``on_event`` that raised...): the run raises it."""
        self.status: tuple[int, int] | None = None
        """The script's (exit status, OOM kills), once its line came."""
        self._maskers = {name: StreamMasker(scrub) for name in self.parts}
        self._lock = threading.RLock()
        self._closed = False
        self._held: dict[Stream, bytes] = {"stdout": b"", "stderr": b""}
        self.past_marker = False
        """Whether the marker came on stdout: what follows is the script's, not the program's."""
        self.stderr_ended = threading.Event()
        """Set when the marker came on stderr (the program's stderr is all in) or the stream
        ended: stdout and stderr are two pipes, and the program's last stderr may come after
        the status line on stdout."""

    def start(self) -> None:
        """Read on a thread of its own (a bare one: `threading.Thread.start` waits for it to
        run, ~1-3 ms of a warm run on a loaded host)."""
        _thread.start_new_thread(self.run, ())

    def run(self) -> None:
        try:
            chunks = _until_broken(self.stream)
            for out, err in chunks:
                if err:
                    self._stderr_chunk(err)
                if out and not self.past_marker:
                    tail = self._until_marker("stdout", out)
                    if tail is not None:
                        self.past_marker = True
                        self._after_marker(tail, chunks)
                elif out:  # past the script's tar: a program that forged its marker
                    self._spend(len(out))
        except BaseException as exc:  # ours, not the stream's: handed to the caller's thread
            self.failure = exc
        finally:
            self.collected.set()
            self.stderr_ended.set()
            self.done.set()

    def _until_marker(self, stream: Stream, data: bytes) -> bytes | None:
        """Take ``stream`` up to the marker; what follows it, or None."""
        with self._lock:
            data, self._held[stream] = self._held[stream] + data, b""
            at = data.find(self.marker) if self.marker else -1
            if at >= 0:
                self._take(stream, data[:at])
                return data[at + len(self.marker) :]
            keep = overlap(data, self.marker)
            self._held[stream] = data[len(data) - keep :]
            self._take(stream, data[: len(data) - keep])
            return None

    def _stderr_chunk(self, data: bytes) -> None:
        """Take stderr up to its marker; after it only a background child (or a program that
        forged the marker) writes: dropped, but counted against the cap."""
        if self.stderr_ended.is_set():
            self._spend(len(data))
        elif self._until_marker("stderr", data) is not None:
            self.stderr_ended.set()

    def _after_marker(
        self, first: bytes, chunks: Iterator[tuple[bytes | None, bytes | None]]
    ) -> None:
        """Read the status line, then (after exit 0) feed the tar to `extract_outputs`;
        stderr keeps streaming."""
        rest = self._rest(first, chunks)
        head = b""
        for data in rest:
            head += data
            if b"\n" in head or len(head) > _STATUS_MAX:
                break
        line, newline, tail = head.partition(b"\n")
        self.status = _status(line) if newline else None
        try:
            if self.status is None:
                raise ContainerError("the run's status after its marker is broken: run it again")
            if self.status[0] == 0 and self.collect is not None:
                collect = self.collect
                extract_outputs(
                    itertools.chain([tail], rest),
                    collect.dest,
                    collect.names,
                    limit=collect.limit,
                    deadline=collect.deadline,
                    end=verdict(self.marker),
                )
        except BaseException as exc:  # handed to the caller's thread
            self.outputs_error = exc
        finally:
            self.collected.set()

    def _rest(
        self, first: bytes, chunks: Iterator[tuple[bytes | None, bytes | None]]
    ) -> Iterator[bytes]:
        """Stdout after the marker, chunk by chunk; stderr is taken as it comes."""
        if first:
            yield first
        for out, err in chunks:
            if err:
                self._stderr_chunk(err)
            if out:
                yield out

    def _take(self, stream: Stream, data: bytes) -> None:
        with self._lock:
            if not data or not self._spend(len(data)):  # the run is over, or past the cap
                return
            self._emit(stream, self._maskers[stream].feed(data))

    def _spend(self, size: int) -> bool:
        """Count ``size`` bytes against the output cap: whatever the stream carries past the
        script's own lines counts, dropped or not, or a program that forged its marker could
        make the host read without end. False once past the cap (the run is stopped)."""
        with self._lock:
            if self._closed:  # the run is over: what a background child writes is not its
                return False
            self.size += size
            if self.size > self.cap:
                self.flooded = True
                self.done.set()
                self.collected.set()
            return not self.flooded

    def close(self) -> None:
        """End of the run: the held-back text goes out (masked), later output is dropped."""
        with self._lock:
            if self._closed:
                return
            for stream, held in self._held.items():
                self._take(stream, held)
            self._held = {"stdout": b"", "stderr": b""}
            self._closed = True
            for stream, masker in self._maskers.items():
                self._emit(stream, masker.flush())

    def _emit(self, stream: Stream, text: str) -> None:
        if text:
            self.parts[stream].append(text)
            self.on_event(Output(stream, text))


def _until_broken(stream: Any) -> Iterator[tuple[bytes | None, bytes | None]]:
    """The stream's chunks until it ends or breaks: it breaks when the container is killed or
    `_close` hangs up, and that is its end too."""
    try:
        yield from stream
    except Exception:
        return


def _status(line: bytes) -> tuple[int, int] | None:
    """(exit status, OOM kills) from the script's status line, None if it is not one."""
    match = re.fullmatch(rb"(\d{1,3}) (\d{1,19})", line)
    return (int(match.group(1)), int(match.group(2))) if match else None


def _link_tree(source: Path, dest: Path) -> None:
    """Put the staged files in the container's mount: hard links, so no data is copied."""

    def link(src: str, dst: str) -> None:
        try:
            os.link(src, dst)
        except OSError:  # another filesystem
            shutil.copy2(src, dst)

    shutil.copytree(source, dest, copy_function=link, symlinks=True, dirs_exist_ok=True)


def _until(event: threading.Event, until: float, cancel: threading.Event | None) -> bool:
    """Wait for ``event`` up to ``until``; `SandboxCancelled` once ``cancel`` is set."""
    while not event.is_set():
        if cancel is not None and cancel.is_set():
            raise SandboxCancelled("the run was cancelled; its container was removed")
        remaining = until - time.monotonic()
        if remaining <= 0:
            return False
        event.wait(min(_POLL, remaining))
    return True


_Ended = tuple[bool, int | None, bool]
"""How a run ended: (False, None, False) on timeout, else (True, its exit code, whether it was
killed for memory); the exit code is None when the output cap stopped it."""


def _died(
    client: DockerClient, slot: Slot, deadline: float, cancel: threading.Event | None
) -> _Ended:
    """How the run's container died, from the engine's events once it is gone (`death`);
    a timeout if it outlives the deadline."""
    gone = _pool.wait_gone(slot.container, deadline, cancel)
    if cancel is not None and cancel.is_set():
        raise SandboxCancelled("the run was cancelled; its container was removed")
    if not gone:
        return False, None, False
    return (True, *death(client, slot.container.id or "", slot.born))


def _wait(
    client: DockerClient,
    slot: Slot,
    reader: _Reader,
    deadline: float,
    cancel: threading.Event | None,
) -> _Ended:
    """Wait for the script's status line (and the tar after it), the output cap, or the
    reader's failure: the run is over then, though its container is not. Without the line
    (and the reader whole) the script died (OOM, a kill from outside, gVisor's whole sandbox
    gone): the engine's events say how, once it is gone.

    Asks the engine too (`_ASK`): a container that died while its stream stays open (under
    gVisor an exec's stream did) must not keep the run waiting until the timeout.
    """
    poll = _ASK
    while not _until(reader.collected, min(time.monotonic() + poll, deadline), cancel):
        if time.monotonic() >= deadline:
            return False, None, False
        if not _running(client, slot):
            _until(reader.collected, time.monotonic() + _ASK, cancel)  # what is still on its way
            break
        poll = min(2 * poll, _ASK_CEILING)
    if reader.flooded or reader.failure is not None:  # the run raises the failure
        return True, None, False
    if reader.status is not None:
        # stdout and stderr are two pipes: the program's last stderr may come after the
        # status line (CI lost an `exec: python3: not found` so); it is all in once the
        # marker came on stderr too (waiting for the streams' end instead took ~40 ms more)
        _until(reader.stderr_ended, time.monotonic() + _TRAILING, cancel)
        code, kills = reader.status
        return True, code, code == SIGKILLED and kills > 0
    return _died(client, slot, deadline, cancel)


def _running(client: DockerClient, slot: Slot) -> bool:
    from docker.errors import NotFound

    try:
        return bool(client.api.inspect_container(slot.container.id)["State"]["Running"])
    except NotFound:
        return False


def _stage(slot: Slot, inputs_dir: Path, program_dir: Path) -> None:
    """Put the run's inputs and program into this container's own mounts."""
    _link_tree(inputs_dir, slot.inputs)
    _link_tree(program_dir, slot.program)


def _start_own(client: DockerClient, slot: Slot, stdin: bytes, staged: tuple[Path, Path]) -> Any:
    """Stage the run into ``slot``, attach, write the script's stdin, start: the stream."""
    _stage(slot, *staged)
    attached = Attached(client, slot.container.id or "")
    try:
        attached.send(stdin)
        slot.container.start()
    except BaseException:
        attached.close()
        raise
    return attached


def _start_warm(slot: Slot, header: bytes, staged: tuple[Path, Path]) -> Any:
    """Stage the run into a ready spare (`_pool.acquire` probed it) and hand its waiter the
    program (`_warm.header`): the stream, which is the run's from now on."""
    attached = slot.attached
    assert attached is not None  # a spare's
    _stage(slot, *staged)
    attached.send(header)
    return attached


def run_container(
    client: DockerClient,
    *,
    image: str,
    command: list[str],
    env: Mapping[str, str],
    inputs_dir: Path,
    program_dir: Path,
    outputs_dir: Path | None,
    limits: ContainerSetup,
    on_event: EventCallback,
    scrub: tuple[str, ...] = (),
    cancel: threading.Event | None = None,
    output_names: Collection[str] = (),
    asked: float | None = None,
) -> RawRun:
    """Run ``command`` once in a container of its own and remove it, whatever happens.

    ``outputs_dir``, when given, receives the entries ``output_names`` of ``/var/outputs``
    after a clean exit (see `extract_outputs`), within the same timeout as the code.
    Secret values in ``scrub`` are masked in the transcript and the live output. Setting
    ``cancel`` stops the run (`SandboxCancelled`) within a poll interval. ``asked``: when the
    caller asked for the run (`_pool.acquire`).
    """
    raw = RawRun()
    names = tuple(output_names) if outputs_dir is not None else ()
    marker = f"{MARKER_START}{secrets.token_hex(16)}\x1e".encode()
    limits = _pool.keyed(client, limits)
    slot = _pool.acquire(client, image, limits, own_command(command, names, limits), asked)
    annotate({"container.id": slot.container.id})  # on the attempt's span, if traced
    staged = (inputs_dir, program_dir)
    clean = False
    stream: Any = None
    reader: _Reader | None = None
    try:
        if slot.own:
            stream = _start_own(client, slot, script_input(marker, env), staged)
        else:
            stream = _start_warm(slot, _warm.header(command, env, marker, names), staged)
        if limits.network not in ("none", "bridge"):  # an allow-list's: its requests' account
            from ._requests import address_of

            raw.address = address_of(client, slot.container.id or "", str(limits.network))
        start = time.monotonic()
        deadline = start + limits.timeout
        collect = None
        if outputs_dir is not None:
            limit = parse_size(limits.resources.disk)
            collect = _Collect(outputs_dir, names, limit, deadline)
        cap = parse_size(limits.resources.output)
        reader = _Reader(stream, on_event, cap, scrub, marker, collect)
        reader.start()
        finished, exit_code, oom = _wait(client, slot, reader, deadline, cancel)
        raw.seconds = time.monotonic() - start
        raw.timed_out = not finished
        reader.close()
        if reader.failure is not None:
            raise reader.failure
        raw.flooded = reader.flooded
        if finished and not reader.flooded:
            raw.exit_code = exit_code
            raw.oom_killed = oom
            error = reader.outputs_error
            if exit_code == 0 and collect is not None and not reader.past_marker:
                error = ContainerError(  # the script writes the marker on every exit 0
                    "the engine's stream of the run ended before its outputs came: run it again"
                )
            if exit_code == 0 and error is not None:
                if not isinstance(error, ContainerError):
                    raise error
                raw.timed_out = isinstance(error, SandboxTimeout)
                raw.outputs_error = None if raw.timed_out else error
        raw.stdout = "".join(reader.parts["stdout"])
        raw.stderr = "".join(reader.parts["stderr"])
        clean = True
    finally:
        if stream is not None:  # an attached stream is the run's alone
            _close(stream)
        # timeout, Ctrl-C, engine error: gone before control returns
        _pool.release(client, slot, now=not clean)
    annotate({"container.oom_killed": raw.oom_killed, "container.timed_out": raw.timed_out})
    return raw


def _close(stream: Any) -> None:
    """Close a run's output stream (the SSH transport cannot: removal then ends it)."""
    from docker.errors import DockerException

    with contextlib.suppress(DockerException, OSError):
        stream.close()

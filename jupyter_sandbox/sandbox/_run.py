"""One run in one container: live output, a wall-clock limit, outputs back, removal always.

The container comes from `_pool` (started ahead, confined); this module stages the run's files
into its mounts (again into a fresh container if the spare died while it waited), runs the code
as an exec, streams its output with secrets masked, enforces the timeout and the
output cap, detects an OOM kill, and hands the container back for removal on every path.

Outputs come back in the same exec as the code (a second exec to tar them cost ~74 ms of a
~250 ms warm run): the exec is a small ``sh`` script (`collecting`) that runs the program and,
when it exits 0, writes a marker of this run and then a tar of ``/var/outputs`` on stdout. The
host streams stdout up to the marker as the run's output, and feeds what follows to the same
hostile-tar reader (`extract_outputs`), entry by entry, with all its limits. The program can
read the marker (same uid) and print it: then it supplies the tar itself, which it could anyway
by writing ``/var/outputs``, and hides the rest of its own stdout; the tar is read as hostile
data either way, and the exit code still comes from the engine.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shutil
import threading
import time
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._errors import ContainerError, SandboxCancelled, SandboxTimeout
from .._events import EventCallback, Output, Stream
from . import _pool
from ._death import death
from ._io import OUTPUTS, extract_outputs
from ._pool import ContainerLimits, Slot
from ._secrets import StreamMasker
from ._spec import parse_size

if TYPE_CHECKING:
    from docker import DockerClient

_POLL = 0.05
"""Seconds between looks at the cancel flag and the deadline."""
_ASK = 0.2
_MAX_ASK = 0.8
"""The engine is asked whether the exec still runs after `_ASK` s, then at doubling intervals up
to `_MAX_ASK`: the stream's end says so for free (most runs end before the first question),
the question is only for a background child that keeps the stream open."""
_SIGKILLED = 128 + 9
WRAPPER = "jupyter-sandbox"
"""The collecting script's ``$0``: ``sh`` names it in its own errors (`collecting`)."""
_COLLECT = """m=$1 n=$2
shift 2
(shift "$n"; exec "$@")
rc=$?
[ "$rc" -eq 0 ] || exit "$rc"
i=0
while [ "$i" -lt "$n" ]; do set -- "$@" "$1"; shift; i=$((i + 1)); done
shift $(($# - n))
printf %s "$m"
tar -C {outputs} -cf - -- "$@" 2>/dev/null
exit 0
""".replace("{outputs}", OUTPUTS)


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


@dataclass(frozen=True)
class _Collect:
    """Where a run's outputs go, and the marker that starts their tar on stdout."""

    dest: Path
    names: Collection[str]
    limit: int
    deadline: float
    marker: bytes


def collecting(command: list[str], names: Collection[str], marker: bytes) -> list[str]:
    """``command`` wrapped so that, when it exits 0, ``marker`` and a tar of ``names`` under
    ``/var/outputs`` follow its output on stdout; the exit code is the command's.

    Arguments, not string building: the names (then the command) are ``sh``'s positional
    parameters; the command runs in a subshell that drops the names, the tar gets only them.
    """
    return ["sh", "-c", _COLLECT, WRAPPER, marker.decode(), str(len(names)), *names, *command]


class _Reader(threading.Thread):
    """Drains an exec's output stream into events and a capped transcript, secrets masked,
    and unpacks the outputs' tar that follows the marker on stdout (`_Collect`).

    Each stream has its own `StreamMasker`, so a secret split across chunks is still masked;
    stdout that could be the start of the marker is held back until the next chunk tells.
    `close` releases what was held back and stops taking output (a background child may keep
    the stream open after the run ended). ``collected`` is set once the tar was read (or
    failed, or the stream ended).
    """

    def __init__(
        self,
        stream: Any,
        on_event: EventCallback,
        cap: int,
        scrub: tuple[str, ...],
        collect: _Collect | None = None,
    ) -> None:
        super().__init__(daemon=True)
        self.stream = stream
        self.on_event = on_event
        self.cap = cap
        self.size = 0
        self.flooded = False
        self.parts: dict[Stream, list[str]] = {"stdout": [], "stderr": []}
        self.collect = collect
        self.done = threading.Event()
        """Set when the stream ended or the output passed the cap."""
        self.collected = threading.Event()
        self.outputs_error: BaseException | None = None
        self._maskers = {name: StreamMasker(scrub) for name in self.parts}
        self._lock = threading.RLock()
        self._closed = False
        self._held = b""
        self.past_marker = False
        """Whether the marker came: what follows is the outputs' tar."""

    def run(self) -> None:
        try:
            chunks: Iterator[tuple[bytes | None, bytes | None]] = iter(self.stream)
            for out, err in chunks:
                if err:
                    self._take("stderr", err)
                if out and not self.past_marker:
                    tail = self._stdout(out)
                    if tail is not None:
                        self._unpack(tail, chunks)
        except Exception:  # the stream breaks when the container is killed: that is the end
            return
        finally:
            self.collected.set()
            self.done.set()

    def _stdout(self, data: bytes) -> bytes | None:
        """Take stdout up to the marker; what follows it (the tar's start), or None."""
        marker = self.collect.marker if self.collect is not None else b""
        with self._lock:
            data, self._held = self._held + data, b""
            at = data.find(marker) if marker else -1
            if at >= 0:
                self.past_marker = True
                self._take("stdout", data[:at])
                return data[at + len(marker) :]
            keep = _overlap(data, marker)
            self._held = data[len(data) - keep :]
            self._take("stdout", data[: len(data) - keep])
            return None

    def _unpack(self, first: bytes, chunks: Iterator[tuple[bytes | None, bytes | None]]) -> None:
        """Feed the tar after the marker to `extract_outputs`; stderr keeps streaming."""
        collect = self.collect
        assert collect is not None  # a marker was found, so there is one

        def tar() -> Iterator[bytes]:
            if first:
                yield first
            for out, err in chunks:
                if err:
                    self._take("stderr", err)
                if out:
                    yield out

        try:
            extract_outputs(
                tar(), collect.dest, collect.names, limit=collect.limit, deadline=collect.deadline
            )
        except BaseException as exc:  # handed to the caller's thread
            self.outputs_error = exc
        finally:
            self.collected.set()

    def _take(self, stream: Stream, data: bytes) -> None:
        with self._lock:
            if self._closed or self.flooded or not data:
                return
            self.size += len(data)
            if self.size > self.cap:
                self.flooded = True
                self.done.set()
                return
            self._emit(stream, self._maskers[stream].feed(data))

    def close(self) -> None:
        """End of the run: the held-back text goes out (masked), later output is dropped."""
        with self._lock:
            if self._closed:
                return
            held, self._held = self._held, b""
            self._take("stdout", held)
            self._closed = True
            for stream, masker in self._maskers.items():
                self._emit(stream, masker.flush())

    def _emit(self, stream: Stream, text: str) -> None:
        if text:
            self.parts[stream].append(text)
            self.on_event(Output(stream, text))


def _overlap(data: bytes, marker: bytes) -> int:
    """Length of the longest end of ``data`` that begins ``marker`` (held back for now)."""
    for size in range(min(len(marker) - 1, len(data)), 0, -1):
        if data.endswith(marker[:size]):
            return size
    return 0


def _link_tree(source: Path, dest: Path) -> None:
    """Put the staged files in the container's mount: hard links, so no data is copied."""

    def link(src: str, dst: str) -> None:
        try:
            os.link(src, dst)
        except OSError:  # another filesystem
            shutil.copy2(src, dst)

    shutil.copytree(source, dest, copy_function=link, symlinks=True, dirs_exist_ok=True)


def _exec_stream(
    client: DockerClient, slot: Slot, cmd: list[str], env: Mapping[str, str]
) -> tuple[str, Any]:
    exec_id = client.api.exec_create(
        slot.container.id,
        cmd,
        stdout=True,
        stderr=True,
        environment=dict(env),
        user=slot.user,
        workdir="/tmp",
    )["Id"]
    return exec_id, client.api.exec_start(exec_id, stream=True, demux=True)


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


def _wait(
    client: DockerClient,
    exec_id: str,
    reader: _Reader,
    deadline: float,
    cancel: threading.Event | None,
) -> tuple[bool, int | None]:
    """Wait for the exec to end (or the output cap): (False, None) on timeout, else (True,
    its exit code, None if the cap stopped it).

    Waits on the stream, and asks the engine too (`_ASK`): a background child that keeps
    stdout open must not keep the run alive after the main process exited.
    """
    poll = _ASK
    while not _until(reader.done, min(time.monotonic() + poll, deadline), cancel):
        if time.monotonic() >= deadline:
            return False, None
        state = client.api.exec_inspect(exec_id)
        if not state["Running"]:
            return _exited(reader, state["ExitCode"], deadline, cancel)
        poll = min(2 * poll, _MAX_ASK)
    if reader.flooded:
        return True, None
    return True, client.api.exec_inspect(exec_id)["ExitCode"]


def _exited(
    reader: _Reader, code: int, deadline: float, cancel: threading.Event | None
) -> tuple[bool, int | None]:
    """The program exited and something still holds its stream: trailing output gets a
    moment; after exit 0, the outputs' tar is read to its end (it is all written by then)."""
    if reader.collect is not None and code == 0:
        if not _until(reader.collected, deadline, cancel):
            return False, None
    else:
        _until(reader.done, time.monotonic() + _POLL, cancel)
    return True, code


def _stage(slot: Slot, inputs_dir: Path, program_dir: Path) -> None:
    """Put the run's inputs and program into this container's own mounts."""
    _link_tree(inputs_dir, slot.inputs)
    _link_tree(program_dir, slot.program)


def _start_exec(
    client: DockerClient,
    slot: Slot,
    image: str,
    command: list[str],
    env: Mapping[str, str],
    staged: tuple[Path, Path],
) -> tuple[Slot, str, Any]:
    """Stage the run into ``slot`` and start the code.

    A spare that died while it waited (``docker rm -f``, engine restart, OOM) fails the exec:
    it is replaced once by a fresh container, staged again from ``staged`` (inputs, program),
    since what was staged lives in the dead container's mounts. If the fresh one fails too, the
    engine error propagates: a clear failure, never a run without its files.
    """
    from docker.errors import APIError

    _stage(slot, *staged)
    try:
        return (slot, *_exec_stream(client, slot, command, env))
    except APIError:
        fresh = _pool.replace(client, slot, image)
    try:
        _stage(fresh, *staged)
        return (fresh, *_exec_stream(client, fresh, command, env))
    except BaseException:
        _pool.release(client, fresh, now=True)
        raise


def run_container(
    client: DockerClient,
    *,
    image: str,
    command: list[str],
    env: Mapping[str, str],
    inputs_dir: Path,
    program_dir: Path,
    outputs_dir: Path | None,
    limits: ContainerLimits,
    on_event: EventCallback,
    scrub: tuple[str, ...] = (),
    cancel: threading.Event | None = None,
    output_names: Collection[str] = (),
) -> RawRun:
    """Run ``command`` once in a container of its own and remove it, whatever happens.

    ``outputs_dir``, when given, receives the entries ``output_names`` of ``/var/outputs``
    after a clean exit (see `extract_outputs`), within the same timeout as the code.
    Secret values in ``scrub`` are masked in the transcript and the live output. Setting
    ``cancel`` stops the run (`SandboxCancelled`) within a poll interval.
    """
    from docker.errors import NotFound

    raw = RawRun()
    slot = _pool.acquire(client, image, limits)
    clean = False
    stream: Any = None
    try:
        start = time.monotonic()
        deadline = start + limits.timeout
        collect = None
        if outputs_dir is not None:
            marker = f"\x1e{WRAPPER} outputs {secrets.token_hex(16)}\x1e".encode()
            limit = parse_size(limits.resources.disk)
            collect = _Collect(outputs_dir, tuple(output_names), limit, deadline, marker)
            command = collecting(command, collect.names, marker)
        slot, exec_id, stream = _start_exec(
            client, slot, image, command, env, (inputs_dir, program_dir)
        )
        reader = _Reader(stream, on_event, parse_size(limits.resources.output), scrub, collect)
        reader.start()
        oom: bool | None = None  # known at once when the container itself died under the run
        try:
            finished, exit_code = _wait(client, exec_id, reader, deadline, cancel)
        except NotFound:  # the container died (gVisor: a memory bomb kills the whole sandbox)
            finished, (exit_code, oom) = True, death(client, slot.container.id or "", slot.born)
        raw.seconds = time.monotonic() - start
        raw.timed_out = not finished
        reader.close()
        raw.flooded = reader.flooded
        if finished and not reader.flooded:
            raw.exit_code = exit_code
            if oom is None:
                oom = exit_code == _SIGKILLED and _oom_kills(client, slot) > 0
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
        if stream is not None and not (clean and reader.done.is_set()):
            # a background child may hold it open (removal ends it anyway). One that ended is
            # left alone: its connection may be back in the client's pool, serving another call
            _close(stream)
        # timeout, Ctrl-C, engine error: gone before control returns
        _pool.release(client, slot, now=not clean)
    return raw


def _oom_kills(client: DockerClient, slot: Slot) -> int:
    """OOM kills counted by the container's memory cgroup (v2 or v1).

    Docker's ``State.OOMKilled`` only tracks the container's main process, and here the code
    runs as an exec, so ask the kernel's counter from inside instead.
    """
    files = ["/sys/fs/cgroup/memory.events", "/sys/fs/cgroup/memory/memory.oom_control"]
    _, stream = _exec_stream(client, slot, ["cat", *files], {})
    text = b"".join(out for out, _err in stream if out).decode(errors="replace")
    match = re.search(r"^oom_kill (\d+)$", text, re.MULTILINE)
    return int(match.group(1)) if match else 0


def _close(stream: Any) -> None:
    """Close an exec's output stream (the SSH transport cannot: removal then ends it)."""
    from docker.errors import DockerException

    with contextlib.suppress(DockerException, OSError):
        stream.close()

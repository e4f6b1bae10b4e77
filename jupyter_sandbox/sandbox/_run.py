"""One run in one container: live output, a wall-clock limit, outputs back, removal always.

The container comes from `_pool` (started ahead, confined); this module stages the run's files
into its mounts (again into a fresh container if the spare died while it waited), runs the code
as an exec, streams its output with secrets masked, enforces the timeout and the
output cap, detects an OOM kill, tars ``/var/outputs`` back, and hands the container back for
removal on every path.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import threading
import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._errors import ContainerError, SandboxCancelled, SandboxTimeout
from .._events import EventCallback, Output, Stream
from . import _pool
from ._io import OUTPUTS, extract_outputs
from ._pool import ContainerLimits, Slot
from ._secrets import StreamMasker
from ._spec import parse_size

if TYPE_CHECKING:
    from docker import DockerClient

_POLL = 0.05
_SIGKILLED = 128 + 9
_GONE = 10.0
"""Seconds to wait for the unpacking thread once its container is removed (its stream ends)."""


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


class _Reader(threading.Thread):
    """Drains an exec's output stream into events and a capped transcript, secrets masked.

    Each stream has its own `StreamMasker`, so a secret split across chunks is still masked;
    `close` releases what the maskers held back and stops taking output (a background child
    may keep the stream open after the run ended).
    """

    def __init__(
        self, stream: Any, on_event: EventCallback, cap: int, scrub: tuple[str, ...]
    ) -> None:
        super().__init__(daemon=True)
        self.stream = stream
        self.on_event = on_event
        self.cap = cap
        self.size = 0
        self.flooded = False
        self.parts: dict[Stream, list[str]] = {"stdout": [], "stderr": []}
        self._maskers = {name: StreamMasker(scrub) for name in self.parts}
        self._lock = threading.Lock()
        self._closed = False

    def run(self) -> None:
        try:
            for out, err in self.stream:
                if out:
                    self._take("stdout", out)
                if err:
                    self._take("stderr", err)
        except Exception:  # the stream breaks when the container is killed: that is the end
            return

    def _take(self, stream: Stream, data: bytes) -> None:
        with self._lock:
            if self._closed or self.flooded:
                return
            self.size += len(data)
            if self.size > self.cap:
                self.flooded = True
                return
            self._emit(stream, self._maskers[stream].feed(data))

    def close(self) -> None:
        """End of the run: the held-back text goes out (masked), later output is dropped."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            for stream, masker in self._maskers.items():
                self._emit(stream, masker.flush())

    def _emit(self, stream: Stream, text: str) -> None:
        if text:
            self.parts[stream].append(text)
            self.on_event(Output(stream, text))


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


def _wait(
    client: DockerClient,
    exec_id: str,
    reader: _Reader,
    deadline: float,
    cancel: threading.Event | None,
) -> bool:
    """Wait for the exec to end (or the output cap); False on timeout.

    Waits on the stream, and polls the exec too: a background child that keeps stdout open
    must not keep the run alive after the main process exited.
    """
    while reader.is_alive() and not reader.flooded:
        if cancel is not None and cancel.is_set():
            raise SandboxCancelled("the run was cancelled; its container was removed")
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        reader.join(min(_POLL, remaining))
        if reader.is_alive() and not client.api.exec_inspect(exec_id)["Running"]:
            reader.join(_POLL)
            break
    return True


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
        _pool.remove(fresh)
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
    raw = RawRun()
    slot = _pool.acquire(client, image, limits)
    clean = False
    try:
        start = time.monotonic()
        slot, exec_id, stream = _start_exec(
            client, slot, image, command, env, (inputs_dir, program_dir)
        )
        reader = _Reader(stream, on_event, parse_size(limits.resources.output), scrub)
        reader.start()
        deadline = start + limits.timeout
        finished = _wait(client, exec_id, reader, deadline, cancel)
        raw.seconds = time.monotonic() - start
        raw.timed_out = not finished
        reader.close()
        raw.flooded = reader.flooded
        if finished and not reader.flooded:
            raw.exit_code = client.api.exec_inspect(exec_id)["ExitCode"]
            raw.oom_killed = raw.exit_code == _SIGKILLED and _oom_kills(client, slot) > 0
            if raw.exit_code == 0 and outputs_dir is not None:
                error = _archive_outputs(
                    client, slot, outputs_dir, output_names, limits, deadline, cancel
                )
                raw.timed_out = isinstance(error, SandboxTimeout)
                raw.outputs_error = None if raw.timed_out else error
                raw.seconds = time.monotonic() - start
        raw.stdout = "".join(reader.parts["stdout"])
        raw.stderr = "".join(reader.parts["stderr"])
        clean = True
    finally:
        if clean:
            _pool.remove_later(slot)
        else:  # timeout, Ctrl-C, engine error: gone before control returns
            _pool.remove(slot)
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


def _archive_outputs(
    client: DockerClient,
    slot: Slot,
    dest: Path,
    names: Collection[str],
    limits: ContainerLimits,
    deadline: float,
    cancel: threading.Event | None,
) -> ContainerError | None:
    """Unpack ``names`` of ``/var/outputs`` into ``dest``, tarred from inside (docker cp
    cannot see a tmpfs) and streamed straight into `extract_outputs`: no archive on disk.

    Returns what went wrong (a `SandboxTimeout` past ``deadline``), or None. The unpacking
    runs on a thread so that a ``tar`` the run's code stopped (it can: same user) still ends
    at the deadline. The stream is closed on every path: one left open while ``tar`` still
    writes (unpacking stopped at a bad entry) holds up the container's removal by ~20 s.
    """
    _, stream = _exec_stream(client, slot, ["tar", "-C", OUTPUTS, "-cf", "-", "--", *names], {})
    errors: list[BaseException] = []

    def unpack() -> None:
        try:
            limit = parse_size(limits.resources.disk)
            chunks = (data for data, _err in stream if data)
            extract_outputs(chunks, dest, names, limit=limit, deadline=deadline)
        except BaseException as exc:  # handed to the caller's thread
            errors.append(exc)

    worker = threading.Thread(target=unpack, daemon=True)
    worker.start()
    try:
        while worker.is_alive():
            stop = cancel is not None and cancel.is_set()
            if stop or time.monotonic() > deadline:
                _close(stream)
                _pool.remove(slot)  # ends the stream even where it cannot be closed
                worker.join(_GONE)
                if stop:
                    raise SandboxCancelled("the run was cancelled; its container was removed")
                return SandboxTimeout(f"collecting {OUTPUTS} ran past the run's timeout")
            worker.join(_POLL)
    finally:
        _close(stream)
    if not errors:
        return None
    if isinstance(errors[0], ContainerError):
        return errors[0]
    raise errors[0]


def _close(stream: Any) -> None:
    """Close an exec's output stream (the SSH transport cannot: removal then ends it)."""
    from docker.errors import DockerException

    with contextlib.suppress(DockerException, OSError):
        stream.close()

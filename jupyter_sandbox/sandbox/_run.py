"""One container run: safe defaults, live output, a wall-clock limit, removal on every path.

The container's own process is ``sleep`` (timeout plus a margin) and the code runs as an exec
in it. That ordering buys three things: outputs can live on a size-limited tmpfs and still be
read back (a second exec tars them) so a disk fill cannot reach the host; secrets go into the
exec's environment, never the container's config; and a container whose kernel died removes
itself when the sleep ends (``auto_remove``) even before the next kernel reaps it.
"""

from __future__ import annotations

import atexit
import re
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._events import EventCallback, Output, Stream
from ._baseimage import SANDBOX_UID
from ._client import KIND, LABEL, owner_labels
from ._io import INPUTS, OUTPUTS, PROGRAM
from ._spec import Network, Resources, parse_size

if TYPE_CHECKING:
    from docker import DockerClient
    from docker.models.containers import Container

_USER = f"{SANDBOX_UID}:{SANDBOX_UID}"
_GRACE = 30
"""Seconds the container's sleep outlives the timeout: after that it removes itself."""
_POLL = 0.05
_SIGKILLED = 128 + 9
_live: dict[str, Container] = {}
_live_lock = threading.Lock()
_removals: list[threading.Thread] = []


@dataclass
class Limits:
    timeout: float
    resources: Resources
    network: Network = "none"


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
    chunks: list[tuple[Stream, str]] = field(default_factory=list)


class _Reader(threading.Thread):
    """Drains an exec's output stream into events and a capped transcript."""

    def __init__(
        self, stream: Any, on_event: EventCallback, cap: int, scrub: tuple[str, ...]
    ) -> None:
        super().__init__(daemon=True)
        self.stream = stream
        self.on_event = on_event
        self.cap = cap
        self.scrub = scrub
        self.size = 0
        self.flooded = False
        self.parts: dict[Stream, list[str]] = {"stdout": [], "stderr": []}

    def run(self) -> None:
        try:
            for out, err in self.stream:
                if out and not self.flooded:
                    self._take("stdout", out)
                if err and not self.flooded:
                    self._take("stderr", err)
        except Exception:  # the stream breaks when the container is killed: that is the end
            return

    def _take(self, stream: Stream, data: bytes) -> None:
        self.size += len(data)
        if self.size > self.cap:
            self.flooded = True
            return
        text = data.decode("utf-8", errors="replace")
        for secret in self.scrub:
            text = text.replace(secret, "***")
        self.parts[stream].append(text)
        self.on_event(Output(stream, text))


def _remove(container: Container) -> None:
    from docker.errors import APIError, NotFound

    try:
        container.remove(force=True)
    except NotFound:
        pass
    except APIError as exc:  # "removal already in progress" when auto_remove won the race
        if exc.status_code != 409:
            raise
    with _live_lock:
        _live.pop(container.id or "", None)


def _remove_later(container: Container) -> None:
    """Remove off the caller's path: a clean run's results are ready ~0.2 s before the engine
    has torn the container down. `wait_removed` (and kernel exit) wait for these."""
    thread = threading.Thread(target=_remove, args=(container,), daemon=True)
    with _live_lock:
        _removals[:] = [t for t in _removals if t.is_alive()] + [thread]
    thread.start()


def wait_removed() -> None:
    """Block until every container this process started is gone."""
    with _live_lock:
        pending = list(_removals)
    for thread in pending:
        thread.join()


@atexit.register
def remove_live_containers() -> None:
    """Kernel exit: no container outlives the process that started it."""
    wait_removed()
    with _live_lock:
        containers = list(_live.values())
    for container in containers:
        _remove(container)


def _create(
    client: DockerClient,
    *,
    image: str,
    name: str,
    inputs_dir: Path,
    program_dir: Path,
    limits: Limits,
) -> Container:
    res = limits.resources
    memory = parse_size(res.memory)
    disk = parse_size(res.disk)
    tmpfs_opts = f"rw,nosuid,nodev,size={disk}"
    return client.containers.create(
        image,
        command=["sleep", str(int(limits.timeout) + _GRACE)],
        user=_USER,
        working_dir="/tmp",
        network_mode=limits.network,
        read_only=True,
        tmpfs={
            "/tmp": f"{tmpfs_opts},mode=1777",
            OUTPUTS: f"{tmpfs_opts},mode=0755,uid={SANDBOX_UID},gid={SANDBOX_UID}",
        },
        volumes={
            str(inputs_dir): {"bind": INPUTS, "mode": "ro"},
            str(program_dir): {"bind": PROGRAM, "mode": "ro"},
        },
        cap_drop=["ALL"],
        security_opt=["no-new-privileges"],
        pids_limit=res.pids,
        mem_limit=memory,
        memswap_limit=memory,
        nano_cpus=int(res.cpu * 1e9),
        labels={LABEL: "1", KIND: "run", f"{LABEL}.name": name, **owner_labels()},
        auto_remove=True,
        stdin_open=False,
        tty=False,
    )


def _exec_stream(
    client: DockerClient, container: Container, cmd: list[str], env: Mapping[str, str]
) -> tuple[str, Any]:
    exec_id = client.api.exec_create(
        container.id,
        cmd,
        stdout=True,
        stderr=True,
        environment=dict(env),
        user=_USER,
        workdir="/tmp",
    )["Id"]
    return exec_id, client.api.exec_start(exec_id, stream=True, demux=True)


def _wait(client: DockerClient, exec_id: str, reader: _Reader, deadline: float) -> bool:
    """Wait for the exec to end (or the output cap); False on timeout.

    Waits on the stream, and polls the exec too: a background child that keeps stdout open
    must not keep the run alive after the main process exited.
    """
    while reader.is_alive() and not reader.flooded:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        reader.join(min(_POLL, remaining))
        if reader.is_alive() and not client.api.exec_inspect(exec_id)["Running"]:
            reader.join(_POLL)
            break
    return True


def run_container(
    client: DockerClient,
    *,
    image: str,
    name: str,
    command: list[str],
    env: Mapping[str, str],
    inputs_dir: Path,
    program_dir: Path,
    outputs_archive: Path | None,
    limits: Limits,
    on_event: EventCallback,
    scrub: tuple[str, ...] = (),
) -> RawRun:
    """Run ``command`` once in a fresh container and remove it, whatever happens.

    ``outputs_archive``, when given, receives a tar of ``/var/outputs`` after a clean exit.
    Secret values in ``scrub`` are masked in the transcript and the live output.
    """
    raw = RawRun()
    start = time.monotonic()
    container = _create(
        client,
        image=image,
        name=name,
        inputs_dir=inputs_dir,
        program_dir=program_dir,
        limits=limits,
    )
    with _live_lock:
        _live[container.id or ""] = container
    clean = False
    try:
        container.start()
        exec_id, stream = _exec_stream(client, container, command, env)
        reader = _Reader(stream, on_event, parse_size(limits.resources.output), scrub)
        reader.start()
        finished = _wait(client, exec_id, reader, start + limits.timeout)
        raw.seconds = time.monotonic() - start
        raw.timed_out = not finished
        raw.flooded = reader.flooded
        if finished and not reader.flooded:
            raw.exit_code = client.api.exec_inspect(exec_id)["ExitCode"]
            raw.oom_killed = raw.exit_code == _SIGKILLED and _oom_kills(client, container) > 0
            if raw.exit_code == 0 and outputs_archive is not None:
                _archive_outputs(client, container, outputs_archive)
        raw.stdout = "".join(reader.parts["stdout"])
        raw.stderr = "".join(reader.parts["stderr"])
        clean = True
    finally:
        if clean:
            _remove_later(container)
        else:  # timeout, Ctrl-C, engine error: gone before control returns
            _remove(container)
    return raw


def _oom_kills(client: DockerClient, container: Container) -> int:
    """OOM kills counted by the container's memory cgroup (v2 or v1).

    Docker's ``State.OOMKilled`` only tracks the container's main process, and here the code
    runs as an exec, so ask the kernel's counter from inside instead.
    """
    files = ["/sys/fs/cgroup/memory.events", "/sys/fs/cgroup/memory/memory.oom_control"]
    _, stream = _exec_stream(client, container, ["cat", *files], {})
    text = b"".join(out for out, _err in stream if out).decode(errors="replace")
    match = re.search(r"^oom_kill (\d+)$", text, re.MULTILINE)
    return int(match.group(1)) if match else 0


def _archive_outputs(client: DockerClient, container: Container, dest: Path) -> None:
    """Tar ``/var/outputs`` from inside (docker cp cannot see a tmpfs) into ``dest``."""
    _, stream = _exec_stream(client, container, ["tar", "-C", OUTPUTS, "-cf", "-", "."], {})
    with dest.open("wb") as out:
        for data, _err in stream:
            if data:
                out.write(data)

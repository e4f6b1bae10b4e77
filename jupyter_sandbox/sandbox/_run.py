"""One run in one container: live output, a wall-clock limit, outputs back, removal always.

The container comes from `_pool`. A spare waiting for the run (started ahead, confined) runs
the code as an exec; with none waiting, the container is made for the run and the run is its
own process (a start then an exec cost ~1.2x a ``docker run``). Either way this module stages
the run's files into its mounts, streams its output with secrets masked, enforces the timeout
and the output cap, detects an OOM kill, and hands the container back for removal on every
path.

Outputs come back with the code's output (a second exec to tar them cost ~74 ms of a ~250 ms
warm run): a small ``sh`` script runs the program and then writes a marker of this run, the
program's exit status (and, after a kill, the memory cgroup's OOM kills) on a line, and after
exit 0 a tar of ``/var/outputs`` on stdout, then the marker again with tar's exit status and
first message (`verdict`). The host streams stdout up to the marker as the run's output, and
feeds the tar to the same hostile-tar reader (`extract_outputs`), entry by entry, with all its
limits; a tar that left something out (an unreadable folder) fails the run.

In an exec (`EXEC_SCRIPT`) the exit code comes from the engine, and the marker is an argument.
As the container's own process (`OWN_SCRIPT`), the status line is the end of the run: the
engine reports a container's exit only after tearing it down (network namespace, mounts), so
the host returns when the line (and the tar) came and the container is removed off its path.
That script reads the marker, then the environment (`script_input`), from stdin, written by
the host before the start (`_attach`): neither is in the container's configuration. If the
script dies before its line (OOM, a kill from outside), the engine's events say how it ended
(`death`).

The program can read its marker (same uid: an argument, or the script's memory) and print
it: then it supplies the status and the tar itself; it could exit with that status and write
those files anyway. The tar is read as hostile data either way, and after an exec the exit
code still comes from the engine.
"""

from __future__ import annotations

import contextlib
import dataclasses
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

from .._errors import ContainerError, SandboxCancelled, SandboxTimeout
from .._events import EventCallback, Output, Stream
from .._otel import annotate
from .._secrets import StreamMasker
from . import _pool
from ._attach import Attached
from ._client import engine_of
from ._death import SIGKILLED, death
from ._io import OUTPUTS, extract_outputs, overlap
from ._pool import ContainerLimits, Slot
from ._spec import parse_size

if TYPE_CHECKING:
    from docker import DockerClient

_POLL = 0.05
"""Seconds between looks at the cancel flag and the deadline."""
_ASK = 0.2
_MAX_ASK = 0.8
"""The engine is asked whether the exec (or the container) still runs after `_ASK` s, then at
doubling intervals up to `_MAX_ASK`: the stream says so for free (most runs end before the
first question), the question is only for a background child that keeps an exec's stream
open, or a container that died without its stream ending."""
_TRAILING = 0.5
"""Seconds a run that is the container's own process waits, after its status line, for the
marker on stderr or the end of the streams (a script killed between the two lines)."""
_STATUS_MAX = 64
"""Bytes the status line after the marker may take (two numbers)."""
WRAPPER = "jupyter-sandbox"
"""The scripts' ``$0``: ``sh`` names it in its own errors (`EXEC_SCRIPT`, `OWN_SCRIPT`)."""
_STATUS = """printf '%s' "$m" >&2
printf '%s%s %s\\n' "$m" "$rc" "$o"
[ "$rc" -eq 0 ] && [ "$n" -gt 0 ] || exit "$rc"
i=0 k=0
while [ "$i" -lt "$n" ]; do
if [ ! -x {outputs} ] || [ -e "{outputs}/$1" ] || [ -L "{outputs}/$1" ]
then set -- "$@" "$1"; k=$((k + 1)); fi
shift; i=$((i + 1))
done
shift $(($# - k))
e= t=0
if [ "$k" -gt 0 ]; then exec 3>&1; e=$(tar -C {outputs} -cf - -- "$@" 2>&1 >&3 3>&-); t=$?; fi
l='
'
printf '%star %s %s\\n' "$m" "$t" "${e%%"$l"*}"
exit 0
""".replace("{outputs}", OUTPUTS)
"""The end both scripts share: the marker on stderr (the program's stderr is all before it),
then on stdout the marker, status line and, after exit 0, the outputs' tar (the positional
parameters are the ``n`` names, then the command: only the names that exist go to tar, so
a missing output stays `MissingOutput`), then the marker, ``tar``, and tar's exit status and
first message on a line (`verdict`): tar skips what it cannot read with only that message."""
EXEC_SCRIPT = (
    """m=$1 n=$2
shift 2
(shift "$n"; exec "$@")
rc=$? o=0
[ "$rc" -eq 0 ] || exit "$rc"
"""
    + _STATUS
)
"""In an exec: the engine reports the exit code and OOM kills, so a failure is just exited."""
OWN_SCRIPT = (
    """IFS= read -r m
{ sleep "$1" && kill -KILL -1; } </dev/null >/dev/null 2>&1 &
n=$2
shift 2
(shift "$n"; e=; while IFS= read -r l; do e="$e$l
"; done; eval "$e"; exec "$@" </dev/null)
rc=$? o=0
[ "$rc" -ne 137 ] || for f in /sys/fs/cgroup/memory.events /sys/fs/cgroup/memory/memory.oom_control
do [ -r "$f" ] && while read -r k v; do [ "$k" != oom_kill ] || o=$v; done <"$f"; done
"""
    + _STATUS
)
"""As the container's process (PID 1: it reaps orphans, and the code cannot kill it). The
marker and the environment come on stdin; the environment is evaluated in the subshell that
becomes the program, so no name it sets (``n``, ``IFS``, ``PATH``) reaches the script's own
lines. A background ``sleep`` kills the run at the container's `_pool.lifetime`, should both
the kernel and its watchdog be gone. After a SIGKILL the line carries the OOM kills counted
by the memory cgroup (v2 or v1): the engine's ``OOMKilled`` would come only after teardown."""


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


@dataclass(frozen=True)
class _Collect:
    """Where a run's outputs go."""

    dest: Path
    names: Collection[str]
    limit: int
    deadline: float


def exec_command(command: list[str], names: Collection[str], marker: bytes) -> list[str]:
    """``command`` wrapped in `EXEC_SCRIPT`: when it exits 0, ``marker``, a status line and a
    tar of ``names`` under ``/var/outputs`` follow its output on stdout; the exit code is the
    command's.

    Arguments, not string building: the names (then the command) are ``sh``'s positional
    parameters; the command runs in a subshell that drops the names, the tar gets only them.
    """
    return ["sh", "-c", EXEC_SCRIPT, WRAPPER, marker.decode(), str(len(names)), *names, *command]


def own_command(command: list[str], names: Collection[str], limits: ContainerLimits) -> list[str]:
    """``command`` wrapped in `OWN_SCRIPT`, as a container's own process (`script_input`
    gives it the marker and the environment)."""
    lifetime = str(_pool.lifetime(limits, spare=False))
    return ["sh", "-c", OWN_SCRIPT, WRAPPER, lifetime, str(len(names)), *names, *command]


def script_input(marker: bytes, env: Mapping[str, str]) -> bytes:
    """What `OWN_SCRIPT` reads on stdin: the marker's line, then one ``export`` per variable
    (each value single-quoted: any text without NUL, newlines included, means itself)."""
    exports = (f"export {name}={shlex.quote(value)}\n" for name, value in env.items())
    return marker + b"\n" + "".join(exports).encode()


class _Reader(threading.Thread):
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
        super().__init__(daemon=True)
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


_Ended = tuple[bool, int | None, bool]
"""How a run ended: (False, None, False) on timeout, else (True, its exit code, whether it was
killed for memory); the exit code is None when the output cap stopped it."""


def _wait_exec(
    client: DockerClient,
    slot: Slot,
    exec_id: str,
    reader: _Reader,
    deadline: float,
    cancel: threading.Event | None,
) -> _Ended:
    """Wait for the exec to end (or the output cap).

    Waits on the stream, and asks the engine too (`_ASK`): a background child that keeps
    stdout open must not keep the run alive after the main process exited.
    """
    from docker.errors import NotFound

    poll = _ASK
    try:
        while not _until(reader.done, min(time.monotonic() + poll, deadline), cancel):
            if time.monotonic() >= deadline:
                return False, None, False
            state = client.api.exec_inspect(exec_id)
            if not state["Running"]:
                if not _exited(reader, state["ExitCode"], deadline, cancel):
                    return False, None, False
                return _killed(client, slot, state["ExitCode"], deadline, cancel)
            poll = min(2 * poll, _MAX_ASK)
        if reader.flooded:
            return True, None, False
        code = client.api.exec_inspect(exec_id)["ExitCode"]
        return _killed(client, slot, code, deadline, cancel)
    except NotFound:  # the container died (gVisor: a memory bomb kills the whole sandbox)
        return _died(client, slot, deadline, cancel)


def _killed(
    client: DockerClient,
    slot: Slot,
    code: int,
    deadline: float,
    cancel: threading.Event | None,
) -> _Ended:
    """How an exec that exited with ``code`` ended. After a SIGKILL, the memory cgroup's
    OOM kills, asked from inside the container; if the container died with the exec (under
    gVisor an OOM kill takes the whole sandbox), how it died (`_died`). On a loaded host the
    engine reported the exec's 137 while the container was still dying: the question then
    failed (or found a counter that was no longer the sandbox's), and the run was a
    `ContainerError` or an exit 137 instead of `OutOfMemory`."""
    from docker.errors import APIError

    if code != SIGKILLED:
        return True, code, False
    with contextlib.suppress(APIError):  # NotFound too: the container is gone
        if _oom_kills(client, slot) > 0:
            return True, code, True
        if _running(client, slot):
            return True, code, False
    return _died(client, slot, deadline, cancel)


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


def _exited(reader: _Reader, code: int, deadline: float, cancel: threading.Event | None) -> bool:
    """The program exited and something still holds its stream: trailing output gets a
    moment; after exit 0, the outputs' tar is read to its end (it is all written by then).
    False if that ran past the deadline."""
    if reader.collect is not None and code == 0:
        return _until(reader.collected, deadline, cancel)
    _until(reader.done, time.monotonic() + _POLL, cancel)
    return True


def _wait_own(
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
    gVisor an exec's did) must not keep the run waiting until the timeout.
    """
    poll = _ASK
    while not _until(reader.collected, min(time.monotonic() + poll, deadline), cancel):
        if time.monotonic() >= deadline:
            return False, None, False
        if not _running(client, slot):
            _until(reader.collected, time.monotonic() + _ASK, cancel)  # what is still on its way
            break
        poll = min(2 * poll, _MAX_ASK)
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
    marker = f"\x1e{WRAPPER} outputs {secrets.token_hex(16)}\x1e".encode()
    limits = dataclasses.replace(limits, engine=engine_of(client).url)
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
            if outputs_dir is None:
                marker = b""  # the program runs as the exec itself
            else:
                command = exec_command(command, names, marker)
            slot, exec_id, stream = _start_exec(client, slot, image, command, env, staged)
        start = time.monotonic()
        deadline = start + limits.timeout
        collect = None
        if outputs_dir is not None:
            limit = parse_size(limits.resources.disk)
            collect = _Collect(outputs_dir, names, limit, deadline)
        cap = parse_size(limits.resources.output)
        reader = _Reader(stream, on_event, cap, scrub, marker, collect)
        reader.start()
        if slot.own:
            finished, exit_code, oom = _wait_own(client, slot, reader, deadline, cancel)
        else:
            finished, exit_code, oom = _wait_exec(client, slot, exec_id, reader, deadline, cancel)
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
        if stream is not None and not (
            clean and not slot.own and reader is not None and reader.done.is_set()
        ):
            # a background child may hold it open (removal ends it anyway), and an attached
            # stream is the run's alone. An exec's that ended is left alone: its connection
            # may be back in the client's pool, serving another call
            _close(stream)
        # timeout, Ctrl-C, engine error: gone before control returns
        _pool.release(client, slot, now=not clean)
    annotate({"container.oom_killed": raw.oom_killed, "container.timed_out": raw.timed_out})
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
    """Close a run's output stream (the SSH transport cannot: removal then ends it)."""
    from docker.errors import DockerException

    with contextlib.suppress(DockerException, OSError):
        stream.close()

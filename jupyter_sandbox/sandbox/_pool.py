"""Containers' lives: created confined, started ahead of need, used once, always removed.

Starting a container costs most of a run (~0.3-0.4 s measured, network namespace and all). After
a run takes a container, a fresh one for the same image and limits is started in the background
and waits, unused, for the next run: a warm run then costs an exec, not a start. Every container
still runs exactly one piece of code; a spare never used is just a clean container that sleeps.
A spare not taken within `_IDLE` (5 min) is removed.

The container's own process is ``sleep``; the code runs as an exec in it. That buys: outputs can
live on a size-limited tmpfs and still be read back (an exec tars them), so a disk fill cannot
reach the host; secrets go into the exec's environment, never the container's config.
Removal of a used container happens off the caller's path.

When the kernel dies without cleaning up (SIGKILL, a server that stops waiting), its watchdog
(`_watchdog`, started with its first container) removes its containers at once. The sleep is the
last resort, should the watchdog die too: it lasts `lifetime` (5 min idle + the run's timeout +
30 s), the longest a container can be needed, and then the container removes itself
(``auto_remove``), even if no kernel ever loads the extension again to reap it.

Each container runs as a uid of its own, drawn from a range no host account has (`fresh_uid`):
a process's environment (secrets included) is readable in ``/proc/<pid>/environ`` by every
host process of the same uid, and the image's uid 1000 is the first human user on most desktops.
(Engines that map container uids into a subordinate range, rootless or userns-remapped, keep
the image's uid: there it is no host user's already, and a uid from our range has no mapping.)
"""

from __future__ import annotations

import atexit
import contextlib
import grp
import os
import pwd
import secrets
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from .._accounts import account_lines
from .._errors import ContainerError
from .._owner import temp_prefix
from . import _watchdog
from ._baseimage import SANDBOX_UID
from ._client import KIND, LABEL, owner_labels
from ._io import INPUTS, OUTPUTS, PROGRAM
from ._isolation import Isolation, purge, runtime
from ._spec import Network, Resources, parse_size

if TYPE_CHECKING:
    from docker import DockerClient
    from docker.models.containers import Container

UID_BASE = 2_100_000_000
UID_SPAN = 40_000_000
"""Containers run as ``UID_BASE + n`` (n random, below ``UID_SPAN``): above the accounts of
``/etc/passwd`` (regular users stop at 60000) and systemd's container ranges (up to
1879048191), clear of the Monty workers' uids (``orchestrate._confine.UID_BASE`` + pid, from 2e9)
and below 2^31, where some tools start to misread uids."""
SUBORDINATE_FILES = ("/etc/subuid", "/etc/subgid")
_UID_TRIES = 1000
"""Random draws before `fresh_uid` gives up: only a range nearly all taken runs out."""
_IDLE = 300.0
"""Seconds a spare container waits for a run; then it is removed."""
_MAX_SPARES = 4
"""Spares kept at most (one per image and limits): the least recently started goes first."""
_START_WAIT = 5.0
"""Seconds a run waits for a spare already starting before it starts its own container."""
_GONE_WAIT = 10.0
_GRACE = 30.0
"""Seconds the container's sleep outlives idle time plus timeout (see `lifetime`)."""


@dataclass(frozen=True)
class ContainerLimits:
    """What a container is started with; a spare serves only a run of the same image and
    limits. Not `jupyter_sandbox.Limits`, which bounds an orchestration."""

    timeout: float
    resources: Resources
    network: Network = "none"
    isolation: Isolation = "container"
    """The runtime (`_isolation`): a spare under runc never serves a gVisor run."""


@dataclass
class Slot:
    """A started container that has run nothing yet, and the host directories it mounts."""

    container: Container
    work: Path
    born: float
    limits: ContainerLimits
    uid: int
    expiry: threading.Timer | None = None
    """Removes the slot as a spare nobody took within `_IDLE` (cancelled when it is taken)."""

    @property
    def user(self) -> str:
        """``uid:gid`` for the container and every exec in it (the same number for both)."""
        return f"{self.uid}:{self.uid}"

    @property
    def inputs(self) -> Path:
        return self.work / "inputs"

    @property
    def program(self) -> Path:
        return self.work / "program"


_lock = threading.Lock()
_live: dict[str, Slot] = {}
_spares: dict[tuple[str, ContainerLimits], Slot] = {}
_starting: dict[tuple[str, ContainerLimits], threading.Event] = {}
"""Spares being started: a run waits for one rather than starting a second container."""
_threads: list[threading.Thread] = []
_closing = False


def _background(target: object, *args: object) -> None:
    thread = threading.Thread(target=target, args=args, daemon=True)  # type: ignore[arg-type]
    with _lock:
        _threads[:] = [t for t in _threads if t.is_alive()] + [thread]
    thread.start()


def fresh_uid() -> int:
    """A random uid (and gid) of the reserved range that no host account has: no user or group
    (asked through the name service, so LDAP counts), and no subordinate range of
    ``/etc/subuid``/``/etc/subgid`` (its owner can become those ids in a user namespace)."""
    delegated = [ids for _, _, ranges in account_lines(SUBORDINATE_FILES) for ids in ranges]
    for _ in range(_UID_TRIES):
        uid = UID_BASE + secrets.randbelow(UID_SPAN)
        if any(uid in ids for ids in delegated) or _account(pwd.getpwuid, uid):
            continue
        if not _account(grp.getgrgid, uid):
            return uid
    raise ContainerError(
        f"no free uid in {UID_BASE}..{UID_BASE + UID_SPAN - 1}: host accounts or subordinate "
        "ranges cover it; free part of that range for sandbox containers"
    )


def _account(lookup: Callable[[int], object], uid: int) -> bool:
    """True when the name service knows ``uid`` (``pwd.getpwuid``) or the gid (``grp``)."""
    try:
        lookup(uid)
    except KeyError:
        return False
    return True


@cache
def _host_uids(client: DockerClient) -> bool:
    """True when the container's uids are the host's (a rootful engine without user-namespace
    remapping): only there must the uid be one no host account has. Asked once per engine."""
    options = client.info().get("SecurityOptions") or []
    return not any(o.startswith(("name=rootless", "name=userns")) for o in options)


def lifetime(limits: ContainerLimits) -> int:
    """Seconds a container's ``sleep`` lasts: the longest it can be needed (waiting as a spare,
    then running for up to the timeout), plus a grace period. Past it the container is gone
    even if neither its kernel nor the kernel's watchdog is left to remove it."""
    return int(_IDLE + limits.timeout + _GRACE)


def _start(client: DockerClient, image: str, limits: ContainerLimits) -> Slot:
    _watchdog.ensure_started()
    res = limits.resources
    uid = fresh_uid() if _host_uids(client) else SANDBOX_UID
    memory = parse_size(res.memory)
    tmpfs = f"rw,nosuid,nodev,size={parse_size(res.disk)}"
    work = Path(tempfile.mkdtemp(prefix=temp_prefix("run")))
    for mount in ("inputs", "program"):
        (work / mount).mkdir(mode=0o755)
        os.chmod(work / mount, 0o755)
    try:
        container = client.containers.create(
            image,
            command=["sleep", str(lifetime(limits))],
            runtime=runtime(client, limits.isolation),
            user=f"{uid}:{uid}",
            working_dir="/tmp",
            network_mode=limits.network,
            read_only=True,
            tmpfs={
                "/tmp": f"{tmpfs},mode=1777",
                OUTPUTS: f"{tmpfs},mode=0755,uid={uid},gid={uid}",
            },
            volumes={
                str(work / "inputs"): {"bind": INPUTS, "mode": "ro"},
                str(work / "program"): {"bind": PROGRAM, "mode": "ro"},
            },
            cap_drop=["ALL"],
            security_opt=["no-new-privileges"],
            pids_limit=res.pids,
            mem_limit=memory,
            memswap_limit=memory,
            nano_cpus=int(float(res.cpu) * 1e9),
            labels={LABEL: "1", KIND: "run", **owner_labels()},
            auto_remove=True,
            # a sleep has nothing to wind down: a stop (an engine shutdown stops every
            # container) need not wait 10 s for it to ignore SIGTERM
            stop_signal="SIGKILL",
        )
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    slot = Slot(container, work, time.monotonic(), limits, uid)
    with _lock:
        _live[container.id or ""] = slot
    try:
        container.start()
    except BaseException:
        remove(slot)
        raise
    return slot


def _refill(
    client: DockerClient, image: str, limits: ContainerLimits, ready: threading.Event
) -> None:
    key = (image, limits)
    try:
        with contextlib.suppress(Exception):  # a spare is an optimisation: never an error
            slot = _start(client, image, limits)
            evicted: list[Slot] = []
            with _lock:
                keep = not _closing and key not in _spares
                if keep:
                    while len(_spares) >= _MAX_SPARES:
                        evicted.append(_take(min(_spares, key=lambda k: _spares[k].born)))
                    _spares[key] = slot
                    slot.expiry = threading.Timer(_IDLE, _expire, (key, slot))
                    slot.expiry.daemon = True
                    slot.expiry.start()
            for extra in evicted if keep else [slot]:
                remove(extra)
    finally:
        with _lock:
            _starting.pop(key, None)
        ready.set()


def _take(key: tuple[str, ContainerLimits]) -> Slot:
    """Pop the spare for ``key`` and cancel its expiry (call with `_lock` held)."""
    slot = _spares.pop(key)
    if slot.expiry is not None:
        slot.expiry.cancel()
    return slot


def _expire(key: tuple[str, ContainerLimits], slot: Slot) -> None:
    """An idle spare's time is up: remove it, unless a run took it meanwhile."""
    with _lock:
        if _spares.get(key) is not slot:
            return
        _take(key)
    remove_later(slot)  # tracked, so `quiesce` waits for it


def acquire(client: DockerClient, image: str, limits: ContainerLimits) -> Slot:
    """A started, unused container for one run (a waiting spare if there is one)."""
    key = (image, limits)
    with _lock:
        slot = _take(key) if key in _spares else None
        starting = _starting.get(key)
    if slot is None and starting is not None and starting.wait(_START_WAIT):
        with _lock:
            slot = _take(key) if key in _spares else None
    if slot is not None and time.monotonic() - slot.born > _IDLE:
        remove_later(slot)
        slot = None
    if slot is None:
        slot = _start(client, image, limits)
    with _lock:
        ready = None if key in _starting else _starting.setdefault(key, threading.Event())
    if ready is not None:
        _background(_refill, client, image, limits, ready)
    return slot


def replace(client: DockerClient, slot: Slot, image: str) -> Slot:
    """A fresh container instead of a spare that turned out dead (engine restarted...)."""
    remove(slot)
    return _start(client, image, slot.limits)


def remove(slot: Slot) -> None:
    from docker.errors import APIError, NotFound

    try:
        slot.container.remove(force=True)
    except NotFound:
        pass
    except APIError as exc:  # "removal already in progress" when auto_remove won the race
        if exc.status_code != 409:
            raise
        _wait_gone(slot.container)
    finally:
        if slot.limits.isolation == "gvisor":  # a failed start can leave its sandbox running
            purge(slot.container.id or "")
        shutil.rmtree(slot.work, ignore_errors=True)
        with _lock:
            _live.pop(slot.container.id or "", None)


def _wait_gone(container: Container) -> None:
    """Wait (bounded) for the engine's own removal, so "removed" means gone when we return."""
    from docker.errors import NotFound

    deadline = time.monotonic() + _GONE_WAIT
    while time.monotonic() < deadline:
        try:
            container.reload()
        except NotFound:
            return
        time.sleep(0.05)


def remove_later(slot: Slot) -> None:
    """Remove off the caller's path (a clean run's results are ready before teardown ends)."""
    _background(remove, slot)


def quiesce() -> None:
    """Wait for background starts and removals: afterwards the spares are up and waiting, and
    used containers are gone."""
    with _lock:
        pending = list(_threads)
    for thread in pending:
        thread.join()


def settle() -> None:
    """`quiesce`, then remove the spares: afterwards this process has no container left (tests
    check that; so does kernel exit)."""
    quiesce()
    with _lock:
        spares = [_take(key) for key in list(_spares)]
    for slot in spares:
        remove(slot)


@atexit.register
def _shutdown() -> None:
    """Kernel exit: no container outlives the process that started it."""
    global _closing
    with _lock:
        _closing = True
    settle()
    with _lock:
        left = list(_live.values())
    for slot in left:
        remove(slot)
